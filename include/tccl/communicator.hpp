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
  // Pipeline segment size in bytes (0: TCCL_SEGMENT_BYTES, else 1 MiB, and for a ring
  // or halving-doubling all-reduce the cost model's choice of at most 1 MiB).
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
  // ---- uneven collectives (MPI's ...v calls; docs/collectives.md, "Uneven") -----------
  // Counts and displacements are in elements, one entry per rank. An empty displacement
  // list means packed: block p right after block p-1. Blocks a call writes must not
  // overlap. Counts that two ranks must agree on and do not (rank p's send count to q
  // against q's receive count from p) fail the call with a MismatchError naming both
  // ranks, on every rank, never a hang or a partial result passed as success.

  // out block p (recvCounts[p] elements at recvDispls[p]) = rank p's in[sendCount].
  // recvCounts must be the same on every rank, sendCount == recvCounts[rank]. In place
  // when sendbuf == recvbuf + recvDispls[rank] x element size.
  void allGatherV(const void* sendbuf, size_t sendCount, void* recvbuf,
                  std::span<const size_t> recvCounts, std::span<const size_t> recvDispls,
                  DataType dtype, const CollectiveOptions& options = {});
  WorkPtr allGatherVAsync(const void* sendbuf, size_t sendCount, void* recvbuf,
                          std::span<const size_t> recvCounts, std::span<const size_t> recvDispls,
                          DataType dtype, const CollectiveOptions& options = {});
  // MPI_Reduce_scatter: in holds the blocks packed (block p: recvCounts[p] elements);
  // out[recvCounts[rank]] on rank r = op over ranks of block r. recvCounts the same on
  // every rank. In place when recvbuf == sendbuf + (recvCounts[0] + ... +
  // recvCounts[rank-1]) x element size.
  void reduceScatterV(const void* sendbuf, void* recvbuf, std::span<const size_t> recvCounts,
                      DataType dtype, ReduceOp op, const CollectiveOptions& options = {});
  WorkPtr reduceScatterVAsync(const void* sendbuf, void* recvbuf,
                              std::span<const size_t> recvCounts, DataType dtype, ReduceOp op,
                              const CollectiveOptions& options = {});
  // MPI_Alltoallv: sendCounts[p] elements at sendbuf + sendDispls[p] go to rank p, and
  // recvCounts[p] elements from rank p land at recvbuf + recvDispls[p]. Rank p's
  // sendCounts[q] must equal rank q's recvCounts[p]. Distinct buffers.
  void allToAllV(const void* sendbuf, std::span<const size_t> sendCounts,
                 std::span<const size_t> sendDispls, void* recvbuf,
                 std::span<const size_t> recvCounts, std::span<const size_t> recvDispls,
                 DataType dtype, const CollectiveOptions& options = {});
  WorkPtr allToAllVAsync(const void* sendbuf, std::span<const size_t> sendCounts,
                         std::span<const size_t> sendDispls, void* recvbuf,
                         std::span<const size_t> recvCounts, std::span<const size_t> recvDispls,
                         DataType dtype, const CollectiveOptions& options = {});
  // MPI_Gatherv: rank p's in[sendCount] lands at the root's recvbuf + recvDispls[p]
  // (recvCounts[p] elements; both read at the root only). In place at the root when
  // sendbuf == recvbuf + recvDispls[root] x element size.
  void gatherV(const void* sendbuf, size_t sendCount, void* recvbuf,
               std::span<const size_t> recvCounts, std::span<const size_t> recvDispls,
               DataType dtype, int root, const CollectiveOptions& options = {});
  WorkPtr gatherVAsync(const void* sendbuf, size_t sendCount, void* recvbuf,
                       std::span<const size_t> recvCounts, std::span<const size_t> recvDispls,
                       DataType dtype, int root, const CollectiveOptions& options = {});
  // MPI_Scatterv: rank p's out[recvCount] = the root's sendCounts[p] elements at sendbuf
  // + sendDispls[p] (both read at the root only). In place at the root when recvbuf ==
  // sendbuf + sendDispls[root] x element size.
  void scatterV(const void* sendbuf, std::span<const size_t> sendCounts,
                std::span<const size_t> sendDispls, void* recvbuf, size_t recvCount, DataType dtype,
                int root, const CollectiveOptions& options = {});
  WorkPtr scatterVAsync(const void* sendbuf, std::span<const size_t> sendCounts,
                        std::span<const size_t> sendDispls, void* recvbuf, size_t recvCount,
                        DataType dtype, int root, const CollectiveOptions& options = {});

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

  // ---- sub-communicators (docs/collectives.md, "Sub-communicators") ---------------------
  // MPI_Comm_split: every rank of this communicator calls it (it is a collective, in
  // this communicator's order: it runs an all-gather of (color, key)); the ranks that
  // pass the same color form a child, ranked by key, ties by their rank here. A rank
  // passing kNoColor joins no child and gets std::nullopt. Any other negative color is
  // an InvalidArgumentError on every rank, naming the rank that passed it. The child
  // shares this communicator's store, listener, heartbeat thread and job; it has its
  // own connections, sequence numbers and failure state, so it runs concurrently with
  // its parent and siblings, and it outlives its parent if need be.
  static constexpr int kNoColor = -1;
  std::optional<Communicator> split(int color, int key = 0);
  // The same child, built from a member list that every member already knows
  // (MPI_Comm_create_group; torch.distributed.new_group, whose non-members never call
  // in): collective over `ranks` only, which become child ranks 0, 1, ... in the order
  // given. `tag` names the child in the store: the same on every member, never reused
  // with this parent. A rank not in `ranks` gets std::nullopt at once. Repeated or
  // out-of-range ranks and an empty list or tag are an InvalidArgumentError. timeout:
  // the child's default deadline (default: this communicator's).
  std::optional<Communicator> createGroup(
      const std::vector<int>& ranks, const std::string& tag,
      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // A sub-communicator's (split or shrink) ranks in its parent's numbering, and in the
  // world's (the communicator made by the constructor, at the root of the family);
  // identity for that root. Errors of a sub-communicator name ranks in all three.
  const std::vector<int>& parentRanks() const;
  const std::vector<int>& worldRanks() const;
  // Communicators attached to this one's listener, besides its family's root (for tests
  // and the measurements of docs/PERFORMANCE.md).
  size_t attachedCommunicators() const;

  // Number of collectives issued so far (the next one's sequence number).
  int64_t sequence() const;
  const std::shared_ptr<Store>& store() const;
  // The address:port this rank listens on.
  std::string listenAddress() const;

 private:
  struct Impl;
  explicit Communicator(std::unique_ptr<Impl> impl);
  // Validates, numbers and runs (or queues) one call.
  WorkPtr issue(PreparedCall&& call, bool async);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tccl
