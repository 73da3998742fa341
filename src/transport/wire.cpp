#include "transport/wire.hpp"

#include <cstring>

namespace tccl::wire {
namespace {

template <typename T>
void put(uint8_t* p, T v) {
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<uint8_t>(u >> (8 * i));
}

template <typename T>
T get(const uint8_t* p) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u |= static_cast<U>(static_cast<U>(p[i]) << (8 * i));
  return static_cast<T>(u);
}

}  // namespace

std::string_view toString(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::Ok:
      return "ok";
    case DecodeStatus::BadMagic:
      return "bad magic (not a tccl peer)";
    case DecodeStatus::BadKind:
      return "unknown message kind";
    case DecodeStatus::TooLong:
      return "payload length over the limit";
  }
  return "?";
}

void encodeHeader(const MessageHeader& h, uint8_t out[kHeaderSize]) {
  put<uint16_t>(out + 0, kHeaderMagic);
  out[2] = static_cast<uint8_t>(h.kind);
  out[3] = h.flags;
  put<uint32_t>(out + 4, h.seq);
  put<uint32_t>(out + 8, h.fingerprint);
  put<uint32_t>(out + 12, h.step);
  put<uint64_t>(out + 16, h.length);
}

DecodeStatus decodeHeader(const uint8_t in[kHeaderSize], MessageHeader* out) {
  if (get<uint16_t>(in) != kHeaderMagic) return DecodeStatus::BadMagic;
  uint8_t kind = in[2];
  if (kind < static_cast<uint8_t>(MsgKind::Data) || kind > static_cast<uint8_t>(MsgKind::Cancel)) {
    return DecodeStatus::BadKind;
  }
  MessageHeader h;
  h.kind = static_cast<MsgKind>(kind);
  h.flags = in[3];
  h.seq = get<uint32_t>(in + 4);
  h.fingerprint = get<uint32_t>(in + 8);
  h.step = get<uint32_t>(in + 12);
  h.length = get<uint64_t>(in + 16);
  if (h.length > kMaxPayload) return DecodeStatus::TooLong;
  *out = h;
  return DecodeStatus::Ok;
}

std::string_view toString(RejectReason r) {
  switch (r) {
    case RejectReason::None:
      return "accepted";
    case RejectReason::BadMagic:
      return "bad magic (not a tccl peer)";
    case RejectReason::BadVersion:
      return "protocol version differs";
    case RejectReason::WrongJob:
      return "job id differs (another job)";
    case RejectReason::WrongCommunicator:
      return "communicator id differs";
    case RejectReason::WrongWorldSize:
      return "world size differs";
    case RejectReason::BadRank:
      return "rank out of range";
    case RejectReason::WrongTarget:
      return "hello addressed to another rank";
    case RejectReason::Duplicate:
      return "a connection from that rank on that lane already exists";
    case RejectReason::AuthRequired:
      return "the rejecting side requires an auth key and the other side has none "
             "(set TCCL_AUTH_KEY or TCCL_AUTH_KEY_FILE the same on every rank)";
    case RejectReason::AuthUnsupported:
      return "the other side authenticates with a key and the rejecting side has none "
             "(set TCCL_AUTH_KEY or TCCL_AUTH_KEY_FILE the same on every rank)";
    case RejectReason::AuthFailed:
      return "authentication failed: the two sides' keys differ (another job, or a wrong key)";
    case RejectReason::Unexpected:
      return "unexpected handshake message";
    case RejectReason::BadLane:
      return "unknown connection lane (0 collectives, 1 point to point)";
    case RejectReason::NsocksDiffers:
      return "TCCL_NSOCKS differs (set it the same on every rank)";
  }
  return "unknown reason";
}

