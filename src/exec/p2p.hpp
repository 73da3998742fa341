// The point-to-point engine: MPI's matching over the p2p links (docs/protocol.md,
// "Point to point").
//
// Matching. A receive names a source (or kAnySource) and a tag (or kAnyTag). An
// arriving message envelope (Eager or Rts) matches the earliest posted receive that
// accepts its source and tag; a posted receive matches the earliest arrived, unmatched
// envelope it accepts (an "unexpected" queue in arrival order). Envelopes leave a
// sender in posting order on one connection per pair, so messages between one pair
// with one tag are non-overtaking; other tags match independently.
//
// Protocol. A message of at most eagerBytes goes eagerly (Eager: header and payload)
// when the receiver's pool has room for it (credits, below); else by rendezvous: Rts
// (header only), the receiver answers Cts once the receive is posted, and the payload
// follows in Chunks of chunkBytes, straight into the receive's buffer. So a large
// message that arrives before its receive is posted costs 24 bytes of memory, and the
// unexpected eager bytes from one peer never exceed poolBytes: the sender spends
// credit for each eager message and the receiver gives it back (Credit) as it
// consumes them; out of credit, the sender uses rendezvous, so it never waits for one.
//
// Progress. Every link is always read (a receiver never stops reading a p2p link:
// eager data has room by credit, the rest is headers or lands in posted buffers), so no
// pattern of posted sends and receives can deadlock on socket buffers. Sends interleave
// control messages (Cts, Credit, Cancel) and envelopes between a large message's
// chunks. Whoever waits drives: a thread in wait() does the I/O itself (the lowest
// latency: no hand-off), and a progress thread drives only while operations are
// pending and no caller is waiting, so posted operations progress while the caller
// computes or runs a collective. It takes up operations posted while nobody drives only
// once a grace (P2PConfig::graceMicros) has passed, so that a caller that waits on them
// at once drives them itself, and no thread is woken for them.
//
// Completion. A send completes once its last byte is handed to the socket (as
// MPI_Send and Gloo's send: an eager send may complete before the receiver posted its
// receive). A receive completes once its payload is in, with the source and tag. A
// deadline passed fails the operation with a TimeoutError naming the peer and tag.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "tccl/error.hpp"
#include "tccl/stats.hpp"
#include "tccl/types.hpp"
#include "transport/link.hpp"

namespace tccl {

struct P2PConfig {
  int rank = 0;
  int worldSize = 1;
  size_t eagerBytes = 64 * 1024;   // TCCL_P2P_EAGER_BYTES
  size_t poolBytes = 256 * 1024;   // TCCL_P2P_POOL_BYTES: eager bytes in flight per peer
  size_t chunkBytes = 512 * 1024;  // TCCL_P2P_CHUNK_BYTES: a rendezvous payload's chunk
  int spinMicros = 50;             // busy-poll before sleeping (as the executor)
  bool adaptiveYield = false;      // as ExecContext::adaptiveYield (exec/spin.hpp)
  // Operations posted while nobody drives are left this long to a caller who comes to
  // wait on them before the progress thread takes them up (0: at once).
  int graceMicros = 50;
  // While callers keep driving, the progress thread's timer looks at the engine twice as
  // late each time it finds one driving, up to this long (at least the grace). A caller
  // that stops waiting with operations pending brings the next look to the grace.
  int idleLookMaxMicros = 8000;
};

// Where the engine gets its links (the transport's p2p lane, or in-memory links).
class P2PLinkSource {
 public:
  virtual ~P2PLinkSource() = default;
  // The p2p link to `peer` once it is up, else nullptr (connecting is then under way).
  // Never blocks. Throws tccl::Error when the peer cannot be reached.
  virtual Link* link(int peer) = 0;
  // Advances connections in progress (accepting, handshakes); never blocks.
  virtual void service() = 0;
  // Every p2p link that is up.
  virtual std::vector<Link*> links() = 0;
  // Readable when service() has something to do or links() changed (-1: never); the
  // engine drains it (it is the engine's own).
  virtual int serviceFd() = 0;
  // Changes whenever links() may have changed; 0: unknown (the engine asks links() at
  // every round).
  virtual uint64_t linksVersion() { return 0; }
  // What is known of the peer's health, for a timeout's message ("its heartbeat is
  // alive, last beat 20 ms ago"); may be empty.
  virtual std::string describePeer(int peer) = 0;
  // Adds what the owner knows to an operation's error before it reaches the caller (a
  // sub-communicator names its ranks' parent and world numbers too).
  virtual void annotate(ErrorInfo& /*info*/) {}
};

// The outcome of one operation.
struct P2PResult {
  int source = -1;   // receive: who sent it
  int tag = -1;      // receive: its tag
  size_t bytes = 0;  // bytes sent or received
  CallStats stats;   // this operation's own counters (payload, wire, messages)
  std::chrono::steady_clock::time_point ended{};  // when it completed (or failed)
};

struct P2POp;
using P2PHandle = std::shared_ptr<P2POp>;
// Called exactly once, on the completing thread, outside the engine's lock; the result
// is the operation's own, handed over (P2POp::result() is empty after it).
using P2PCompletion = std::function<void(P2PResult&&, std::exception_ptr)>;

// One posted send or receive (opaque to callers but for the accessors).
struct P2POp {
  bool isSend = false;
  int peer = -1;  // send: the destination; receive: the source or kAnySource
  int tag = 0;    // send: the tag; receive: the tag or kAnyTag
  uint8_t* buf = nullptr;
  size_t bytes = 0;  // send: message size; receive: capacity
  Deadline deadline = Deadline::never();
  int64_t timeoutMs = -1;
  P2PCompletion onDone;
  // When it was issued: set by the caller (who read the clock for the deadline), else
  // when posted.
  Deadline::Clock::time_point posted{};

