// TcpStoreServer (the client is tcp_store.cpp). Wire format: store/store_protocol.hpp.
//
// The server is one thread running a poll(2) loop over nonblocking sockets: the
// listener, an eventfd that stop() signals, and every client connection with its own
// input and output buffer. All store state lives on that thread, so it needs no locks;
// one thread serves thousands of ranks because each request is a map lookup.
//
// GET and WAIT for keys that do not exist yet park their connection: the server stops
// reading from it (the client is synchronous and waits for this reply) until a SET or
// ADD makes the keys exist, or the deadline the client sent passes and the reply is
// TIMEOUT with the keys still missing. A connection that sends bytes that can never
// decode is closed with a warning naming its address; nothing a client sends can stop
// the server serving the others.
//
// Authentication (docs/security.md): with a job key (TCCL_AUTH_KEY), a connection is served
// only after HELLO / AUTH prove the client holds the key; until then the server reads
// nothing but those two small requests, and a connection that fails, sends anything else
// or stays silent for kAuthGrace gets an INVALID reply naming the reason (where it can)
// and is closed with a warning naming its address. The client checks the server's proof
// too, so a rank never talks to another job's store.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "auth/auth.hpp"
#include "base/log.hpp"
#include "net/iface.hpp"
#include "net/socket.hpp"
#include "store/store_protocol.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {
namespace {

using storeproto::Command;
using storeproto::DecodeStatus;
using storeproto::Request;
using storeproto::Response;
using storeproto::Status;

constexpr size_t kReadChunk = size_t{64} << 10;
// Bytes read from one connection per poll wakeup, so one fast sender cannot starve the
// others; poll is level-triggered and comes back for the rest.
constexpr size_t kMaxReadPerWakeup = size_t{1} << 20;
// No new request of a connection is processed while this many reply bytes wait to be
// sent: a client that sends without reading cannot make the server buffer without end.
constexpr size_t kMaxPendingOutput = size_t{4} << 20;
// Buffers above this capacity are released when they drain (one 64 MiB value must not
// pin 64 MiB per connection forever).
constexpr size_t kKeepCapacity = size_t{1} << 20;
// A connection that has not authenticated in this long is closed (a silent stranger must
// not pin a descriptor forever).
constexpr std::chrono::seconds kAuthGrace{30};

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

struct Conn {
  net::Fd fd;
  std::string peer;  // "ip:port", for logs
  AuthState auth = AuthState::Open;
  Deadline authDeadline = Deadline::never();
  auth::Transcript transcript;
  // Refused: the INVALID reply is flushed, then the connection closes with this warning.
  bool closing = false;
  std::string closingWhy;
  Bytes in;
  size_t inStart = 0;  // in[inStart, size) is received but not yet decoded
  Bytes out;
  size_t outStart = 0;  // out[outStart, size) is encoded but not yet sent
  bool closed = false;
  // A parked GET / WAIT.
  bool parked = false;
  Request waiting;
  Deadline deadline = Deadline::never();

  size_t pendingIn() const { return in.size() - inStart; }
  size_t pendingOut() const { return out.size() - outStart; }
};

class ServerLoop {
 public:
  ServerLoop(int listenFd, int wakeFd, std::string name, auth::KeyPtr key)
      : listenFd_(listenFd), wakeFd_(wakeFd), name_(std::move(name)), key_(std::move(key)) {}

