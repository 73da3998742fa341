// TcpStore, the client of a TcpStoreServer (tcp_store_server.cpp). Wire format:
// store/store_protocol.hpp.
//
// One connection, shared by every thread of the process that uses this client: each
// request carries a tag, the server answers each when it can (a parked WAIT does not
// hold up a heartbeat's SET behind it), and the threads waiting take turns reading
// replies and handing them out by tag. GET, WAIT and MULTI_GET send their timeout to the
// server, which answers TIMEOUT naming the missing keys, and the client waits a little
// longer than that (kServerGrace). With a job key the client checks the server's
// proof too, so a rank never talks to another job's store (docs/security.md).
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "auth/auth.hpp"
#include "base/log.hpp"
#include "net/socket.hpp"
#include "store/store_protocol.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {
namespace {

using storeproto::Command;
using storeproto::DecodeStatus;
using storeproto::kAuthKeyHint;
using storeproto::Request;
using storeproto::Response;
using storeproto::Status;

// The client waits this much longer than the timeout it sends, so that the server's
// TIMEOUT reply (which names the missing keys) arrives before the client gives up.
constexpr std::chrono::milliseconds kServerGrace{1000};

std::chrono::milliseconds elapsedSince(Deadline::Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start);
}

}  // namespace

// ---- client ------------------------------------------------------------------------

struct TcpStore::Impl {
  std::string host;
  uint16_t port = 0;
  std::string address;  // "host:port", named in every error
  std::string localIp;
  net::Fd fd;
  std::mutex sendMu;  // one frame on the socket at a time
  std::mutex mu;      // guards everything below
  std::condition_variable cv;
  std::string broken;  // why the connection is unusable; "" while it is fine
  uint32_t nextTag = 1;
  bool reading = false;                            // a thread is reading replies for everyone
  std::unordered_set<uint32_t> pending;            // tags sent, reply not yet taken
  std::unordered_map<uint32_t, Response> arrived;  // replies read, not yet taken

  [[noreturn]] void throwFor(ErrorKind kind, const std::string& message) const {
    ErrorInfo info;
    info.kind = kind;
    info.message = message;
    info.peerAddress = address;
    throwError(std::move(info));
  }

  // Caller holds mu. The first failure names the connection's state from then on; the
  // shutdown wakes any thread polling the socket.
  void markBroken(const std::string& message) {
    if (broken.empty()) {
      broken = message;
      if (fd.valid()) ::shutdown(fd.get(), SHUT_RDWR);
    }
    cv.notify_all();
  }

  [[noreturn]] void fail(std::unique_lock<std::mutex>& lk, ErrorKind kind,
                         const std::string& message) {
    markBroken(message);
    lk.unlock();
    throwFor(kind, message);
  }

  static std::pair<ErrorKind, std::string> ioFailure(const char* doing, Command c, net::IoStatus st,
                                                     int err, Deadline::Clock::time_point start) {
    const std::string what = std::string(doing) + " " + std::string(storeproto::toString(c));
    switch (st) {
      case net::IoStatus::Timeout:
        return {ErrorKind::Timeout, "the store did not respond while " + what + " (gave up after " +
                                        std::to_string(elapsedSince(start).count()) + " ms)"};
      case net::IoStatus::Closed:
        return {ErrorKind::Store, "the store closed the connection while " + what};
      default:
        return {ErrorKind::Store, "socket error while " + what + ": " + net::errnoString(err)};
    }
  }

  // Reads one reply frame (the caller is the one reader). Returns "" or why it failed.
  std::pair<ErrorKind, std::string> readReply(Command c, Deadline deadline,
                                              Deadline::Clock::time_point start, Response* out) {
    Bytes buf(storeproto::kHeaderBytes);
    int err = 0;
    net::IoStatus st = net::recvAll(fd.get(), buf.data(), buf.size(), deadline, nullptr, &err);
    if (st != net::IoStatus::Ok) return ioFailure("awaiting the reply to", c, st, err, start);
    storeproto::DecodeResult r = storeproto::decodeResponse(buf.data(), buf.size(), out);
    if (r.status == DecodeStatus::NeedMore) {
      buf.resize(r.frameBytes);
      st = net::recvAll(fd.get(), buf.data() + storeproto::kHeaderBytes,
                        buf.size() - storeproto::kHeaderBytes, deadline, nullptr, &err);
      if (st != net::IoStatus::Ok) return ioFailure("reading the reply to", c, st, err, start);
      r = storeproto::decodeResponse(buf.data(), buf.size(), out);
    }
    if (r.status != DecodeStatus::Ok) {
      return {ErrorKind::Store, "bad reply to " + std::string(storeproto::toString(c)) + ": " +
                                    (r.error.empty() ? "incomplete frame" : r.error)};
    }
    return {ErrorKind::Store, ""};
  }

