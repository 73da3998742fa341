// TcpStoreServer (the client is tcp_store.cpp). Wire format: store/store_protocol.hpp.
//
// The server is one thread running a level-triggered epoll(7) loop over nonblocking
// sockets: the listener, an eventfd that stop() signals, and every client connection with
// its own input and output buffer. All store state lives on that thread, so it needs no
// locks. Every step costs what it touches, not the number of connections: epoll reports
// only the sockets that are ready, parked requests are indexed by the keys they miss
// (store/store_waiters.hpp), and deadlines sit in one ordered timer set. So one thread
// serves thousands of ranks (docs/store.md says why epoll and not libuv).
//
// GET, WAIT and MULTI_GET for keys that do not exist yet park: the server answers them
// when a write makes the keys exist, or with TIMEOUT naming the keys still missing when
// the deadline the client sent passes. A parked request does not stop the connection:
// the server goes on serving its later requests (replies carry the request's tag), up to
// kMaxParkedPerConn parked at once. A connection that sends bytes that can never decode is
// closed with a warning naming its address; nothing a client sends can stop the server
// serving the others.
//
// Bounded under abuse (docs/store.md, "Limits"): at most maxConnections connections and
// maxUnauthenticated still authenticating (beyond either the server stops accepting, and
// new clients wait in the SOMAXCONN backlog), authTimeout to authenticate, maxFrameBytes
// per request, kMaxPendingOutput of replies before it stops reading a connection, and
// maxStoredBytes of keys and values in all. Each limit is logged once when first reached.
// accept() failing for want of descriptors (EMFILE / ENFILE) pauses accepting for
// kAcceptPause instead of spinning.
//
// Authentication (docs/security.md): with a job key (TCCL_AUTH_KEY), a connection is served
// only after HELLO / AUTH prove the client holds the key; until then the server reads
// nothing but those two small requests, and a connection that fails, sends anything else
// or stays silent for the auth timeout gets an INVALID reply naming the reason (where it
// can) and is closed with a warning naming its address. The client checks the server's
// proof too, so a rank never talks to another job's store.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "auth/auth.hpp"
#include "base/log.hpp"
#include "net/iface.hpp"
#include "net/socket.hpp"
#include "store/store_protocol.hpp"
#include "store/store_server_limits.hpp"
#include "store/store_waiters.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {
namespace {

using storeproto::Command;
using storeproto::DecodeStatus;
using storeproto::Request;
using storeproto::Response;
using storeproto::Status;
using Clock = Deadline::Clock;

constexpr size_t kReadChunk = size_t{64} << 10;
// Bytes read from one connection per wakeup, so one fast sender cannot starve the others;
// epoll is level-triggered and comes back for the rest.
constexpr size_t kMaxReadPerWakeup = size_t{1} << 20;
// No new request of a connection is processed while this many reply bytes wait to be
// sent: a client that sends without reading cannot make the server buffer without end.
constexpr size_t kMaxPendingOutput = size_t{4} << 20;
// Parked requests one connection may hold; beyond, the server stops reading it.
constexpr size_t kMaxParkedPerConn = 256;
// Buffers above this capacity are released when they drain (one 64 MiB value must not
// pin 64 MiB per connection forever).
constexpr size_t kKeepCapacity = size_t{1} << 20;
// How long accepting pauses after accept() ran out of descriptors.
constexpr std::chrono::milliseconds kAcceptPause{100};
constexpr uint64_t kWakeId = 0;
constexpr uint64_t kListenId = 1;

using storeproto::kAuthKeyHint;

void releaseIfDrained(Bytes* buf, size_t* start) {
  if (*start < buf->size()) return;
  *start = 0;
  if (buf->capacity() > kKeepCapacity) {
    Bytes().swap(*buf);
  } else {
    buf->clear();
  }
}

// Where a connection is in its authentication.
enum class AuthState {
  Open,        // the server has no key: HELLO is optional, everything is served
  AwaitHello,  // the server has a key: only HELLO is read
  AwaitProof,  // challenge sent: only AUTH is read
  Ready,       // authenticated (or served without a key)
};

bool authenticating(AuthState s) {
  return s == AuthState::AwaitHello || s == AuthState::AwaitProof;
}

struct Conn {
  uint64_t id = 0;
  net::Fd fd;
  std::string peer;  // "ip:port", for logs
  AuthState auth = AuthState::Open;
  auth::Transcript transcript;
  // Refused: the INVALID reply is flushed, then the connection closes with this warning.
  bool closing = false;
  std::string closingWhy;
  Bytes in;
  size_t inStart = 0;  // in[inStart, size) is received but not yet decoded
  Bytes out;
  size_t outStart = 0;  // out[outStart, size) is encoded but not yet sent
  bool closed = false;
  std::unordered_set<uint64_t> parked;  // its waiters' ids
  uint32_t events = 0;                  // the epoll interest registered now