  // Serves until the wake fd becomes readable.
  void run() {
    std::vector<pollfd> pfds;
    for (;;) {
      try {
        if (iterate(&pfds)) return;
      } catch (const std::exception& e) {
        // Not attributable to one connection (e.g. out of memory building the poll set):
        // keep serving; back off so a persistent failure does not spin.
        TCCL_WARN("store server " << name_ << ": " << e.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  }

 private:
  // One poll round. Returns true when stop() was signalled.
  bool iterate(std::vector<pollfd>* pfds) {
    pfds->clear();
    pfds->push_back({wakeFd_, POLLIN, 0});
    pfds->push_back({listenFd_, POLLIN, 0});
    for (const auto& c : conns_) {
      short ev = POLLRDHUP;
      if (!c->parked && !c->closing && c->pendingOut() < kMaxPendingOutput) ev |= POLLIN;
      if (c->pendingOut() > 0) ev |= POLLOUT;
      pfds->push_back({c->fd.get(), ev, 0});
    }
    const size_t polled = conns_.size();
    int n = ::poll(pfds->data(), pfds->size(), nextTimeoutMs());
    if (n < 0) {
      if (errno == EINTR) return false;
      throwError(ErrorKind::System, "poll: " + net::errnoString(errno));
    }
    if ((*pfds)[0].revents != 0) return true;
    if ((*pfds)[1].revents != 0) acceptAll();
    for (size_t i = 0; i < polled; ++i) {
      const short rev = (*pfds)[i + 2].revents;
      if (rev != 0) guarded(*conns_[i], [&](Conn& c) { onEvents(c, rev, (*pfds)[i + 2].events); });
    }
    expireWaiters();
    expireUnauthenticated();
    // Serve requests already buffered but not yet served: those pipelined behind a GET /
    // WAIT just answered, or held back while replies were backed up. poll() will not
    // report bytes already read, so loop until no connection makes progress.
    for (bool progress = true; progress;) {
      progress = false;
      for (auto& c : conns_) {
        guarded(*c, [&](Conn& cc) { progress = processInput(cc) || progress; });
      }
      for (auto& c : conns_) {
        if (c->pendingOut() == 0) continue;
        const size_t before = c->pendingOut();
        guarded(*c, [&](Conn& cc) { flush(cc); });
        // Draining may lift the output cap that held buffered requests back.
        if (!c->closed && c->pendingOut() < before && c->pendingIn() > 0) progress = true;
      }
    }
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->closed; });
    return false;
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
    int t = -1;
    for (const auto& c : conns_) {
      if (!c->authDeadline.isNever()) {
        const int ms = c->authDeadline.pollTimeoutMs();
        if (t < 0 || ms < t) t = ms;
      }
      if (!c->parked || c->deadline.isNever()) continue;
      const int ms = c->deadline.pollTimeoutMs();
      if (t < 0 || ms < t) t = ms;
    }
    return t;
  }

  void acceptAll() {
    for (;;) {
      net::SockAddr from;
      net::Fd fd = net::acceptNonBlocking(listenFd_, &from);
      if (!fd.valid()) return;
      auto c = std::make_unique<Conn>();
      c->fd = std::move(fd);
      c->peer = from.toString();
      if (key_) {
        c->auth = AuthState::AwaitHello;
        c->authDeadline = Deadline::after(kAuthGrace);
      }
      TCCL_TRACE("store server " << name_ << ": connection from " << c->peer);
      conns_.push_back(std::move(c));
    }
  }

  void closeConn(Conn& c, std::string warning) {
    if (warning.empty() && c.closing) warning = c.closingWhy;  // refused, then hung up
    if (warning.empty() && (c.auth == AuthState::AwaitHello || c.auth == AuthState::AwaitProof)) {
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
    if (c.parked) --parked_;
    c.parked = false;
    c.closed = true;
    c.fd.reset();
    Bytes().swap(c.in);
    Bytes().swap(c.out);
    c.inStart = c.outStart = 0;
  }

  void onEvents(Conn& c, short rev, short requested) {
    if (rev & POLLNVAL) return closeConn(c, "descriptor became invalid");
    if ((rev & POLLOUT) && c.pendingOut() > 0) flush(c);
    if (c.closed) return;
    if ((rev & POLLIN) && (requested & POLLIN)) {
      readInput(c);
    } else if (rev & (POLLHUP | POLLERR | POLLRDHUP)) {
      // Gone while parked or while its replies are backed up: nobody to answer.
      closeConn(c, "");
    }
  }

  void readInput(Conn& c) {
    size_t total = 0;
    while (!c.closed && !c.parked && c.pendingOut() < kMaxPendingOutput &&
           total < kMaxReadPerWakeup) {
      const size_t old = c.in.size();
      c.in.resize(old + kReadChunk);
      ssize_t n = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
      c.in.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
      if (n > 0) {
        total += static_cast<size_t>(n);
        // Decode as bytes arrive: garbage is rejected at its first bad header byte and a
        // huge declared length before its body is read.
        processInput(c);
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
    while (!c.closed && !c.closing && !c.parked && c.pendingOut() < kMaxPendingOutput &&
           c.pendingIn() > 0) {
      if ((c.auth == AuthState::AwaitHello || c.auth == AuthState::AwaitProof) &&
          !screenUnauthenticated(c)) {
        return progress;
      }
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

  void reply(Conn& c, const Response& r) { storeproto::encodeResponse(r, &c.out); }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      if (data_.find(k) == data_.end()) out.push_back(k);
    }
    return out;
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
          d[2] <= static_cast<uint8_t>(Command::Auth)) {
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
  void refuse(Conn& c, Command command, const std::string& message, const std::string& warning) {
    Response resp;
    resp.command = command;
    resp.status = Status::Invalid;
    resp.message = message;
    reply(c, resp);
    c.closing = true;
    c.closingWhy = warning;
  }

  void onHello(Conn& c, const Request& req) {
    if (c.auth != AuthState::Open && c.auth != AuthState::AwaitHello) {
      Response resp;
      resp.command = Command::Hello;
      resp.status = Status::Invalid;
      resp.message = "HELLO is only valid as the first request of a connection";
      return reply(c, resp);
    }
    if (!key_) {
      if (req.hasKey) {
        return refuse(c, Command::Hello,
                      "the client authenticates with a key but this store has none (" +
                          std::string(kAuthKeyHint) + ")",
                      "the client has an auth key and this store has none");
      }
      Response resp;
      resp.command = Command::Hello;
      c.auth = AuthState::Ready;
      return reply(c, resp);
    }
    if (!req.hasKey) {
      return refuse(c, Command::Hello,
                    "this store requires authentication and the client has no key (" +
                        std::string(kAuthKeyHint) + ")",
                    "the client has no auth key");
    }
    c.transcript.protocol = auth::Protocol::Store;
    c.transcript.diallerNonce = req.nonce;
    c.transcript.acceptorNonce = auth::randomNonce();
    Response resp;
    resp.command = Command::Hello;
    resp.hasKey = true;
    resp.nonce = c.transcript.acceptorNonce;
    resp.mac = auth::proof(*key_, auth::Role::Acceptor, c.transcript);
    c.auth = AuthState::AwaitProof;
    reply(c, resp);
  }

  void onAuth(Conn& c, const Request& req) {
    if (c.auth != AuthState::AwaitProof) {
      Response resp;
      resp.command = Command::Auth;
      resp.status = Status::Invalid;
      resp.message = "AUTH is only valid after a HELLO challenge";
      return reply(c, resp);
    }
    if (!auth::verify(*key_, auth::Role::Dialler, c.transcript, req.mac)) {
      return refuse(c, Command::Auth,
                    "authentication failed: the client's key differs from this store's "
                    "(another job, or a wrong TCCL_AUTH_KEY)",
                    "authentication failed (the client's key differs)");
    }
    c.auth = AuthState::Ready;
    c.authDeadline = Deadline::never();
    Response resp;
    resp.command = Command::Auth;
    reply(c, resp);
  }

  void expireUnauthenticated() {
    for (auto& c : conns_) {
      if (c->closed || c->authDeadline.isNever() || !c->authDeadline.expired()) continue;
      c->authDeadline = Deadline::never();
      if (c->auth == AuthState::Ready) continue;
      closeConn(*c, "did not authenticate within " + std::to_string(kAuthGrace.count()) + " s");
    }
  }

  void serve(Conn& c, Request req) {
    if (req.command == Command::Hello) return onHello(c, req);
    if (req.command == Command::Auth) return onAuth(c, req);
    c.auth = AuthState::Ready;  // only an Open connection gets here unauthenticated
    Response resp;
    resp.command = req.command;
    switch (req.command) {
      case Command::Set:
        data_[std::move(req.key)] = std::move(req.value);
        reply(c, resp);
        wakeWaiters();
        return;
      case Command::Get:
      case Command::Wait:
        if (req.command == Command::Get) req.keys = {req.key};
        if (!missing(req.keys).empty() && req.timeoutMs != 0) {
          c.parked = true;
          ++parked_;
          c.deadline = storeproto::deadlineAfterMs(req.timeoutMs);
          c.waiting = std::move(req);
          return;
        }
        c.waiting = std::move(req);
        answerWaiter(c);
        return;
      case Command::Add: {
        auto it = data_.find(req.key);
        std::optional<int64_t> v = storeproto::applyAdd(
            req.key, it == data_.end() ? nullptr : &it->second, req.delta, &resp.message);
        if (!v) {
          resp.status = Status::Invalid;
          reply(c, resp);
          return;
        }
        data_[req.key] = storeproto::formatDecimal(*v);
        resp.number = *v;
        reply(c, resp);
        wakeWaiters();
        return;
      }
      case Command::Check:
        resp.flag = missing(req.keys).empty();
        reply(c, resp);
        return;
      case Command::Erase:
        resp.flag = data_.erase(req.key) > 0;
        reply(c, resp);
        return;
      case Command::Ping:
        reply(c, resp);
        return;
      case Command::Hello:
      case Command::Auth:
        return;  // handled above
    }
  }

  // Replies to c.waiting (a GET or WAIT) from the current state: OK, or TIMEOUT naming
  // the keys still missing.
  void answerWaiter(Conn& c) {
    Response resp;
    resp.command = c.waiting.command;
    resp.keys = missing(c.waiting.keys);
    if (!resp.keys.empty()) {
      resp.status = Status::Timeout;
    } else if (c.waiting.command == Command::Get) {
      resp.value = data_.at(c.waiting.key);
    }
    if (c.parked) --parked_;
    c.parked = false;
    c.waiting = Request();
    reply(c, resp);
  }

  void wakeWaiters() {
    if (parked_ == 0) return;
    for (auto& c : conns_) {
      if (c->closed || !c->parked || !missing(c->waiting.keys).empty()) continue;
      guarded(*c, [&](Conn& cc) { answerWaiter(cc); });
    }
  }

  void expireWaiters() {
    if (parked_ == 0) return;
    for (auto& c : conns_) {
      if (c->closed || !c->parked || !c->deadline.expired()) continue;
      guarded(*c, [&](Conn& cc) { answerWaiter(cc); });
    }
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

  const int listenFd_;
  const int wakeFd_;
  const std::string name_;
  const auth::KeyPtr key_;
  std::vector<std::unique_ptr<Conn>> conns_;
  size_t parked_ = 0;
  std::unordered_map<std::string, Bytes> data_;
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
  const std::string name = net::joinHostPort(host, impl_->port);
  auth::requireKeyToListen(key != nullptr, !net::boundToLoopback(impl_->listenFd.get()),
                           "the store server", name);  // secure by default (issue 14)
  TCCL_INFO("store server listening on "
            << name
            << (key ? " (clients must authenticate, key id " + key->id() + ")"
                    : std::string(" (clients are not authenticated)")));
  impl_->thread =
      std::thread([listenFd = impl_->listenFd.get(), wakeFd = impl_->wakeFd.get(), name,
                   key = std::move(key)] { ServerLoop(listenFd, wakeFd, name, key).run(); });
}

TcpStoreServer::~TcpStoreServer() { stop(); }

uint16_t TcpStoreServer::port() const { return impl_->port; }
const std::string& TcpStoreServer::host() const { return impl_->host; }

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
