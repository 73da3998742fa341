// TcpStore, the client of a TcpStoreServer (tcp_store_server.cpp). Wire format:
// store/store_protocol.hpp.
//
// One connection, one request in flight (a mutex); GET and WAIT send their timeout to
// the server, which answers TIMEOUT naming the missing keys, and the client waits a
// little longer than that (kServerGrace). With a job key the client checks the server's
// proof too, so a rank never talks to another job's store (docs/security.md).
#include <algorithm>
#include <cerrno>
#include <mutex>

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
  std::mutex mu;  // one request in flight per connection
  net::Fd fd;
  std::string broken;  // why the connection is unusable; "" while it is fine

  [[noreturn]] void fail(ErrorKind kind, const std::string& message) {
    fd.reset();
    broken = message;
    ErrorInfo info;
    info.kind = kind;
    info.message = message;
    info.peerAddress = address;
    throwError(std::move(info));
  }

  [[noreturn]] void ioFailure(const char* doing, Command c, net::IoStatus st, int err,
                              Deadline::Clock::time_point start) {
    const std::string what = std::string(doing) + " " + std::string(storeproto::toString(c));
    switch (st) {
      case net::IoStatus::Timeout:
        fail(ErrorKind::Timeout, "the store did not respond while " + what + " (gave up after " +
                                     std::to_string(elapsedSince(start).count()) + " ms)");
      case net::IoStatus::Closed:
        fail(ErrorKind::Store, "the store closed the connection while " + what);
      default:
        fail(ErrorKind::Store, "socket error while " + what + ": " + net::errnoString(err));
    }
  }

  // One request, one response. Caller holds mu. An INVALID reply throws, unless
  // invalidThrows is false (the handshake reports it as a refusal).
  Response roundTrip(const Request& req, Deadline deadline, bool invalidThrows = true) {
    if (!broken.empty()) {
      ErrorInfo info;
      info.kind = ErrorKind::Store;
      info.message = "connection unusable after an earlier failure: " + broken;
      info.peerAddress = address;
      throwError(std::move(info));
    }
    Bytes frame;
    storeproto::encodeRequest(req, &frame);  // limits are checked before any byte is sent
    const auto start = Deadline::Clock::now();
    int err = 0;
    net::IoStatus st = net::sendAll(fd.get(), frame.data(), frame.size(), deadline, nullptr, &err);
    if (st != net::IoStatus::Ok) ioFailure("sending", req.command, st, err, start);

    Bytes buf(storeproto::kHeaderBytes);
    st = net::recvAll(fd.get(), buf.data(), buf.size(), deadline, nullptr, &err);
    if (st != net::IoStatus::Ok) ioFailure("awaiting the reply to", req.command, st, err, start);
    Response resp;
    storeproto::DecodeResult r = storeproto::decodeResponse(buf.data(), buf.size(), &resp);
    if (r.status == DecodeStatus::NeedMore) {
      buf.resize(r.frameBytes);
      st = net::recvAll(fd.get(), buf.data() + storeproto::kHeaderBytes,
                        buf.size() - storeproto::kHeaderBytes, deadline, nullptr, &err);
      if (st != net::IoStatus::Ok) ioFailure("reading the reply to", req.command, st, err, start);
      r = storeproto::decodeResponse(buf.data(), buf.size(), &resp);
    }
    if (r.status != DecodeStatus::Ok) {
      fail(ErrorKind::Store, "bad reply to " + std::string(storeproto::toString(req.command)) +
                                 ": " + (r.error.empty() ? "incomplete frame" : r.error));
    }
    if (resp.command != req.command) {
      fail(ErrorKind::Store, "reply to " + std::string(storeproto::toString(req.command)) +
                                 " is for " + std::string(storeproto::toString(resp.command)));
    }
    if (resp.status == Status::Invalid && invalidThrows) {
      ErrorInfo info;
      info.kind = ErrorKind::InvalidArgument;
      info.message = resp.message;
      info.peerAddress = address;
      throwError(std::move(info));
    }
    return resp;
  }

  [[noreturn]] void handshakeFailure(const std::string& message) {
    fd.reset();
    broken = message;
    ErrorInfo info;
    info.kind = ErrorKind::Handshake;
    info.message = "store handshake: " + message;
    info.peerAddress = address;
    throwError(std::move(info));
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
    std::lock_guard<std::mutex> lock(mu);
    return roundTrip(req, storeproto::deadlineAfter(timeout));
  }

  // GET / WAIT: the server waits up to timeout; the client a little longer.
  Response waiting(Request req, std::chrono::milliseconds timeout, std::string_view op) {
    const auto start = Deadline::Clock::now();
    req.timeoutMs = timeout.count() < 0 ? -1 : timeout.count();
    const bool never =
        timeout.count() < 0 ||
        timeout.count() > std::chrono::milliseconds::max().count() - kServerGrace.count();
    Response resp;
    {
      std::lock_guard<std::mutex> lock(mu);
      resp = roundTrip(
          req, never ? Deadline::never() : storeproto::deadlineAfter(timeout + kServerGrace));
    }
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
  const auth::KeyPtr key = auth::keyFromEnv();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->handshake(key, deadline);
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

}  // namespace tccl