  // Waits for the reply tagged `tag`. Threads sharing the connection take turns reading:
  // whoever finds nobody reading reads frames and files them by tag until its own
  // arrives, then hands over (docs/store.md, "One connection per rank").
  Response awaitReply(uint32_t tag, Command c, Deadline deadline,
                      Deadline::Clock::time_point start) {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      if (auto it = arrived.find(tag); it != arrived.end()) {
        Response resp = std::move(it->second);
        arrived.erase(it);
        pending.erase(tag);
        return resp;
      }
      if (!broken.empty()) {
        pending.erase(tag);
        lk.unlock();
        throwFor(ErrorKind::Store, "connection unusable after an earlier failure: " + broken);
      }
      if (!reading) {
        reading = true;
        lk.unlock();
        Response got;
        auto [kind, why] = readReply(c, deadline, start, &got);
        lk.lock();
        reading = false;
        cv.notify_all();
        if (why.empty() && pending.count(got.tag) == 0) {
          why = "reply tagged " + std::to_string(got.tag) + " answers no request";
        }
        if (!why.empty()) {
          pending.erase(tag);
          fail(lk, kind, why);
        }
        arrived.emplace(got.tag, std::move(got));
        continue;
      }
      if (deadline.isNever()) {
        cv.wait(lk);
      } else if (cv.wait_until(lk, deadline.at()) == std::cv_status::timeout &&
                 arrived.count(tag) == 0) {
        pending.erase(tag);
        fail(lk, ErrorKind::Timeout,
             ioFailure("awaiting the reply to", c, net::IoStatus::Timeout, 0, start).second);
      }
    }
  }

  // One request, one response; any thread. An INVALID reply throws, unless
  // invalidThrows is false (the handshake reports it as a refusal).
  Response roundTrip(Request req, Deadline deadline, bool invalidThrows = true) {
    Bytes frame;
    {
      std::unique_lock<std::mutex> lk(mu);
      if (!broken.empty()) {
        lk.unlock();
        throwFor(ErrorKind::Store, "connection unusable after an earlier failure: " + broken);
      }
      req.tag = nextTag++;
      storeproto::encodeRequest(req, &frame);  // limits are checked before any byte is sent
      pending.insert(req.tag);
    }
    const auto start = Deadline::Clock::now();
    int err = 0;
    net::IoStatus st;
    {
      std::lock_guard<std::mutex> send(sendMu);
      st = net::sendAll(fd.get(), frame.data(), frame.size(), deadline, nullptr, &err);
    }
    if (st != net::IoStatus::Ok) {
      std::unique_lock<std::mutex> lk(mu);
      pending.erase(req.tag);
      auto [kind, why] = ioFailure("sending", req.command, st, err, start);
      fail(lk, kind, why);
    }
    Response resp = awaitReply(req.tag, req.command, deadline, start);
    if (resp.command != req.command) {
      std::unique_lock<std::mutex> lk(mu);
      fail(lk, ErrorKind::Store,
           "reply to " + std::string(storeproto::toString(req.command)) + " is for " +
               std::string(storeproto::toString(resp.command)));
    }
    if (resp.status == Status::Invalid && invalidThrows) {
      throwFor(ErrorKind::InvalidArgument, resp.message);
    }
    return resp;
  }

  [[noreturn]] void handshakeFailure(const std::string& message) {
    {
      std::lock_guard<std::mutex> lk(mu);
      markBroken(message);
    }
    throwFor(ErrorKind::Handshake, "store handshake: " + message);
  }

  // HELLO (and with a key AUTH), the first requests on the connection: proves the
  // listener speaks this protocol and version, and with a key that both ends hold it.
  void handshake(const auth::KeyPtr& key, Deadline deadline) {
    auth::Transcript t;
    t.protocol = auth::Protocol::Store;
    Request hello;
    hello.command = Command::Hello;
    hello.hasKey = key != nullptr;
    if (key) {
      t.diallerNonce = auth::randomNonce();
      hello.nonce = t.diallerNonce;
    }
    Response resp = roundTrip(hello, deadline, /*invalidThrows=*/false);
    if (resp.status == Status::Invalid) handshakeFailure("refused this client: " + resp.message);
    if (!key) {
      if (resp.hasKey) {
        handshakeFailure("the store authenticates with a key and this process has none (" +
                         std::string(kAuthKeyHint) + ")");
      }
      return;
    }
    if (!resp.hasKey) {
      handshakeFailure("the store does not authenticate and this process has a key (" +
                       std::string(kAuthKeyHint) + ")");
    }
    t.acceptorNonce = resp.nonce;
    if (!auth::verify(*key, auth::Role::Acceptor, t, resp.mac)) {
      handshakeFailure(
          "authentication failed: the store does not hold this job's key (another job's "
          "store, or a different TCCL_AUTH_KEY)");
    }
    Request proof;
    proof.command = Command::Auth;
    proof.mac = auth::proof(*key, auth::Role::Dialler, t);
    resp = roundTrip(proof, deadline, /*invalidThrows=*/false);
    if (resp.status == Status::Invalid) handshakeFailure("refused this client: " + resp.message);
  }

  // A non-waiting request: bounded by the store's timeout.
  Response simple(Request req, std::chrono::milliseconds timeout) {
    return roundTrip(std::move(req), storeproto::deadlineAfter(timeout));
  }

  // GET / WAIT / MULTI_GET: the server waits up to timeout; the client a little longer.
  Response waiting(Request req, std::chrono::milliseconds timeout, std::string_view op) {
    const auto start = Deadline::Clock::now();
    req.timeoutMs = timeout.count() < 0 ? -1 : timeout.count();
    const bool never =
        timeout.count() < 0 ||
        timeout.count() > std::chrono::milliseconds::max().count() - kServerGrace.count();
    Response resp =
        roundTrip(std::move(req),
                  never ? Deadline::never() : storeproto::deadlineAfter(timeout + kServerGrace));
    if (resp.status == Status::Timeout) {
      storeproto::throwStoreTimeout(op, resp.keys, timeout, elapsedSince(start), address);
    }
    return resp;
  }
};