  bool done() const { return done_.load(std::memory_order_acquire); }
  const P2PResult& result() const { return result_; }
  std::exception_ptr error() const { return error_; }

  // ---- the engine's ----
  enum class State : uint8_t {
    Created,
    Queued,     // send: waiting for its link or its turn on it; receive: posted
    Envelope,   // send: its Eager or Rts is on the link's queue
    AwaitCts,   // send: Rts sent
    Streaming,  // send: chunks on the queue; receive: matched to an Rts, chunks arriving
    Landing,    // receive: matched to an Eager whose payload is arriving
    Done,
  };
  State state = State::Created;
  uint32_t id = 0;        // send id (envelopes) or receive id (Cts / chunks)
  uint32_t remoteId = 0;  // send: the receiver's receive id (from Cts)
  size_t moved = 0;       // payload bytes moved so far
  size_t expect = 0;      // receive: the matched message's size
  bool cancelOwed = false;
  std::atomic<bool> done_{false};
  P2PResult result_;
  std::exception_ptr error_;
};

class P2PEngine {
 public:
  P2PEngine(P2PConfig config, P2PLinkSource& links);
  ~P2PEngine();  // fails what is pending with Aborted and stops the progress thread
  P2PEngine(const P2PEngine&) = delete;
  P2PEngine& operator=(const P2PEngine&) = delete;

  // Fills a send's (isSend) or receive's fields: for a receive, peer is the source (or
  // kAnySource) and bytes the capacity.
  static void fill(P2POp& op, bool isSend, const void* buf, size_t bytes, int peer, int tag,
                   Deadline deadline, int64_t timeoutMs);
  static P2PHandle makeSend(const void* buf, size_t bytes, int peer, int tag, Deadline deadline,
                            int64_t timeoutMs, P2PCompletion onDone = {});
  static P2PHandle makeRecv(void* buf, size_t capacity, int source, int tag, Deadline deadline,
                            int64_t timeoutMs, P2PCompletion onDone = {});
  // Posts operations as one: none progresses before all are posted (a group).
  void post(std::span<const P2PHandle> ops) { postThenWait(ops, {}); }
  void post(const P2PHandle& op) { post(std::span<const P2PHandle>(&op, 1)); }
  void post(const std::vector<P2PHandle>& ops) { post(std::span<const P2PHandle>(ops)); }
  // Posts `ops` as one and drives progress until every op of `waitFor` completes
  // (rethrowing the first error); the progress thread stays out of it meanwhile.
  void postThenWait(std::span<const P2PHandle> ops, std::span<const P2PHandle> waitFor);
  // Drives progress until `op` completes; rethrows its error.
  void wait(const P2PHandle& op) { waitAll(std::span<const P2PHandle>(&op, 1)); }
  // Drives progress until every op completes; rethrows the first error.
  void waitAll(std::span<const P2PHandle> ops);
  void waitAll(const std::vector<P2PHandle>& ops) { waitAll(std::span<const P2PHandle>(ops)); }
  // Fails every pending and later operation with Aborted (quoting cause), tells the
  // connected peers (an Abort on each p2p link) and ends the links. Idempotent.
  void abort(const ErrorInfo& cause);
  // Operations posted and not completed.
  size_t pending() const;
  // The most eager payload bytes held at once for messages that arrived before their
  // receive (bounded by poolBytes per peer), and the most held now.
  size_t unexpectedBytesPeak() const;

