// The Communicator's insides, shared by its rooms (docs/architecture.md, "Where things
// live"). Each room keeps its members in a struct of its own and its steps in its own file:
//
//   public calls      communicator.cpp  the Communicator member functions
//                     validate.cpp      argument checks and the algorithm of a call
//   call queue        progress.cpp      issue order, the progress thread, execute's steps
//   failure protocol  heartbeat.cpp     the heartbeat thread and records
//                     failure_protocol.cpp  claim/cause, verdicts, signatures, abort, shrink
//                     failure.hpp       every store key and record of the protocol
//   bootstrap         bootstrap.cpp     settings, job record, transport, topology, leaving
//   sub-communicators split.cpp         split, and the attached construction split and
//                                       shrink share (one listener, one heartbeat thread)
//
// Locks, in the only order they may nest: queue.issueMu, then exec.execMu, then
// failure.hbMu; failure.abortMu is a leaf (nothing is taken while it is held), and so is
// failure.hbMu. The progress thread never holds issueMu and execMu together. The family's
// HeartbeatHub::mu is taken before a member's hbMu, never after.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/collective_spec.hpp"
#include "algorithms/schedule.hpp"
#include "algorithms/select.hpp"
#include "core/call.hpp"
#include "core/failure.hpp"
#include "core/p2p_room.hpp"
#include "core/topology.hpp"
#include "exec/executor.hpp"
#include "tccl/communicator.hpp"
#include "transport/transport.hpp"

namespace tccl {

struct CallPlan;  // one call's schedule and executor context (progress.cpp)

struct Communicator::Impl {
  class HeartbeatHub;  // below

  // ---- failure protocol (heartbeat.cpp, failure_protocol.cpp; docs/errors.md) ----------
  // Declared first, so destroyed last: the transport holds pointers to abortFlag and
  // wakeFd until it is gone.
  struct Failure {
    // The first fatal error. abortMu guards abortCause only; a leaf lock.
    mutable std::mutex abortMu;
    std::optional<ErrorInfo> abortCause;
    // Set with abortCause; read by the executor, which also polls wakeFd (an eventfd
    // made readable on abort) so that an abort from another thread ends its wait.
    std::atomic<bool> abortFlag{false};
    // Set (under abortMu) once abortCause is: checkUsable's lock-free look on every call.
    std::atomic<bool> hasCause{false};
    int wakeFd = -1;
    std::optional<FaultSpec> fault;         // TCCL_FAULT
    std::chrono::milliseconds hbPeriod{0};  // 0: no heartbeats
    // The heartbeat thread's own connection when the store is a TcpStore, so that a
    // long store wait on the caller's thread never holds up a heartbeat.
    std::shared_ptr<Store> hbStore;
    // The connection under hbStore (shared by the family: the hub's thread is its one
    // user but for describePeerHealth; TcpStore serialises its callers).
    std::shared_ptr<Store> hbRaw;
    std::shared_ptr<HeartbeatHub> hbHub;  // the family's heartbeat thread
    bool hbMember = false;                // registered with hbHub
    // hbMu guards running, planPeriod, recent, enteredSeq and completedSeq; a leaf lock.
    std::mutex hbMu;
    Running running;
    // The period while a collective is planned (its hosts read) before it is entered:
    // the others judge this rank by the call's period from its start.
    std::chrono::milliseconds planPeriod{0};
    // The last few collectives this rank ran: published when it fails, so a decider
    // comparing signatures of collective #k finds this rank's even if it has moved on.
    static constexpr size_t kRecent = 4;
    std::array<std::pair<int64_t, Running>, kRecent> recent{};
    int64_t enteredSeq = -1;
    int64_t completedSeq = -1;
    int shrinks = 0;  // shrink() calls so far (the thread that calls shrink)
    // The hub's thread only (and the constructor, before it joins the hub): the record's
    // beat (one more for every record published), and the stuck watch's collective.
    int64_t hbBeat = 0;
    int64_t stuckSeq = -1;
    std::chrono::steady_clock::time_point stuckSince;
    bool stuckCounted = false;  // counted into stuck/<stuckSeq>
  } failure;

