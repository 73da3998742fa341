// Typed errors. Everything tccl throws at its API boundary is a tccl::Error (or a
// subclass named after its kind), carrying the facts an on-call engineer needs as
// fields, and the same facts rendered into what().
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tccl {

enum class ErrorKind : uint8_t {
  InvalidArgument,  // bad input from the caller (count, dtype, rank, ...)
  Timeout,          // a deadline passed (connect, handshake, store, send, receive)
  PeerClosed,       // the peer's socket closed or reset
  Protocol,         // bytes on the wire that do not decode, or do not match the schedule
  Mismatch,         // the peer runs a different collective (seq or signature differs)
  Handshake,        // a connection was refused during the handshake
  Store,            // the rendezvous store failed or refused
  System,           // an OS call failed (errno in the message)
  Aborted,          // the communicator was aborted by an earlier error
};

std::string_view toString(ErrorKind k);

// What a failure was doing, where. Unset numeric fields are -1.
struct ErrorInfo {
  ErrorKind kind = ErrorKind::System;
  std::string message;  // the specific cause, e.g. "connection reset by peer"
  int rank = -1;        // this process's rank
  int peer = -1;        // the culprit or the peer involved
  std::string peerAddress;
  std::string collective;  // "allreduce"
  int64_t seq = -1;        // collective sequence number on this communicator
  std::string algorithm;   // "ring"
  std::string phase;       // "reduce-scatter"
  int step = -1;           // 0-based step within the phase
  int steps = -1;          // number of steps in the phase
  int64_t bytesMoved = -1;
  int64_t bytesExpected = -1;
  int64_t elapsedMs = -1;
  int64_t timeoutMs = -1;
  // The rank every survivor agrees caused the failure (through the store; see
  // docs/errors.md), its address, and the rank that detected it first. -1: unknown.
  int culprit = -1;
  std::string culpritAddress;
  int detectedBy = -1;
  // Mismatch: this rank's call and the culprit's ("allreduce #4 f32 x1024 sum").
  std::string localSignature;
  std::string remoteSignature;
  // On a sub-communicator (split, shrink): this rank, the peer and the culprit in the
  // parent's and the world's numbering (rank, peer and culprit above are the
  // sub-communicator's). -1: not a sub-communicator, or no such rank.
  struct OtherNumbering {
    int parent = -1;
    int world = -1;
  };
  OtherNumbering rankAlso, peerAlso, culpritAlso;
};

class Error : public std::runtime_error {
 public:
  explicit Error(ErrorInfo info);
  ErrorKind kind() const { return info_.kind; }
  const ErrorInfo& info() const { return info_; }
  int rank() const { return info_.rank; }
  int peer() const { return info_.peer; }
  int culprit() const { return info_.culprit; }
  // The cause without the context prefix.
  const std::string& cause() const { return info_.message; }

  // Renders "[rank 3] Timeout in allreduce #12 (ring reduce-scatter step 3/7): ...".
  static std::string format(const ErrorInfo& info);

 private:
  ErrorInfo info_;
};

#define TCCL_DEFINE_ERROR(Name)                               \
  class Name : public Error {                                 \
   public:                                                    \
    explicit Name(ErrorInfo info) : Error(std::move(info)) {} \
  };
TCCL_DEFINE_ERROR(InvalidArgumentError)
TCCL_DEFINE_ERROR(TimeoutError)
TCCL_DEFINE_ERROR(PeerClosedError)
TCCL_DEFINE_ERROR(ProtocolError)
TCCL_DEFINE_ERROR(MismatchError)
TCCL_DEFINE_ERROR(HandshakeError)
TCCL_DEFINE_ERROR(StoreError)
TCCL_DEFINE_ERROR(SystemError)
TCCL_DEFINE_ERROR(AbortedError)
#undef TCCL_DEFINE_ERROR

// Throws the subclass that matches info.kind.
[[noreturn]] void throwError(ErrorInfo info);
// Shorthand for the common case.
[[noreturn]] void throwError(ErrorKind kind, std::string message, int rank = -1, int peer = -1);

}  // namespace tccl
