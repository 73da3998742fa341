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
#include <vector>

#include "tccl/error.hpp"
#include "tccl/half.hpp"
#include "tccl/stats.hpp"
#include "tccl/store.hpp"
#include "tccl/types.hpp"
#include "tccl/work.hpp"

namespace tccl {

struct CommOptions {
  // Default deadline for every blocking operation of every call (connect, handshake,
  // store, send, receive). Overridden by TCCL_TIMEOUT_MS, and per call. In [1 ms,
  // 2^40 ms]: 0 or less (or a per-call or shrink timeout of 0 or less) is an
  // InvalidArgumentError; there is no "wait forever".
  std::chrono::milliseconds timeout{300000};
  // Store namespace of this communicator, so several can share one store.
  std::string name = "default";
  // Address to listen on and publish. Empty: TCCL_SOCKET_IFNAME if set, else the local
  // address of the TcpStore connection (the interface that routes to the store), else
  // 127.0.0.1 (docs/network.md; loopback is refused when the job may span hosts).
  std::string listenAddress;
  // This host's end of the route to the store, for a store that is not a TcpStore (the
  // torch backend's, whose route to MASTER_ADDR it finds): the last choice after
  // listenAddress and TCCL_SOCKET_IFNAME / TCCL_SOCKET_FAMILY, as a TcpStore's own
  // connection is. Empty: none (a TcpStore's route, else 127.0.0.1).
  std::string routeAddress;
  // Pipeline segment size in bytes (0: TCCL_SEGMENT_BYTES, else 1 MiB).
  size_t segmentBytes = 0;
  // Measure the links at construction (measureLinks()); also TCCL_TUNE=startup.
  bool measureLinks = false;
};

// The link model behind Algorithm::Auto: per-message time and bandwidth.
struct LinkEstimate {
  double alphaUs = 0;
  double gbps = 0;
};

struct PreparedCall;

// What a point-to-point receive got.
struct RecvStatus {
  int source = -1;   // the rank that sent the message
  int tag = -1;      // its tag
  size_t count = 0;  // elements received (the message's length; at most the capacity)
};

// Per-call options of every collective.
struct CollectiveOptions {
  Algorithm algorithm = Algorithm::Auto;             // TCCL_ALGO applies when this is Auto
  std::optional<std::chrono::milliseconds> timeout;  // default: the communicator's
};
using AllreduceOptions = CollectiveOptions;

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

  // ---- the other collectives --------------------------------------------------------
  // Conventions (as NCCL and torch.distributed): counts are per rank; buffers whose
  // size is N x count hold rank p's block at offset p x count. Every collective has
  // a blocking form and an ...Async form returning a Work. Root-only buffers may be
  // null on other ranks. See docs/collectives.md.