 private:
  struct Unexpected {
    int peer = -1;
    int tag = 0;
    uint32_t sendId = 0;
    size_t bytes = 0;
    bool rendezvous = false;
    bool complete = false;      // eager: the payload is all in
    bool dropped = false;       // consumed by a receive that failed (truncation)
    std::vector<uint8_t> data;  // eager payload
    P2PHandle boundRecv;        // a receive matched while the payload arrives
  };
  struct Tx {  // one frame to send
    wire::MessageHeader header;
    const uint8_t* payload = nullptr;
    P2PHandle op;  // the operation the frame belongs to (null: control)
  };
  struct LinkState {
    Link* link = nullptr;
    int peer = -1;
    bool closed = false;                           // end of file or error: nothing more from it
    ErrorKind closedKind = ErrorKind::PeerClosed;  // why, for operations posted later
    std::string closedWhy;
    // Transmit side.
    TxFrame tx;
    Tx txNow;
    std::deque<Tx> control;         // Cts, Credit, Cancel
    std::deque<P2PHandle> sends;    // envelopes to send, in posting order
    std::deque<P2PHandle> streams;  // sends cleared to stream, in Cts order
    bool wantWrite = false;
    // Receive side.
    RxFrame rx;
    // poll(2) reported input (or an end) on the link since its last read came up short
    // (rx.drained()): read it again.
    bool rxStirred = false;
    bool rxTargetSet = false;
    P2PHandle rxOp;  // the receive the payload lands in
    std::shared_ptr<Unexpected> rxUnexpected;
    std::vector<uint8_t> discard;  // payload nobody wants (truncated, cancelled)
    // Eager credit: what this rank may still send eagerly / owes back.
    size_t credit = 0;
    size_t owed = 0;
  };

  // Everything below is guarded by mu_.
  void postLocked(const P2PHandle& op, std::vector<P2PHandle>& completed);
  void finishWait(std::span<const P2PHandle> ops);
  bool drive(const std::function<bool()>& until, bool yieldToCallers);
  bool pumpAll(std::vector<P2PHandle>& completed);
  bool pumpTx(LinkState& ls, std::vector<P2PHandle>& completed);
  bool pumpRx(LinkState& ls, std::vector<P2PHandle>& completed);
  bool takeTx(LinkState& ls, Tx& t);
  void untakeTx(LinkState& ls, const Tx& t);
  void sentFrame(LinkState& ls, const Tx& t, std::vector<P2PHandle>& completed);
  void onHeader(LinkState& ls, std::vector<P2PHandle>& completed);
  void onMessage(LinkState& ls, std::vector<P2PHandle>& completed);
  void matchEnvelope(LinkState& ls, const wire::MessageHeader& h,
                     std::vector<P2PHandle>& completed);
  bool matchUnexpected(const P2PHandle& recv, std::vector<P2PHandle>& completed);
  void startStreaming(LinkState& ls, const P2PHandle& recv, int peer, uint32_t sendId,
                      size_t bytes);
  LinkState* stateFor(int peer);
  void adoptLinks(std::vector<P2PHandle>& completed);
  void giveCredit(LinkState& ls, size_t bytes);
  bool anyExpired() const;
  // Fails the operations whose deadline passed; health: what is known of each peer.
  void expire(const std::map<int, std::string>& health, std::vector<P2PHandle>& completed);
  void closeLink(LinkState& ls, ErrorKind kind, const std::string& why,
                 std::vector<P2PHandle>& completed);
  void finish(const P2PHandle& op, std::vector<P2PHandle>& completed);
  void fail(const P2PHandle& op, ErrorInfo info, std::vector<P2PHandle>& completed);
  ErrorInfo errorFor(const P2POp& op, ErrorKind kind, std::string why) const;
  void runCompletions(std::vector<P2PHandle>& completed);
  void progressLoop();
  void ensureProgressThread();
  void kick();
  // Wakes the progress thread if it sleeps and now has work nobody else does (mu_ held):
  // after the grace (cfg_.graceMicros, the timer graceFd_) unless `now`; a caller that
  // waits meanwhile drives the work itself, and the progress thread, woken by the timer,
  // finds a waiter and sleeps again.
  void wakeProgressLocked(bool now = false);
  // A caller stopped waiting (mu_ held): as wakeProgressLocked, and if it left operations
  // pending that nobody drives while graceFd_ runs (backed off, perhaps to 8 ms, while
  // callers drove), arms leftFd_ for the grace, so that they start moving a grace after
  // it left.
  void leftPendingLocked();
  // A caller starts waiting (mu_ held): disarms leftFd_ if it runs (the caller drives
  // what it left), so that a caller that waits again at once wakes no thread.
  void callerBackLocked();
  // The progress thread's sleep while it has nothing to drive (mu_ held, released
  // while it sleeps).
  void sleepIdle(std::unique_lock<std::mutex>& lk);
  // Wakes callers waiting on another thread's driving, if any (mu_ held).
  void wakeDriverWaitersLocked();
  Deadline earliestDeadline() const;
  bool hasWork() const;