  size_t pendingIn() const { return in.size() - inStart; }
  size_t pendingOut() const { return out.size() - outStart; }
  bool mayRead() const {
    return !closed && !closing && parked.size() < kMaxParkedPerConn &&
           pendingOut() < kMaxPendingOutput;
  }
};

// Timers: a waiter's deadline or a connection's time to authenticate.
enum class TimerKind { Waiter, Auth };
using Timers = std::multimap<Clock::time_point, std::pair<TimerKind, uint64_t>>;

class ServerLoop {
 public:
  ServerLoop(int listenFd, int wakeFd, std::string name, auth::KeyPtr key,
             store::ServerLimits limits, TcpStoreServer::Stats* stats, std::mutex* statsMu)
      : listenFd_(listenFd),
        wakeFd_(wakeFd),
        name_(std::move(name)),
        key_(std::move(key)),
        limits_(limits),
        stats_(stats),
        statsMu_(statsMu) {
    epfd_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epfd_.valid()) throwError(ErrorKind::System, "epoll_create1: " + net::errnoString(errno));
    control(EPOLL_CTL_ADD, wakeFd_, EPOLLIN, kWakeId);
    control(EPOLL_CTL_ADD, listenFd_, EPOLLIN, kListenId);
    listening_ = true;
  }

  // Serves until the wake fd becomes readable.
  void run() {
    for (;;) {
      try {
        if (iterate()) return;
      } catch (const std::exception& e) {
        // Not attributable to one connection (e.g. out of memory): keep serving; back off
        // so a persistent failure does not spin.
        TCCL_WARN("store server " << name_ << ": " << e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

 private:
  void control(int op, int fd, uint32_t events, uint64_t id) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epfd_.get(), op, fd, &ev) != 0) {
      throwError(ErrorKind::System, "epoll_ctl: " + net::errnoString(errno));
    }
  }

  // One epoll round. Returns true when stop() was signalled.
  bool iterate() {
    epoll_event evs[256];
    const int n = ::epoll_wait(epfd_.get(), evs, 256, nextTimeoutMs());
    if (n < 0) {
      if (errno == EINTR) return false;
      throwError(ErrorKind::System, "epoll_wait: " + net::errnoString(errno));
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = evs[i].data.u64;
      if (id == kWakeId) return true;
      if (id == kListenId) {
        acceptAll();
        continue;
      }
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      guarded(*it->second, [&](Conn& c) { onEvents(c, evs[i].events); });
    }
    fireTimers();
    settle();
    return false;
  }

  // Serves what became possible during this round (requests buffered behind a parked one,
  // replies of woken waiters), then brings every touched connection's epoll interest up
  // to date and drops the closed ones.
  void settle() {
    while (!dirty_.empty()) {
      std::unordered_set<uint64_t> batch;
      batch.swap(dirty_);
      for (uint64_t id : batch) {
        auto it = conns_.find(id);
        if (it == conns_.end()) continue;
        Conn& c = *it->second;
        guarded(c, [&](Conn& cc) {
          flush(cc);
          if (!cc.closed && cc.pendingIn() > 0 && processInput(cc)) flush(cc);
        });
        if (c.closed) {
          dropConn(id);
        } else {
          guarded(c, [&](Conn& cc) { updateInterest(cc); });
          if (c.closed) dropConn(id);
        }
      }
    }
    updateListening();
  }

  void touch(Conn& c) { dirty_.insert(c.id); }

  void updateInterest(Conn& c) {
    uint32_t ev = EPOLLRDHUP;
    if (c.mayRead()) ev |= EPOLLIN;
    if (c.pendingOut() > 0) ev |= EPOLLOUT;
    if (ev == c.events) return;
    control(EPOLL_CTL_MOD, c.fd.get(), ev, c.id);
    c.events = ev;
  }

  // Runs fn on a connection; an exception there closes that connection only.
  template <typename F>
  void guarded(Conn& c, F fn) {
    if (c.closed) return;
    try {
      fn(c);
    } catch (const std::exception& e) {
      closeConn(c, std::string("internal error: ") + e.what());
    }
  }

  int nextTimeoutMs() const {
    Clock::time_point next = Clock::time_point::max();
    if (!timers_.empty()) next = timers_.begin()->first;
    if (acceptPausedUntil_ && *acceptPausedUntil_ < next) next = *acceptPausedUntil_;
    if (next == Clock::time_point::max()) return -1;
    return Deadline(next).pollTimeoutMs();
  }

  // ---- accepting -----------------------------------------------------------------------

  // Whether the limits let the server take one more connection now; logs the first time
  // one stops it.
  bool mayAccept() {
    if (acceptPausedUntil_) return false;
    if (conns_.size() >= limits_.maxConnections) {
      limitReached(capLogged_.connections, "connections", limits_.maxConnections,
                   "TCCL_STORE_MAX_CONNECTIONS");
      return false;
    }
    if (key_ && unauthenticated_ >= limits_.maxUnauthenticated) {
      limitReached(capLogged_.unauthenticated, "connections still authenticating",
                   limits_.maxUnauthenticated, "TCCL_STORE_MAX_UNAUTHENTICATED");
      return false;
    }
    return true;
  }

  void limitReached(bool& logged, const char* what, uint64_t cap, const char* env) {
    {
      std::lock_guard<std::mutex> lk(*statsMu_);
      ++stats_->limitHits;
    }
    if (logged) return;
    logged = true;
    TCCL_WARN("store server " << name_ << ": reached its limit of " << cap << " " << what << " ("
                              << env << "); logged once, further hits are counted");
  }

  // The listener is polled only while the server may accept: otherwise clients wait in
  // the backlog (level-triggered epoll would report it again at once and spin).
  void updateListening() {
    if (acceptPausedUntil_ && Clock::now() >= *acceptPausedUntil_) acceptPausedUntil_.reset();
    const bool want = !acceptPausedUntil_ && conns_.size() < limits_.maxConnections &&
                      (!key_ || unauthenticated_ < limits_.maxUnauthenticated);
    if (want == listening_) return;
    control(EPOLL_CTL_MOD, listenFd_, want ? uint32_t{EPOLLIN} : uint32_t{0}, kListenId);
    listening_ = want;
  }

  void acceptAll() {
    while (mayAccept()) {
      net::SockAddr from;
      int err = 0;
      net::Fd fd = net::acceptNonBlocking(listenFd_, &from, &err);
      if (!fd.valid()) {
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
          acceptPausedUntil_ = Clock::now() + kAcceptPause;
          if (!capLogged_.descriptors) {
            capLogged_.descriptors = true;
            TCCL_WARN("store server " << name_ << ": accept: " << net::errnoString(err) << " with "
                                      << conns_.size() << " connections open; pausing accepts for "
                                      << kAcceptPause.count()
                                      << " ms at a time (raise `ulimit -n`); logged once");
          }
        }
        break;
      }
      auto c = std::make_unique<Conn>();
      c->id = nextId_++;
      c->fd = std::move(fd);
      c->peer = from.toString();
      c->events = EPOLLIN | EPOLLRDHUP;
      control(EPOLL_CTL_ADD, c->fd.get(), c->events, c->id);
      if (key_) {
        c->auth = AuthState::AwaitHello;
        ++unauthenticated_;
        timers_.emplace(Clock::now() + limits_.authTimeout, std::pair{TimerKind::Auth, c->id});
      }
      TCCL_TRACE("store server " << name_ << ": connection from " << c->peer);
      conns_.emplace(c->id, std::move(c));
      std::lock_guard<std::mutex> lk(*statsMu_);
      stats_->connections = conns_.size();
      stats_->peakConnections = std::max(stats_->peakConnections, conns_.size());
      ++stats_->accepted;
    }
    updateListening();
  }

