// The communicator: the one object a tccl user holds.
//
//   auto store = std::make_shared<tccl::TcpStore>("10.0.0.1", 29500);
//   tccl::Communicator comm(store, rank, worldSize);
//   comm.allreduce(grad.data(), grad.size(), tccl::DataType::Float32, tccl::ReduceOp::Sum);
//   comm.lastCall().traffic.total().payloadSent;   // bytes this rank really sent
//
// Threading: any thread may issue calls; they execute one at a time in issue order,
// which must be the same on every rank. Blocking calls run on the caller's thread;
// asynchronous ones on the communicator's progress thread (see tccl/work.hpp and
// docs/async.md). Two communicators in one process are independent.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>

#include "tccl/error.hpp"
#include "tccl/half.hpp"
#include "tccl/stats.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "tccl/work.hpp"

namespace tccl {

struct CommOptions {
  // Default deadline for every blocking operation of every call (connect, handshake,
  // store, send, receive). Overridden by TCCL_TIMEOUT_MS, and per call.
  std::chrono::milliseconds timeout{300000};
  // Store namespace of this communicator, so several can share one store.
  std::string name = "default";
  // Address to listen on and publish. Empty: the local address of the TcpStore
  // connection (the interface that routes to the store), else 127.0.0.1.
  std::string listenAddress;
  // Pipeline segment size in bytes (0: TCCL_SEGMENT_BYTES, else 1 MiB).
  size_t segmentBytes = 0;
};

struct PreparedAllreduce;

struct AllreduceOptions {
  Algorithm algorithm = Algorithm::Auto;             // TCCL_ALGO applies when this is Auto
  std::optional<std::chrono::milliseconds> timeout;  // default: the communicator's
};

template <typename T>
constexpr DataType dataTypeOf() {
  if constexpr (std::is_same_v<T, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::Float64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DataType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DataType::Int64;
  else if constexpr (std::is_same_v<T, float16>)
    return DataType::Float16;
  else if constexpr (std::is_same_v<T, bfloat16>)
    return DataType::BFloat16;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DataType::Int8;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DataType::UInt8;
  else
    static_assert(sizeof(T) == 0, "tccl: unsupported element type");
}

class Communicator {
 public:
  // Explicit construction: every rank passes the same store and world size and its
  // own rank in [0, size).
  Communicator(std::shared_ptr<Store> store, int rank, int size, CommOptions options = {});

  // From the environment: TCCL_RANK, TCCL_WORLD_SIZE and TCCL_STORE=host:port (a
  // store server already running there), else torchrun's RANK, WORLD_SIZE,
  // MASTER_ADDR, MASTER_PORT (rank 0 hosts the store server on MASTER_PORT unless
  // TORCHELASTIC_USE_AGENT_STORE=True). See docs/env.md.
  static Communicator fromEnv(CommOptions options = {});

  ~Communicator();
  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;

  int rank() const;
  int size() const;

  // Out-of-place all-reduce of count elements. sendbuf == recvbuf is in-place.
  void allreduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                 const AllreduceOptions& options = {});
  // In-place.
  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op,
                 const AllreduceOptions& options = {}) {
    allreduce(buf, buf, count, dtype, op, options);
  }
  template <typename T>
  void allreduce(std::span<T> buf, ReduceOp op = ReduceOp::Sum,
                 const AllreduceOptions& options = {}) {
    allreduce(buf.data(), buf.data(), buf.size(), dataTypeOf<std::remove_const_t<T>>(), op,
              options);
  }
  template <typename T>
  void allreduce(std::span<const T> in, std::span<T> out, ReduceOp op = ReduceOp::Sum,
                 const AllreduceOptions& options = {}) {
    if (in.size() != out.size())
      throwError(ErrorKind::InvalidArgument, "allreduce: input and output sizes differ", rank());
    allreduce(in.data(), out.data(), in.size(), dataTypeOf<T>(), op, options);
  }

  // Asynchronous all-reduce: returns at once; the collective runs on the progress
  // thread in issue order. The buffers must stay valid until the Work completes.
  WorkPtr allreduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                         ReduceOp op, const AllreduceOptions& options = {});
  WorkPtr allreduceAsync(void* buf, size_t count, DataType dtype, ReduceOp op,
                         const AllreduceOptions& options = {}) {
    return allreduceAsync(buf, buf, count, dtype, op, options);
  }
  template <typename T>
  WorkPtr allreduceAsync(std::span<T> buf, ReduceOp op = ReduceOp::Sum,
                         const AllreduceOptions& options = {}) {
    return allreduceAsync(buf.data(), buf.data(), buf.size(), dataTypeOf<std::remove_const_t<T>>(),
                          op, options);
  }

  // The algorithm Auto would run for this many bytes, and why.
  Algorithm chooseAllreduceAlgorithm(size_t bytes, std::string* why = nullptr) const;

  // What the last blocking call did: algorithm, time and its own byte counters (an
  // asynchronous call's are in its Work::stats()). Read it from the issuing thread.
  const CallStats& lastCall() const;
  // Counters since construction or the last resetStats().
  CommStats stats() const;
  void resetStats();

  // Number of collectives issued so far (the next one's sequence number).
  int64_t sequence() const;
  const std::shared_ptr<Store>& store() const;
  // The address:port this rank listens on.
  std::string listenAddress() const;

 private:
  struct Impl;
  PreparedAllreduce prepareAllreduce(const void* sendbuf, void* recvbuf, size_t count,
                                     DataType dtype, ReduceOp op, const AllreduceOptions& options);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tccl