  P2PConfig cfg_;
  P2PLinkSource& source_;
  mutable std::mutex mu_;
  // Callers waiting for another thread's driving sleep on driverCv_ (woken on
  // completions and when the driving ends). The idle progress thread sleeps in poll(2)
  // on idleFd_ (an eventfd: wake now) and graceFd_ (a timerfd: wake when the grace
  // ends), so that a post does not wake it: woken at every post, it took the engine's
  // lock from the caller posting the rest of its window (a futex wait and a context
  // switch per message; docs/PERFORMANCE.md).
  std::condition_variable driverCv_;
  int idleFd_ = -1;
  int graceFd_ = -1;
  bool graceArmed_ = false;  // graceFd_ runs: the progress thread waits for it
  // The progress thread's: how long it re-arms graceFd_ for when its timer finds a caller
  // driving or waiting (doubled each time up to cfg_.idleLookMaxMicros, reset once it
  // looks).
  std::chrono::microseconds graceBackoff_{0};
  // leftFd_ (a timerfd) runs: a caller stopped waiting with operations pending while
  // graceFd_ was backed off (leftPendingLocked); the next wait disarms it. Set under mu_;
  // the progress thread clears it, without mu_, when the timer fires.
  int leftFd_ = -1;
  std::atomic<bool> leftArmed_{false};
  // Written under mu_; read without it by the progress thread woken by its timer.
  std::atomic<bool> driving_{false};
  // When the last operation was posted, and when graceFd_ was armed for work nobody
  // drives (steady clock, ns): a timer that fires while a caller is still posting (a
  // window of sendAsync / recvAsync) waits for the grace to pass since its last post,
  // within a bound (sleepIdle), so that the progress thread does not take the engine's
  // lock from a caller about to wait.
  std::atomic<int64_t> lastPostNs_{0};
  std::atomic<int64_t> graceArmedNs_{0};
  // When the last operation was posted without a wait (postThenWait), while no wait
  // came since (0: none), and how many posts since the last that moved at once were
  // left to the next drive: the next post soon after is part of a burst
  // (postThenWait).
  int64_t burstPostNs_ = 0;
  int burstDeferred_ = 0;
  void endBurstLocked() {  // a wait ends a burst of posts
    burstPostNs_ = 0;
    burstDeferred_ = 0;
  }
  // pumpTx's scratch for the frames one writev carries behind a link's frame in flight
  // (mu_, held by the one driving thread).
  std::array<Tx, TxFrame::kMaxFramesPerWrite - 1> txMore_;
  std::array<TxFrame, TxFrame::kMaxFramesPerWrite - 1> txMoreFrames_;
  std::array<TxFrame*, TxFrame::kMaxFramesPerWrite> txFrames_{};
  bool progressIdle_ = false;  // the progress thread sleeps in sleepIdle()
  int driverWaiters_ = 0;      // callers sleeping on driverCv_
  std::atomic<int> callersWaiting_{0};
  std::atomic<bool> kicked_{false};  // wakeFd_ was written and not yet drained
  uint64_t linksSeen_ = 0;           // source_.linksVersion() when links() was last read
  bool stop_ = false;
  std::optional<ErrorInfo> aborted_;
  uint32_t nextId_ = 1;
  std::map<int, LinkState> links_;                      // by peer, once the link is up
  std::map<int, std::deque<P2PHandle>> unconnected_;    // sends waiting for their link
  std::deque<P2PHandle> recvs_;                         // posted, unmatched receives, in order
  std::deque<std::shared_ptr<Unexpected>> unexpected_;  // in arrival order
  std::map<uint32_t, P2PHandle> awaitingCts_;           // by send id
  std::map<uint32_t, P2PHandle> streamingRecvs_;        // by receive id
  std::vector<P2PHandle> all_;                          // pending, for deadlines and abort
  size_t unexpectedBytes_ = 0;
  size_t unexpectedPeak_ = 0;
  int wakeFd_ = -1;
  std::thread progress_;
};

}  // namespace tccl