  // ---- closing -------------------------------------------------------------------------

  void closeConn(Conn& c, std::string warning) {
    if (c.closed) return;
    if (warning.empty() && c.closing) warning = c.closingWhy;  // refused, then hung up
    if (warning.empty() && authenticating(c.auth)) {
      warning = c.auth == AuthState::AwaitHello
                    ? "closed before authenticating"
                    : "closed during authentication (the client may hold a different key)";
    }
    if (!warning.empty()) {
      TCCL_WARN("store server " << name_ << ": closing connection from " << c.peer << ": "
                                << warning);
    } else {
      TCCL_TRACE("store server " << name_ << ": " << c.peer << " disconnected");
    }
    if (authenticating(c.auth)) --unauthenticated_;
    c.auth = AuthState::Ready;
    for (uint64_t w : c.parked) waiters_.remove(w);
    c.parked.clear();
    c.closed = true;
    c.fd.reset();  // closing the descriptor takes it out of the epoll set
    Bytes().swap(c.in);
    Bytes().swap(c.out);
    c.inStart = c.outStart = 0;
    touch(c);
  }

  void dropConn(uint64_t id) {
    conns_.erase(id);
    std::lock_guard<std::mutex> lk(*statsMu_);
    stats_->connections = conns_.size();
  }

  // ---- reading -------------------------------------------------------------------------