  // out[count] on rank r = op over ranks of in[r*count .. (r+1)*count). in: N*count.
  void reduceScatter(const void* sendbuf, void* recvbuf, size_t recvCount, DataType dtype,
                     ReduceOp op, const CollectiveOptions& options = {});
  WorkPtr reduceScatterAsync(const void* sendbuf, void* recvbuf, size_t recvCount, DataType dtype,
                             ReduceOp op, const CollectiveOptions& options = {});
  // out[N*count]: block p is rank p's in[count]. In place when
  // sendbuf == recvbuf + rank*count*size.
  void allGather(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                 const CollectiveOptions& options = {});
  WorkPtr allGatherAsync(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                         const CollectiveOptions& options = {});
  // Every rank's recvbuf = root's sendbuf (sendbuf is read at the root only; pass
  // the same buffer for both to broadcast in place).
  void broadcast(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root,
                 const CollectiveOptions& options = {});
  void broadcast(void* buf, size_t count, DataType dtype, int root,
                 const CollectiveOptions& options = {}) {
    broadcast(buf, buf, count, dtype, root, options);
  }
  WorkPtr broadcastAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root,
                         const CollectiveOptions& options = {});
  // root's recvbuf = op over ranks of sendbuf (recvbuf is written at the root only).
  void reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
              int root, const CollectiveOptions& options = {});
  WorkPtr reduceAsync(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                      int root, const CollectiveOptions& options = {});
  // Returns once every rank has entered the barrier.
  void barrier(const CollectiveOptions& options = {});
  WorkPtr barrierAsync(const CollectiveOptions& options = {});
  // out block p = rank p's in block r. in and out: N*count each, distinct buffers.
  void allToAll(const void* sendbuf, void* recvbuf, size_t countPerRank, DataType dtype,
                const CollectiveOptions& options = {});
  WorkPtr allToAllAsync(const void* sendbuf, void* recvbuf, size_t countPerRank, DataType dtype,
                        const CollectiveOptions& options = {});
  // root's out[N*count]: block p = rank p's in[count].
  void gather(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype, int root,
              const CollectiveOptions& options = {});
  WorkPtr gatherAsync(const void* sendbuf, void* recvbuf, size_t sendCount, DataType dtype,
                      int root, const CollectiveOptions& options = {});
  // rank p's out[count] = root's in block p (in: N*count, read at the root).
  void scatter(const void* sendbuf, void* recvbuf, size_t recvCount, DataType dtype, int root,
               const CollectiveOptions& options = {});
  WorkPtr scatterAsync(const void* sendbuf, void* recvbuf, size_t recvCount, DataType dtype,
                       int root, const CollectiveOptions& options = {});
  // ---- point to point (docs/protocol.md, "Point to point") ----------------------------
  // MPI's semantics. A receive matches on its source (or kAnySource) and tag (or
  // kAnyTag); messages between two ranks with the same tag are received in the order
  // they were sent, other tags match independently. Sends and receives progress
  // concurrently with each other and with collectives, whatever the order in which the
  // ranks post them: a pattern where every rank posts its operations and then waits
  // always completes. They take no collective sequence number. A receive's count is
  // its capacity: a shorter message is received whole (RecvStatus / Work::stats().bytes
  // says how long), a longer one fails as truncation on both ends. A send completes
  // once its bytes are on the wire; a small one (eager) may complete before the peer
  // posted its receive, as MPI_Send may. A deadline passed fails the operation with a
  // TimeoutError naming the peer and the tag.
  void send(const void* buf, size_t count, DataType dtype, int peer, int tag,
            const CollectiveOptions& options = {});
  RecvStatus recv(void* buf, size_t count, DataType dtype, int source, int tag,
                  const CollectiveOptions& options = {});
  WorkPtr sendAsync(const void* buf, size_t count, DataType dtype, int peer, int tag,
                    const CollectiveOptions& options = {});
  // The Work's source() and tag() name the message received.
  WorkPtr recvAsync(void* buf, size_t count, DataType dtype, int source, int tag,
                    const CollectiveOptions& options = {});
  // Tag 0.
  void send(const void* buf, size_t count, DataType dtype, int peer,
            const CollectiveOptions& options = {}) {
    send(buf, count, dtype, peer, 0, options);
  }
  RecvStatus recv(void* buf, size_t count, DataType dtype, int source,
                  const CollectiveOptions& options = {}) {
    return recv(buf, count, dtype, source, 0, options);
  }
  WorkPtr sendAsync(const void* buf, size_t count, DataType dtype, int peer,
                    const CollectiveOptions& options = {}) {
    return sendAsync(buf, count, dtype, peer, 0, options);
  }
  WorkPtr recvAsync(void* buf, size_t count, DataType dtype, int source,
                    const CollectiveOptions& options = {}) {
    return recvAsync(buf, count, dtype, source, 0, options);
  }
  // A group, like ncclGroupStart / ncclGroupEnd: between them, point-to-point calls made
  // by this thread are only recorded; groupEnd() posts them all at once, then waits for
  // those made with the blocking forms (send, recv). The async forms' Works complete
  // later, as usual. Groups nest: only the outermost groupEnd() posts. A collective
  // inside a group is an InvalidArgumentError. A group's operations complete
  // independently: a send and a receive never wait on each other's order.
  void groupStart();
  void groupEnd();

  // Measures the per-message time (8-byte ping-pong) and the bandwidth (a
  // bandwidthBytes transfer) between ranks 0 and 1 and makes them every rank's cost
  // model (rank 0's figures are broadcast). Collective: every rank must call it.
  LinkEstimate measureLinks(int iterations = 200, size_t bandwidthBytes = size_t{8} << 20);
  // The model Auto uses now (rank 0's: defaults, tune file, environment, or measured).
  LinkEstimate linkModel() const;

  // The algorithm Auto would run for an all-reduce of this many bytes, and why. With
  // more than one rank the model needs every rank's host: the first call (or the first
  // Auto all-reduce) reads them from the store, waiting until every rank has joined.
  Algorithm chooseAllreduceAlgorithm(size_t bytes, std::string* why = nullptr) const;

  // What the last blocking call did: algorithm, time and its own byte counters (an
  // asynchronous call's are in its Work::stats()). Read it from the issuing thread.
  const CallStats& lastCall() const;
  // Counters since construction or the last resetStats().
  CommStats stats() const;
  void resetStats();

  // ---- failures (docs/errors.md) -----------------------------------------------------
  // Aborts the communicator: every pending and later call fails with Aborted, and the
  // peers are told (in band and through the store) so they fail fast too. Idempotent.
  void abort(const std::string& reason = "aborted by the application");
  // The first fatal error, if the communicator is aborted.
  std::optional<ErrorInfo> abortCause() const;
  bool aborted() const { return abortCause().has_value(); }
  // After a failure: the survivors agree through the store on who is still alive and
  // return a new communicator over them (ranks renumbered in the old order). Every
  // survivor must call it; ranks that do not arrive within `timeout` (default: the
  // communicator's) are left out. The agreed culprit is never waited for.
  Communicator shrink(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // The old ranks of this communicator's members (identity unless it came from shrink).
  const std::vector<int>& originalRanks() const;

  // Number of collectives issued so far (the next one's sequence number).
  int64_t sequence() const;
  const std::shared_ptr<Store>& store() const;
  // The address:port this rank listens on.
  std::string listenAddress() const;

 private:
  struct Impl;
  // Validates, numbers and runs (or queues) one call.
  WorkPtr issue(PreparedCall&& call, bool async);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tccl