void encodeHello(const Hello& h, uint8_t out[kHelloSize]) {
  put<uint32_t>(out + 0, kHelloMagic);
  put<uint16_t>(out + 4, h.version);
  put<uint16_t>(out + 6, static_cast<uint16_t>(h.kind));
  put<uint64_t>(out + 8, h.jobId);
  put<uint64_t>(out + 16, h.commId);
  put<int32_t>(out + 24, h.rank);
  put<int32_t>(out + 28, h.worldSize);
  put<int32_t>(out + 32, h.targetRank);
  put<uint32_t>(out + 36, static_cast<uint32_t>(h.reason));
  put<uint32_t>(out + 40, h.flags);
  put<uint32_t>(out + 44, h.lane);
  std::memcpy(out + 48, h.nonce.data(), kNonceSize);
  std::memcpy(out + 80, h.mac.data(), kMacSize);
}

DecodeStatus decodeHello(const uint8_t in[kHelloSize], Hello* out) {
  if (get<uint32_t>(in) != kHelloMagic) return DecodeStatus::BadMagic;
  uint16_t kind = get<uint16_t>(in + 6);
  if (kind < static_cast<uint16_t>(HelloKind::Hello) ||
      kind > static_cast<uint16_t>(HelloKind::Proof)) {
    return DecodeStatus::BadKind;
  }
  Hello h;
  h.version = get<uint16_t>(in + 4);
  h.kind = static_cast<HelloKind>(kind);
  h.jobId = get<uint64_t>(in + 8);
  h.commId = get<uint64_t>(in + 16);
  h.rank = get<int32_t>(in + 24);
  h.worldSize = get<int32_t>(in + 28);
  h.targetRank = get<int32_t>(in + 32);
  h.reason = static_cast<RejectReason>(get<uint32_t>(in + 36));
  h.flags = get<uint32_t>(in + 40);
  h.lane = get<uint32_t>(in + 44);
  std::memcpy(h.nonce.data(), in + 48, kNonceSize);
  std::memcpy(h.mac.data(), in + 80, kMacSize);
  *out = h;
  return DecodeStatus::Ok;
}

bool plausibleHelloPrefix(const uint8_t* in, size_t n, uint16_t* version) {
  uint8_t magic[4];
  put<uint32_t>(magic, kHelloMagic);
  for (size_t i = 0; i < n && i < sizeof magic; ++i) {
    if (in[i] != magic[i]) return false;
  }
  if (n >= kHelloPrefixSize && version != nullptr) *version = get<uint16_t>(in + 4);
  return true;
}

RejectReason checkHello(const Hello& h, uint64_t jobId, uint64_t commId, int myRank,
                        int worldSize) {
  if (h.kind != HelloKind::Hello) return RejectReason::Unexpected;
  if (h.version != kProtocolVersion) return RejectReason::BadVersion;
  if (h.jobId != jobId) return RejectReason::WrongJob;
  if (h.commId != commId) return RejectReason::WrongCommunicator;
  if (h.worldSize != worldSize) return RejectReason::WrongWorldSize;
  if (h.rank < 0 || h.rank >= worldSize || h.rank == myRank) return RejectReason::BadRank;
  if (h.targetRank != myRank) return RejectReason::WrongTarget;
  if (!validLaneField(h.lane)) return RejectReason::BadLane;
  return RejectReason::None;
}

namespace {
constexpr uint64_t kFnvOffset = 14695981039346656037ull;  // 0xcbf29ce484222325
constexpr uint64_t kFnvPrime = 1099511628211ull;
uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}
}  // namespace

uint64_t hash64(std::string_view s) { return fnv(kFnvOffset, s.data(), s.size()); }

uint32_t fingerprint(std::string_view collective, uint8_t algorithm, uint8_t dtype, uint8_t op,
                     uint64_t count, int32_t root) {
  uint64_t h = hash64(collective);
  uint8_t le[8];
  h = fnv(h, &algorithm, 1);
  h = fnv(h, &dtype, 1);
  h = fnv(h, &op, 1);
  put<uint64_t>(le, count);
  h = fnv(h, le, 8);
  put<int32_t>(le, root);
  h = fnv(h, le, 4);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

}  // namespace tccl::wire