  // ---- bootstrap and topology (bootstrap.cpp): set by the constructor, then read-only
  // (but `model`, which measureLinks sets, and `ownedServer`, which shrink hands on) ----
  struct Boot {
    std::shared_ptr<Store> userStore;
    std::shared_ptr<Store> store;  // namespaced: tccl/<name>/
    // The store server this process hosts (fromEnv); shared by the sub-communicators,
    // which need the store as long as they live. waitForExits: this communicator is the
    // one that waits, at destruction, until every rank has counted itself out.
    std::shared_ptr<TcpStoreServer> ownedServer;
    bool waitForExits = false;
    bool joined = false;  // construction completed
    int rank = 0;
    int size = 1;
    CommOptions options;
    std::chrono::milliseconds timeout{0};  // the communicator's: options, TCCL_TIMEOUT_MS
    size_t segmentBytes = 0;
    // TCCL_SEGMENT_BYTES or CommOptions::segmentBytes set it: every call uses it. Else
    // an all-reduce's segment comes from the cost model (algo::allreduceSegmentBytes),
    // at most segmentBytes (the default, 1 MiB).
    bool segmentFixed = false;
    int spinMicros = 0;
    // Drivers may stop yielding after a slow yield (exec/spin.hpp): the family's world is
    // no larger than rank 0's cores. Set once the job record is read; children inherit it.
    bool adaptiveYield = false;
    std::optional<Algorithm> envAlgorithm;  // TCCL_ALGO
    algo::LinkModel model;                  // rank 0's (the job record)
    uint64_t jobId = 0;
    std::vector<int> originalRanks;
    // Each rank's rank in the parent's and in the world's numbering (the world: the
    // family's root, made by the constructor); identity for the root (sub == false).
    std::vector<int> parentRanks;
    std::vector<int> worldRanks;
    bool sub = false;  // made by split or shrink
    int splits = 0;    // split() calls so far (each names its children's namespace)
    // This communicator's transport, and the family's hub (the root's transport, which
    // owns the one listener and service thread; the same object for the root).
    std::shared_ptr<Transport> transport;
    std::shared_ptr<Transport> hub;
    std::unique_ptr<Topology> topology;  // which ranks share a host (core/topology.hpp)
  } boot;

  // ---- execution (progress.cpp): the one call running now. execMu is held while a
  // call runs and guards everything here, the transport and its counters ----------------
  struct Exec {
    std::mutex execMu;
    Executor executor;
    std::vector<uint8_t> scratch;  // for schedules that need it
    // auto's last all-reduce choice: a training loop all-reduces the same sizes over and
    // over, and the model's answer for a size never changes.
    size_t autoMemoBytes = SIZE_MAX;
    Algorithm autoMemoAlgo = Algorithm::Ring;
    // Per-call work a loop of calls need not redo (progress.cpp): the hosts were read
    // (no planning wait is left); the peers a schedule was connected to before (links
    // are never removed, so connect() has nothing to do for them); the collective lane's
    // connected peers as of the transport's collectiveLinksVersion().
    bool hostsRead = false;
    struct ScheduleMemo {
      bool valid = false;
      algo::BuildArgs args;
      algo::BuiltSchedule built;
    } memo;
    std::vector<char> connectedOnce;
    uint64_t watchVersion = 0;
    std::vector<int> watchPeers;
    // The transport's counters before and after the running call (countTraffic), and
    // map nodes of earlier calls' per-peer traffic kept for the next call's (a loop of
    // small calls then allocates none for its statistics).
    std::vector<std::pair<int, PeerCounters>> trafficBefore;
    std::vector<std::pair<int, PeerCounters>> trafficAfter;
    std::vector<std::map<int, PeerCounters>::node_type> spareTraffic;
  } exec;

  // ---- point to point (p2p_calls.cpp, p2p_room.hpp): made on the first p2p call; mu
  // guards the pointer. Declared after boot, so destroyed before the transport. ----------
  struct P2P {
    std::mutex mu;
    std::unique_ptr<P2PRoom> room;
    // room.get() for every collective's look (inGroup) without the lock.
    std::atomic<P2PRoom*> published{nullptr};
  } p2p;