  void onEvents(Conn& c, uint32_t rev) {
    touch(c);
    if ((rev & EPOLLOUT) && c.pendingOut() > 0) flush(c);
    if (c.closed) return;
    if ((rev & EPOLLIN) && c.mayRead()) {
      readInput(c);
    } else if (rev & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
      // Gone while parked or while its replies are backed up: nobody to answer.
      closeConn(c, "");
    }
  }

  void readInput(Conn& c) {
    size_t total = 0;
    while (c.mayRead() && total < kMaxReadPerWakeup) {
      const size_t old = c.in.size();
      c.in.resize(old + kReadChunk);
      ssize_t n = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
      c.in.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
      if (n > 0) {
        total += static_cast<size_t>(n);
        // Decode as bytes arrive: garbage is rejected at its first bad header byte and a
        // huge declared length before its body is read.
        processInput(c);
        flush(c);
        if (static_cast<size_t>(n) < kReadChunk) return;
        continue;
      }
      if (n == 0) return closeConn(c, "");
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == ECONNRESET) return closeConn(c, "");
      return closeConn(c, "recv: " + net::errnoString(errno));
    }
  }

  // Decodes and serves complete requests. Returns whether it consumed any.
  bool processInput(Conn& c) {
    bool progress = false;
    while (c.mayRead() && c.pendingIn() > 0) {
      if (authenticating(c.auth) && !screenUnauthenticated(c)) return progress;
      if (!screenFrameSize(c)) return progress;
      Request req;
      storeproto::DecodeResult r =
          storeproto::decodeRequest(c.in.data() + c.inStart, c.pendingIn(), &req);
      if (r.status == DecodeStatus::NeedMore) break;
      if (r.status == DecodeStatus::Error) {
        closeConn(c, "bad request: " + r.error);
        return progress;
      }
      c.inStart += r.consumed;
      progress = true;
      {
        std::lock_guard<std::mutex> lk(*statsMu_);
        ++stats_->requests;
      }
      serve(c, std::move(req));
    }
    if (!c.closed) {
      releaseIfDrained(&c.in, &c.inStart);
      // Keep the undecoded tail at the front once the consumed prefix dominates.
      if (c.inStart > kReadChunk && c.inStart * 2 > c.in.size()) {
        c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.inStart));
        c.inStart = 0;
      }
    }
    return progress;
  }

  // A request larger than the per-connection limit is refused from its header, before
  // its body is buffered.
  bool screenFrameSize(Conn& c) {
    if (c.pendingIn() < storeproto::kHeaderBytes) return true;
    const uint8_t* d = c.in.data() + c.inStart;
    uint32_t bodyLen = 0;
    for (int i = 0; i < 4; ++i) bodyLen |= static_cast<uint32_t>(d[4 + i]) << (8 * i);
    // Beyond the protocol's own limit the decoder refuses the header (and closes).
    if (bodyLen > storeproto::kMaxBodyBytes) return true;
    if (storeproto::kHeaderBytes + uint64_t{bodyLen} <= limits_.maxFrameBytes) return true;
    limitReached(capLogged_.frame, "bytes per request", limits_.maxFrameBytes,
                 "TCCL_STORE_MAX_REQUEST_BYTES");
    if (d[0] != storeproto::kRequestMagic || d[1] != storeproto::kVersion ||
        d[2] < static_cast<uint8_t>(Command::Set) ||
        d[2] > static_cast<uint8_t>(storeproto::kLastCommand)) {
      return true;  // the decoder refuses the header itself
    }
    refuse(c, static_cast<Command>(d[2]),
           "request of " + std::to_string(bodyLen) + " body bytes exceeds this store's limit of " +
               std::to_string(limits_.maxFrameBytes) +
               " bytes per request (TCCL_STORE_MAX_REQUEST_BYTES)",
           "declared a " + std::to_string(bodyLen) + "-byte request body");
    return false;
  }

  void reply(Conn& c, Response r, uint32_t tag) {
    r.tag = tag;
    storeproto::encodeResponse(r, &c.out);
    touch(c);
  }

  // Judges the header bytes of an unauthenticated connection as they arrive: it may send
  // only the one request its state expects, and only a small one. Returns false when
  // the connection was refused.
  bool screenUnauthenticated(Conn& c) {
    const uint8_t* d = c.in.data() + c.inStart;
    const size_t n = c.pendingIn();
    // Bad magic or version: the decoder says so (and the connection closes).
    if (n < 3 || d[0] != storeproto::kRequestMagic || d[1] != storeproto::kVersion) return true;
    const Command expected = c.auth == AuthState::AwaitHello ? Command::Hello : Command::Auth;
    if (d[2] != static_cast<uint8_t>(expected)) {
      if (d[2] >= static_cast<uint8_t>(Command::Set) &&
          d[2] <= static_cast<uint8_t>(storeproto::kLastCommand)) {
        refuse(c, static_cast<Command>(d[2]),
               std::string("this store requires authentication: a connection must begin with "
                           "HELLO and AUTH (") +
                   kAuthKeyHint + ")",
               "sent " + std::string(storeproto::toString(static_cast<Command>(d[2]))) +
                   " before authenticating");
      } else {
        closeConn(c, "unauthenticated connection sent an unknown command");
      }
      return false;
    }
    if (n >= storeproto::kHeaderBytes) {
      uint32_t bodyLen = 0;
      for (int i = 0; i < 4; ++i) bodyLen |= static_cast<uint32_t>(d[4 + i]) << (8 * i);
      if (bodyLen > storeproto::kMaxAuthBodyBytes) {
        closeConn(
            c, "unauthenticated connection declared a " + std::to_string(bodyLen) + "-byte body");
        return false;
      }
    }
    return true;
  }

  // Replies INVALID with `message`, then closes the connection with a warning once the
  // reply is out.
  void refuse(Conn& c, Command command, const std::string& message, const std::string& warning,
              uint32_t tag = 0) {
    Response resp;
    resp.command = command;
    resp.status = Status::Invalid;
    resp.message = message;
    reply(c, resp, tag);
    c.closing = true;
    c.closingWhy = warning;
  }

  // ---- authentication ------------------------------------------------------------------

  void authenticated(Conn& c) {
    if (authenticating(c.auth)) --unauthenticated_;
    c.auth = AuthState::Ready;
  }

  void onHello(Conn& c, const Request& req) {
    Response resp;
    resp.command = Command::Hello;
    if (c.auth != AuthState::Open && c.auth != AuthState::AwaitHello) {
      resp.status = Status::Invalid;
      resp.message = "HELLO is only valid as the first request of a connection";
      return reply(c, resp, req.tag);
    }
    if (!key_) {
      if (req.hasKey) {
        return refuse(c, Command::Hello,
                      "the client authenticates with a key but this store has none (" +
                          std::string(kAuthKeyHint) + ")",
                      "the client has an auth key and this store has none", req.tag);
      }
      authenticated(c);
      return reply(c, resp, req.tag);
    }
    if (!req.hasKey) {
      return refuse(c, Command::Hello,
                    "this store requires authentication and the client has no key (" +
                        std::string(kAuthKeyHint) + ")",
                    "the client has no auth key", req.tag);
    }
    c.transcript.protocol = auth::Protocol::Store;
    c.transcript.diallerNonce = req.nonce;
    c.transcript.acceptorNonce = auth::randomNonce();
    resp.hasKey = true;
    resp.nonce = c.transcript.acceptorNonce;
    resp.mac = auth::proof(*key_, auth::Role::Acceptor, c.transcript);
    c.auth = AuthState::AwaitProof;
    reply(c, resp, req.tag);
  }

  void onAuth(Conn& c, const Request& req) {
    Response resp;
    resp.command = Command::Auth;
    if (c.auth != AuthState::AwaitProof) {
      resp.status = Status::Invalid;
      resp.message = "AUTH is only valid after a HELLO challenge";
      return reply(c, resp, req.tag);
    }
    if (!auth::verify(*key_, auth::Role::Dialler, c.transcript, req.mac)) {
      return refuse(c, Command::Auth,
                    "authentication failed: the client's key differs from this store's "
                    "(another job, or a wrong TCCL_AUTH_KEY)",
                    "authentication failed (the client's key differs)", req.tag);
    }
    authenticated(c);
    reply(c, resp, req.tag);
  }

  // ---- timers --------------------------------------------------------------------------

  void fireTimers() {
    const auto now = Clock::now();
    while (!timers_.empty() && timers_.begin()->first <= now) {
      const auto [kind, id] = timers_.begin()->second;
      timers_.erase(timers_.begin());
      if (kind == TimerKind::Waiter) {
        if (const store::Waiter* w = waiters_.find(id)) answerWaiter(w->conn, id);
        continue;
      }
      auto it = conns_.find(id);
      if (it == conns_.end() || !authenticating(it->second->auth)) continue;
      closeConn(*it->second, "did not authenticate within " +
                                 std::to_string(limits_.authTimeout.count()) + " ms");
    }
  }

  // ---- requests ------------------------------------------------------------------------

  // Stores key = value if the total stays within maxStoredBytes, waking the requests
  // parked on a key that did not exist. Returns false (and says why) otherwise.
  bool write(const std::string& key, Bytes value, std::string* why) {
    auto it = data_.find(key);
    const uint64_t old = it == data_.end() ? 0 : key.size() + it->second.size();
    const uint64_t add = key.size() + value.size();
    if (storedBytes_ - old + add > limits_.maxStoredBytes) {
      limitReached(capLogged_.stored, "bytes stored", limits_.maxStoredBytes,
                   "TCCL_STORE_MAX_BYTES");
      *why = "the store is full: storing " + storeproto::describeKeys({key}) + " (" +
             std::to_string(add) + " bytes) would exceed its limit of " +
             std::to_string(limits_.maxStoredBytes) + " bytes (TCCL_STORE_MAX_BYTES)";
      return false;
    }
    storedBytes_ = storedBytes_ - old + add;
    if (it != data_.end()) {
      it->second = std::move(value);
      return true;
    }
    data_.emplace(key, std::move(value));
    for (uint64_t w : waiters_.keyCreated(key)) {
      if (const store::Waiter* wt = waiters_.find(w)) answerWaiter(wt->conn, w);
    }
    return true;
  }

  void invalid(Conn& c, const Request& req, std::string message) {
    Response resp;
    resp.command = req.command;
    resp.status = Status::Invalid;
    resp.message = std::move(message);
    reply(c, resp, req.tag);
  }

  void serve(Conn& c, Request req) {
    if (req.command == Command::Hello) return onHello(c, req);
    if (req.command == Command::Auth) return onAuth(c, req);
    authenticated(c);  // only an Open connection gets here unauthenticated
    Response resp;
    resp.command = req.command;
    std::string why;
    switch (req.command) {
      case Command::Set:
        if (!write(req.key, std::move(req.value), &why)) return invalid(c, req, why);
        return reply(c, resp, req.tag);
      case Command::MultiSet: {
        uint64_t add = 0;
        for (size_t i = 0; i < req.keys.size(); ++i) {
          add += req.keys[i].size() + req.values[i].size();
        }
        if (storedBytes_ + add > limits_.maxStoredBytes) {
          // Checked up front (against the worst case, no overwrite) so that a refused
          // MULTI_SET stores none of its pairs.
          limitReached(capLogged_.stored, "bytes stored", limits_.maxStoredBytes,
                       "TCCL_STORE_MAX_BYTES");
          return invalid(c, req,
                         "the store is full: MULTI_SET of " + std::to_string(add) +
                             " bytes would exceed its limit of " +
                             std::to_string(limits_.maxStoredBytes) +
                             " bytes (TCCL_STORE_MAX_BYTES)");
        }
        for (size_t i = 0; i < req.keys.size(); ++i) {
          write(req.keys[i], std::move(req.values[i]), &why);
        }
        return reply(c, resp, req.tag);
      }
      case Command::Get:
      case Command::Wait:
      case Command::MultiGet:
        return park(c, std::move(req));
      case Command::Add: {
        auto it = data_.find(req.key);
        std::optional<int64_t> v = storeproto::applyAdd(
            req.key, it == data_.end() ? nullptr : &it->second, req.delta, &why);
        if (!v || !write(req.key, storeproto::formatDecimal(*v), &why)) {
          return invalid(c, req, why);
        }
        resp.number = *v;
        return reply(c, resp, req.tag);
      }
      case Command::CompareSet: {
        auto it = data_.find(req.key);
        const bool present = it != data_.end();
        if (!storeproto::compareSetMatches(present ? &it->second : nullptr, req.expected)) {
          if (present) resp.value = it->second;
          return reply(c, resp, req.tag);
        }
        resp.value = req.value;
        if (!write(req.key, std::move(req.value), &why)) return invalid(c, req, why);
        return reply(c, resp, req.tag);
      }
      case Command::Check:
        resp.flag = missing(req.keys).empty();
        return reply(c, resp, req.tag);
      case Command::Erase: {
        auto it = data_.find(req.key);
        resp.flag = it != data_.end();
        if (resp.flag) {
          storedBytes_ -= req.key.size() + it->second.size();
          data_.erase(it);
        }
        return reply(c, resp, req.tag);
      }
      case Command::Ping:
        return reply(c, resp, req.tag);
      case Command::Hello:
      case Command::Auth:
        return;  // handled above
    }
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      if (data_.find(k) == data_.end()) out.push_back(k);
    }
    return out;
  }

  // GET / WAIT / MULTI_GET: answered now if its keys exist or it does not wait, else
  // parked until they do or its deadline passes.
  void park(Conn& c, Request req) {
    if (req.command == Command::Get) req.keys = {req.key};
    std::vector<std::string> absent = missing(req.keys);
    if (absent.empty() || req.timeoutMs == 0) return answer(c, req, absent);
    parkUntil(c, std::move(req), storeproto::deadlineAfterMs(req.timeoutMs), absent);
  }

  void parkUntil(Conn& c, Request req, Deadline deadline, const std::vector<std::string>& absent) {
    const uint64_t id = waiters_.add(c.id, std::move(req), deadline, absent);
    c.parked.insert(id);
    if (!deadline.isNever()) timers_.emplace(deadline.at(), std::pair{TimerKind::Waiter, id});
  }

  // Answers a parked request from the current state (a key it counted as created may
  // have been erased since: then it parks again on what is missing now, unless its
  // deadline has passed).
  void answerWaiter(uint64_t connId, uint64_t waiterId) {
    store::Waiter w = waiters_.take(waiterId);
    auto it = conns_.find(connId);
    if (it == conns_.end() || it->second->closed) return;
    Conn& c = *it->second;
    c.parked.erase(waiterId);
    std::vector<std::string> absent = missing(w.request.keys);
    if (!absent.empty() && !w.deadline.expired()) {
      // Its old timer finds no waiter of that id and is skipped; the new one is set here.
      return parkUntil(c, std::move(w.request), w.deadline, absent);
    }
    guarded(c, [&](Conn& cc) { answer(cc, w.request, absent); });
  }

  void answer(Conn& c, const Request& req, std::vector<std::string> absent) {
    Response resp;
    resp.command = req.command;
    if (!absent.empty()) {
      resp.status = Status::Timeout;
      resp.keys = std::move(absent);
      return reply(c, resp, req.tag);
    }
    if (req.command == Command::Get) resp.value = data_.at(req.key);
    if (req.command == Command::MultiGet) {
      uint64_t bytes = 4;
      for (const std::string& k : req.keys) bytes += 4 + data_.at(k).size();
      if (bytes > storeproto::kMaxBodyBytes) {
        return invalid(c, req,
                       "MULTI_GET of " + std::to_string(req.keys.size()) + " keys would answer " +
                           std::to_string(bytes) + " bytes; one reply holds at most " +
                           std::to_string(storeproto::kMaxBodyBytes));
      }
      resp.values.reserve(req.keys.size());
      for (const std::string& k : req.keys) resp.values.push_back(data_.at(k));
    }
    reply(c, resp, req.tag);
  }

  void flush(Conn& c) {
    while (c.pendingOut() > 0) {
      ssize_t n = ::send(c.fd.get(), c.out.data() + c.outStart, c.pendingOut(), MSG_NOSIGNAL);
      if (n > 0) {
        c.outStart += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return closeConn(c, "");
      return closeConn(c, "send: " + net::errnoString(errno));
    }
    releaseIfDrained(&c.out, &c.outStart);
    if (c.closing) closeConn(c, c.closingWhy);
  }

  struct CapLogged {
    bool connections = false;
    bool unauthenticated = false;
    bool frame = false;
    bool stored = false;
    bool descriptors = false;
  };

  const int listenFd_;
  const int wakeFd_;
  const std::string name_;
  const auth::KeyPtr key_;
  const store::ServerLimits limits_;
  TcpStoreServer::Stats* stats_;
  std::mutex* statsMu_;
  net::Fd epfd_;
  bool listening_ = false;
  std::optional<Clock::time_point> acceptPausedUntil_;
  uint64_t nextId_ = kListenId + 1;
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::unordered_set<uint64_t> dirty_;
  size_t unauthenticated_ = 0;
  store::WaiterIndex waiters_;
  Timers timers_;
  CapLogged capLogged_;
  std::unordered_map<std::string, Bytes> data_;
  uint64_t storedBytes_ = 0;
};

}  // namespace