TcpStore::TcpStore(const std::string& host, uint16_t port, std::chrono::milliseconds connectTimeout)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = host;
  impl_->port = port;
  impl_->address = net::joinHostPort(host, port);
  const Deadline deadline = storeproto::deadlineAfter(connectTimeout);
  impl_->fd = net::connectWithRetry(host, port, deadline);
  impl_->localIp = net::localAddress(impl_->fd.get()).ip();
  impl_->handshake(auth::keyFromEnv(), deadline);
}

TcpStore::~TcpStore() = default;

const std::string& TcpStore::host() const { return impl_->host; }
uint16_t TcpStore::port() const { return impl_->port; }
std::string TcpStore::localAddress() const { return impl_->localIp; }

void TcpStore::set(const std::string& key, const Bytes& value) {
  Request req;
  req.command = Command::Set;
  req.key = key;
  req.value = value;
  impl_->simple(std::move(req), timeout());
}

Bytes TcpStore::get(const std::string& key) {
  Request req;
  req.command = Command::Get;
  req.key = key;
  return std::move(impl_->waiting(std::move(req), timeout(), "get").value);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  Request req;
  req.command = Command::Add;
  req.key = key;
  req.delta = delta;
  return impl_->simple(std::move(req), timeout()).number;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  Request req;
  req.command = Command::Check;
  req.keys = keys;
  return impl_->simple(std::move(req), timeout()).flag;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Request req;
  req.command = Command::Wait;
  req.keys = keys;
  impl_->waiting(std::move(req), timeout, "wait");
}

bool TcpStore::erase(const std::string& key) {
  Request req;
  req.command = Command::Erase;
  req.key = key;
  return impl_->simple(std::move(req), timeout()).flag;
}

std::vector<Bytes> TcpStore::multiGet(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) {
  Request req;
  req.command = Command::MultiGet;
  req.keys = keys;
  Response resp = impl_->waiting(std::move(req), timeout, "multiGet");
  if (resp.values.size() != keys.size()) {
    impl_->throwFor(ErrorKind::Store, "the store answered MULTI_GET of " +
                                          std::to_string(keys.size()) + " keys with " +
                                          std::to_string(resp.values.size()) + " values");
  }
  return std::move(resp.values);
}

void TcpStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  storeproto::checkPairs(keys, values);
  Request req;
  req.command = Command::MultiSet;
  req.keys = keys;
  req.values = values;
  impl_->simple(std::move(req), timeout());
}

Bytes TcpStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  Request req;
  req.command = Command::CompareSet;
  req.key = key;
  req.expected = expected;
  req.value = desired;
  return std::move(impl_->simple(std::move(req), timeout()).value);
}

}  // namespace tccl