  // ---- the call queue (progress.cpp): issueMu guards all of it but `last` ---------------
  struct Queue {
    Queue();
    ~Queue();
    Queue(const Queue&) = delete;
    Queue& operator=(const Queue&) = delete;
    std::mutex issueMu;
    // The progress thread sleeps in poll(2) on both: wakeFd (an eventfd) says "look
    // again" (a call to run, the end); graceFd (a timerfd) wakes it when a call issued to
    // an idle queue may be its own (graceUntil), so that a call waited on at once wakes no
    // thread at all. The timer is lazy: a waiter that runs its call leaves it armed (or
    // pushes it a grace on, if it would fire before the next call is likely taken too:
    // runQueued), and a call issued while it is armed does not touch it (the two
    // timerfd_settime calls took 14 % of a world-1 torch loop's samples:
    // docs/PERFORMANCE.md, "Through torch: the lazy grace timer and the lazy future"); the
    // progress thread, when it fires early, arms it again for the front call's graceUntil.
    int wakeFd = -1;
    int graceFd = -1;
    void wake() const;
    void armGrace(std::chrono::steady_clock::time_point until);  // sets armedFor
    // What graceFd is armed for; {} once the progress thread has read its expiry, or
    // before the first arming: only then does a call issued to an idle queue arm it (a
    // waiter may push it later: runQueued).
    std::chrono::steady_clock::time_point armedFor{};
    std::deque<std::pair<PreparedCall, WorkPtr>> pending;
    int64_t seq = 0;    // the next collective's number
    bool busy = false;  // a call runs: on the progress thread, or on a waiter's (runQueued)
    // The progress thread is in (or on its way to) poll: only then does a call need to
    // write wakeFd. Otherwise it looks at the queue again before it sleeps.
    bool progressAsleep = false;
    bool stopping = false;
    // A call issued to an idle queue is the progress thread's only after this: until
    // then its waiter may run it (runQueued). Cleared when the front call is taken.
    std::chrono::steady_clock::time_point graceUntil{};
    // How long that is: TCCL_ASYNC_GRACE_US, read at construction (default kStealGrace).
    std::chrono::microseconds grace{};
    // When a waiter last took its own call (runQueued): the gap to the next one is about
    // the time since then, which says whether the lazy timer would fire before it.
    std::chrono::steady_clock::time_point lastTaken{};
    // The progress thread: started by the first asynchronous call, it ends after
    // kProgressLinger without work (so idle sub-communicators hold no thread) and the
    // next one starts it again. progressRunning: it has not decided to end.
    std::thread progress;
    bool progressRunning = false;
    CallStats last;  // the last blocking call's (written and read by the issuing thread)
    // What a queued Work's driver holds of this communicator (it may be waited on after
    // the communicator is gone): a driver runs with `mu` shared and `alive` true; the
    // destructor clears `alive` under `mu` held exclusively, so it waits for them.
    struct Gate {
      std::shared_mutex mu;
      bool alive = true;
    };
    std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  } queue;

  ~Impl();

  // ---- bootstrap (bootstrap.cpp) ---------------------------------------------------------
  // The constructor's steps, in order.
  void readSettings(std::shared_ptr<Store> userStore, int rank, int size, CommOptions options);
  void joinJob();
  void openTransport();
  // Every rank counts itself out of the store; the rank that hosts the store server
  // (fromEnv with MASTER_ADDR) waits, for a bounded time, until every rank has, so that
  // its exit does not pull the store from under ranks still using it.
  void leaveStore() noexcept;