// ---- server ------------------------------------------------------------------------

struct TcpStoreServer::Impl {
  std::string host;
  uint16_t port = 0;
  net::Fd listenFd;
  net::Fd wakeFd;
  std::thread thread;
  std::mutex stopMu;
  bool stopped = false;
  std::mutex statsMu;
  Stats stats;
};

TcpStoreServer::TcpStoreServer(const std::string& host, uint16_t port)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->listenFd = net::listenOn(host, port);
  impl_->port = net::localAddress(impl_->listenFd.get()).port();
  impl_->wakeFd.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!impl_->wakeFd.valid()) {
    throwError(ErrorKind::System, "store server: eventfd: " + net::errnoString(errno));
  }
  auth::KeyPtr key = auth::keyFromEnv();
  const store::ServerLimits limits = store::ServerLimits::fromEnv();
  const std::string name = net::joinHostPort(host, impl_->port);
  auth::requireKeyToListen(key != nullptr, !net::boundToLoopback(impl_->listenFd.get()),
                           "the store server", name);  // secure by default (issue 14)
  TCCL_INFO("store server listening on "
            << name
            << (key ? " (clients must authenticate, key id " + key->id() + ")"
                    : std::string(" (clients are not authenticated)"))
            << "; limits: " << limits.describe());
  auto loop = std::make_shared<ServerLoop>(impl_->listenFd.get(), impl_->wakeFd.get(), name,
                                           std::move(key), limits, &impl_->stats, &impl_->statsMu);
  impl_->thread = std::thread([loop] { loop->run(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

uint16_t TcpStoreServer::port() const { return impl_->port; }
const std::string& TcpStoreServer::host() const { return impl_->host; }

TcpStoreServer::Stats TcpStoreServer::stats() const {
  std::lock_guard<std::mutex> lk(impl_->statsMu);
  return impl_->stats;
}

void TcpStoreServer::stop() {
  std::lock_guard<std::mutex> lock(impl_->stopMu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  const uint64_t one = 1;
  ssize_t rc;
  do {
    rc = ::write(impl_->wakeFd.get(), &one, sizeof one);
  } while (rc < 0 && errno == EINTR);
  // The loop's connections (and so every client's socket) close when it returns.
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->listenFd.reset();
}

}  // namespace tccl
