#include "tccl/error.hpp"

#include <sstream>

namespace tccl {

std::string_view toString(ErrorKind k) {
  switch (k) {
    case ErrorKind::InvalidArgument:
      return "InvalidArgument";
    case ErrorKind::Timeout:
      return "Timeout";
    case ErrorKind::PeerClosed:
      return "PeerClosed";
    case ErrorKind::Protocol:
      return "Protocol";
    case ErrorKind::Mismatch:
      return "Mismatch";
    case ErrorKind::Handshake:
      return "Handshake";
    case ErrorKind::Store:
      return "Store";
    case ErrorKind::System:
      return "System";
    case ErrorKind::Aborted:
      return "Aborted";
  }
  return "?";
}

namespace {

// " (parent rank 3, world rank 5)" for a sub-communicator's rank, else nothing.
std::string alsoKnownAs(const ErrorInfo::OtherNumbering& n) {
  if (n.parent < 0 && n.world < 0) return "";
  std::string s = " (";
  if (n.parent >= 0) s += "parent rank " + std::to_string(n.parent);
  if (n.world >= 0)
    s += (n.parent >= 0 ? ", " : "") + std::string("world rank ") + std::to_string(n.world);
  return s + ")";
}

}  // namespace

std::string Error::format(const ErrorInfo& i) {
  std::ostringstream os;
  if (i.rank >= 0) os << "[rank " << i.rank << alsoKnownAs(i.rankAlso) << "] ";
  os << toString(i.kind);
  if (!i.collective.empty()) {
    os << " in " << i.collective;
    if (i.seq >= 0) os << " #" << i.seq;
    if (!i.algorithm.empty() || !i.phase.empty()) {
      os << " (";
      if (!i.algorithm.empty()) os << i.algorithm;
      if (!i.phase.empty()) os << (i.algorithm.empty() ? "" : " ") << i.phase;
      if (i.step >= 0) {
        os << " step " << (i.step + 1);
        if (i.steps >= 0) os << "/" << i.steps;
      }
      os << ")";
    }
  }
  if (i.peer >= 0) {
    os << " with rank " << i.peer << alsoKnownAs(i.peerAlso);
    if (!i.peerAddress.empty()) os << " (" << i.peerAddress << ")";
  } else if (!i.peerAddress.empty()) {
    os << " with " << i.peerAddress;
  }
  os << ": " << i.message;
  if (i.culprit >= 0 && i.culprit != i.peer) {
    os << "; culprit rank " << i.culprit << alsoKnownAs(i.culpritAlso);
    if (!i.culpritAddress.empty()) os << " (" << i.culpritAddress << ")";
  }
  if (i.detectedBy >= 0 && i.detectedBy != i.rank) os << "; detected by rank " << i.detectedBy;
  if (!i.localSignature.empty() || !i.remoteSignature.empty()) {
    os << "; this rank called " << (i.localSignature.empty() ? "?" : i.localSignature);
    if (i.culprit >= 0 && i.culprit == i.rank) {
      os << ", the other ranks called ";
    } else {
      os << ", rank " << (i.culprit >= 0 ? i.culprit : i.peer) << " called ";
    }
    os << (i.remoteSignature.empty() ? "?" : i.remoteSignature);
  }
  if (i.bytesExpected >= 0) {
    os << "; bytes " << (i.bytesMoved < 0 ? 0 : i.bytesMoved) << "/" << i.bytesExpected;
  }
  if (i.timeoutMs >= 0) {
    os << "; waited " << (i.elapsedMs < 0 ? 0 : i.elapsedMs) << " ms of " << i.timeoutMs
       << " ms allowed";
  } else if (i.elapsedMs >= 0) {
    os << "; after " << i.elapsedMs << " ms";
  }
  return os.str();
}

Error::Error(ErrorInfo info) : std::runtime_error(format(info)), info_(std::move(info)) {}

void throwError(ErrorInfo info) {
  switch (info.kind) {
    case ErrorKind::InvalidArgument:
      throw InvalidArgumentError(std::move(info));
    case ErrorKind::Timeout:
      throw TimeoutError(std::move(info));
    case ErrorKind::PeerClosed:
      throw PeerClosedError(std::move(info));
    case ErrorKind::Protocol:
      throw ProtocolError(std::move(info));
    case ErrorKind::Mismatch:
      throw MismatchError(std::move(info));
    case ErrorKind::Handshake:
      throw HandshakeError(std::move(info));
    case ErrorKind::Store:
      throw StoreError(std::move(info));
    case ErrorKind::System:
      throw SystemError(std::move(info));
    case ErrorKind::Aborted:
      throw AbortedError(std::move(info));
  }
  throw Error(std::move(info));
}

void throwError(ErrorKind kind, std::string message, int rank, int peer) {
  ErrorInfo info;
  info.kind = kind;
  info.message = std::move(message);
  info.rank = rank;
  info.peer = peer;
  throwError(std::move(info));
}

}  // namespace tccl