  // ---- sub-communicators (split.cpp) -----------------------------------------------------
  // A communicator over `members` (ranks of this one, in their new order) named `name`,
  // attached to this one's family: the same store, listener, heartbeat thread, job and
  // settings. This rank is members[newRank]. Collective over the members.
  // timeout: the child's default deadline (default: this one's).
  std::unique_ptr<Impl> attachChild(
      const std::string& name, const std::vector<int>& members, int newRank,
      std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;
  // Fills a sub-communicator's error with the parent and world ranks of this rank, the
  // peer and the culprit (ErrorInfo::self/peerAlso/culpritAlso).
  void nameRanks(ErrorInfo& info) const;

  // ---- validation (validate.cpp) ---------------------------------------------------------
  // Checks a call's arguments and settles its algorithm (but auto all-reduce, which
  // execute decides); throws InvalidArgument, which leaves the communicator usable.
  void validate(PreparedCall& call) const;
  void checkBuffers(PreparedCall& call) const;
  void settleAlgorithm(PreparedCall& call) const;
  // The table's view of a call on this rank (its counts included); segElems, hosts and
  // inPlace are the caller's to fill.
  algo::BuildArgs argsOf(const PreparedCall& call) const;
  [[noreturn]] void invalid(const std::string& msg) const;
  // invalid("<collective>: " + why), the collective named by its row of the table.
  [[noreturn]] void invalidCall(const PreparedCall& call, const std::string& why) const;

  // ---- the call queue and execution (progress.cpp) ---------------------------------------
  void progressLoop();
  // A waiter's turn at the queue (the driver of every queued collective, Work::wait):
  // when `work` is next and no call runs, run it here rather than wake the progress
  // thread for it. Returns at once otherwise.
  void runQueued(const WorkPtr& work);
  // Runs a task taken off the queue and completes its Work (busy is set; the caller
  // clears it).
  void runTask(std::pair<PreparedCall, WorkPtr>& task);
  // Runs one call on the calling thread. execMu is held.
  void execute(PreparedCall& call, CallStats* stats);
  // execute's steps, in order.
  void chooseAuto(PreparedCall& call, Deadline deadline, int64_t timeoutMs);
  void beginStats(const PreparedCall& call, CallStats* stats) const;
  void planSchedule(const PreparedCall& call, CallPlan& plan, Deadline deadline, int64_t timeoutMs);
  const Topology& readHosts(const PreparedCall& call, Deadline deadline, int64_t timeoutMs);
  void fillContext(const PreparedCall& call, CallPlan& plan, Deadline deadline, int64_t timeoutMs);
  // The collective lane's connected peers, which a call watches for aborts (cached).
  const std::vector<int>& watchedPeers();
  Running runningOf(const PreparedCall& call, const CallPlan& plan, int64_t timeoutMs) const;
  void runSchedule(const PreparedCall& call, CallPlan& plan, int64_t timeoutMs);
  // The call's traffic: the transport's counters now less exec.trafficBefore.
  void countTraffic(CallStats* stats);
  // Keeps the nodes of stats' per-peer traffic for the next call's (under execMu).
  void recycleTraffic(CallStats& stats);
  // Auto's all-reduce choice (TCCL_ALGO, else the cost model over this job's hosts).
  Algorithm chooseAllreduce(size_t bytes, std::string* why) const;
  std::optional<Algorithm> forcedAllreduce(std::string* why) const;
  Deadline deadlineFor(const std::optional<std::chrono::milliseconds>& perCall, int64_t* ms,
                       Deadline::Clock::time_point now = Deadline::Clock::now()) const;

  // ---- failure protocol (heartbeat.cpp, failure_protocol.cpp) ---------------------------
  void startFailureWatch(const std::shared_ptr<HeartbeatHub>& hub = nullptr,
                         const std::shared_ptr<Store>& hbRaw = nullptr);
  void startHeartbeat(const std::shared_ptr<HeartbeatHub>& hub,
                      const std::shared_ptr<Store>& hbRaw);
  void stopHeartbeat();
  // The member's period now (its own, or its running or planned call's if shorter).
  std::chrono::milliseconds currentPeriod();
  // The hub's thread: write this rank's record with the next beat; act on an event of
  // the family's log that concerns this member (census: publish; cause: adopt it).
  void publishRecord();
  void answerEvent(const failure::Event& e);
  // The hub's thread, every pass: inside one collective for a full period, publish the
  // record and count in once; compare (compareStuck) when the count says so.
  void watchStuck();
  void compareStuck(int64_t entered);
  // Appends an event about this communicator to the family's log (census: target -1 for
  // every rank); nothing when heartbeats are off.
  void postEvent(failure::Event::Kind kind, int target = -1);
  failure::Heartbeat ownHeartbeat(int64_t beat);
  // Every other rank's heartbeat record now (absent: none published).
  std::map<int, failure::Heartbeat> readHeartbeats(Store& from);
  // Records that this rank plans / entered / completed collective call.seq (heartbeats).
  void planCall(const Running& what);
  void enterCall(int64_t seq, const Running& what);
  void completeCall(int64_t seq);

  void wake();
  // Records the first fatal error; returns the one that stands.
  ErrorInfo setAbortCause(const ErrorInfo& info);
  std::optional<ErrorInfo> currentAbortCause() const;
  // Throws Aborted quoting the first fatal error, if there is one.
  void checkUsable() const;

  bool claim(Store& via);
  void publishCause(Store& via, const ErrorInfo& cause);
  std::optional<ErrorInfo> awaitCause(std::chrono::milliseconds bound);
  // What every rank ran at collectives #lo..#hi (seq -> rank -> signature), once each
  // rank has published its recent ones (sigmax/<rank>), or when `bound` has passed.
  using SigTable = std::map<int64_t, std::map<int, failure::Signature>>;
  SigTable awaitSignatures(int64_t lo, int64_t hi, std::chrono::milliseconds bound);
  // A collective failed with `e`: tell the peers, agree on the cause, and throw it as
  // seen from this rank.
  [[noreturn]] void failCall(const Error& e, const PreparedCall& call, const Running& what);
  bool publishRanAndClaim();
  void abortPeers(const ErrorInfo& local, const std::optional<ErrorInfo>& known, int64_t seq);
  ErrorInfo decideCause(const ErrorInfo& local, const PreparedCall& call, const Running& what,
                        bool claimed);
  void judgeTimeoutCause(ErrorInfo& c, const ErrorInfo& local, const PreparedCall& call,
                         const Running& what, std::chrono::milliseconds period);
  void judgeMismatchCause(ErrorInfo& c, const ErrorInfo& local, const PreparedCall& call,
                          const Running& what, std::chrono::milliseconds sigWait);
  // The error this rank throws: its own context with the agreed cause.
  ErrorInfo asSeenHere(const ErrorInfo& local, const ErrorInfo& cause, const PreparedCall& call,
                       const Running& what);
  // Mismatch: what the culprit ran at collective cause.seq, read from the store.
  std::string culpritSignature(const ErrorInfo& cause);
  void abortNow(const std::string& reason);
  // What the heartbeats say of `peer` now (alive, stopped, no record), for a
  // point-to-point timeout's message; reads its record, asks the peer alone for a fresh
  // one (census), and reads it again two periods (at most period + 1 s) later.
  std::string describePeerHealth(int peer);

  // ---- point to point (p2p_calls.cpp) ----------------------------------------------------
  P2PRoom& p2pRoom();
  // The room when it exists (abort paths: nothing to tell otherwise).
  P2PRoom* p2pRoomIfAny();
  void checkP2P(bool isSend, const void* buf, size_t count, DataType dtype, int peer,
                int tag) const;
  WorkPtr p2pWork(bool isSend, const void* buf, size_t count, DataType dtype, int peer, int tag,
                  const CollectiveOptions& options);
  // Checks a send's or receive's arguments and fills `op` from them (its deadline counted
  // from `now`).
  void prepareP2P(P2POp& op, bool isSend, const void* buf, size_t count, DataType dtype, int peer,
                  int tag, const CollectiveOptions& o, Deadline::Clock::time_point now);
  P2PHandle makeP2P(bool isSend, const void* buf, size_t count, DataType dtype, int peer, int tag,
                    const CollectiveOptions& o);
  std::vector<int> agreeOnSurvivors(std::chrono::milliseconds wait);
};

// One watch thread for a family of communicators: the root one (made by the public
// constructor) and every communicator split or shrunk from it in this process, so that
// sub-communicators add no thread. Its log is the family's event log (ev/<n> in the
// root's namespace), read with one CHECK per pass however many members there are. Held
// by every member; the thread ends with the last.
class Communicator::Impl::HeartbeatHub {
 public:
  explicit HeartbeatHub(std::shared_ptr<Store> log);
  ~HeartbeatHub();
  // Starts watching `m` (and the thread, on the first member).
  void add(Communicator::Impl* m);
  // Stops watching `m`; waits while a pass runs.
  void remove(Communicator::Impl* m);
  // A member's period became shorter (a call with a shorter timeout began).
  void poke();
  // Appends an event to the log (any thread).
  void post(const failure::Event& e);

 private:
  void loop();
  void pass(const std::vector<Communicator::Impl*>& now);
  const std::shared_ptr<Store> log_;  // immutable
  int64_t seen_ = 0;                  // the log's events read so far (the thread's)
  std::mutex mu;                      // guards what follows
  std::condition_variable cv;
  std::vector<Communicator::Impl*> members;
  bool passing = false;  // a pass runs, outside mu, over a copy of members
  bool stop = false;
  std::thread thread;
};

}  // namespace tccl
