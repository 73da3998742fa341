#include "store/store_protocol.hpp"

#include <cstring>
#include <limits>

#include "tccl/error.hpp"

namespace tccl::storeproto {
namespace {

// Timeouts beyond this are treated as "never": 100 years in ms. steady_clock counts
// nanoseconds in an int64, so now() + this cannot overflow for a machine's uptime.
constexpr int64_t kMaxFiniteTimeoutMs = int64_t{100} * 365 * 24 * 3600 * 1000;

bool validCommand(uint8_t c) {
  return c >= static_cast<uint8_t>(Command::Set) && c <= static_cast<uint8_t>(kLastCommand);
}

bool commandWaits(Command c) {
  return c == Command::Get || c == Command::Wait || c == Command::MultiGet;
}

// The body bytes a list of keys takes, and the same for values.
uint64_t runBytes(const std::vector<std::string>& ks) {
  uint64_t n = 0;
  for (const std::string& k : ks) n += 4 + k.size();
  return n;
}
uint64_t runBytes(const std::vector<Bytes>& vs) {
  uint64_t n = 0;
  for (const Bytes& v : vs) n += 4 + v.size();
  return n;
}

std::string hexByte(uint8_t b) {
  static const char kHex[] = "0123456789abcdef";
  std::string s = "0x";
  s += kHex[b >> 4];
  s += kHex[b & 15];
  return s;
}

// ---- encoding ----------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(Bytes* out) : out_(out) {}
  void u8(uint8_t v) { out_->push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_->push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) out_->push_back(static_cast<uint8_t>(u >> (8 * i)));
  }
  void bytes(const uint8_t* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    out_->insert(out_->end(), p, p + n);
  }
  void str(const std::string& s) { bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }
  template <size_t N>
  void fixed(const std::array<uint8_t, N>& a) {
    out_->insert(out_->end(), a.begin(), a.end());
  }
  void keys(const std::vector<std::string>& ks) {
    u32(static_cast<uint32_t>(ks.size()));
    for (const std::string& k : ks) str(k);
  }

 private:
  Bytes* out_;
};

void putU32At(Bytes* out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*out)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Writes the header, lets body() append the body, then patches bodyLen. On any failure
// *out is restored to its original size.
template <typename BodyFn>
void encodeFrame(uint8_t magic, Command c, uint8_t status, uint32_t tag, Bytes* out, BodyFn body) {
  const size_t start = out->size();
  try {
    Writer w(out);
    w.u8(magic);
    w.u8(kVersion);
    w.u8(static_cast<uint8_t>(c));
    w.u8(status);
    w.u32(0);
    w.u32(tag);
    body(w);
    const size_t bodyLen = out->size() - start - kHeaderBytes;
    if (bodyLen > kMaxBodyBytes) {
      throwError(ErrorKind::InvalidArgument,
                 "store " + std::string(toString(c)) + " frame body of " + std::to_string(bodyLen) +
                     " bytes exceeds the limit of " + std::to_string(kMaxBodyBytes));
    }
    putU32At(out, start + 4, static_cast<uint32_t>(bodyLen));
  } catch (...) {
    out->resize(start);
    throw;
  }
}

// ---- decoding ----------------------------------------------------------------------

// Reads fields from a complete body. Every read checks the bytes left first; nothing is
// allocated beyond what the body holds.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), left_(n) {}
  bool done() const { return left_ == 0; }
  size_t left() const { return left_; }
  const std::string& error() const { return error_; }

  bool fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
    return false;
  }
  bool u8(uint8_t* v) {
    if (left_ < 1) return fail("body ends inside a u8 field");
    *v = p_[0];
    advance(1);
    return true;
  }
  bool u32(uint32_t* v) {
    if (left_ < 4) return fail("body ends inside a u32 field");
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>(p_[i]) << (8 * i);
    *v = r;
    advance(4);
    return true;
  }
  bool i64(int64_t* v) {
    if (left_ < 8) return fail("body ends inside an i64 field");
    uint64_t r = 0;
    for (int i = 0; i < 8; ++i) r |= static_cast<uint64_t>(p_[i]) << (8 * i);
    *v = static_cast<int64_t>(r);
    advance(8);
    return true;
  }
  // A length-prefixed byte run of at most cap bytes; returns its start and length.
  bool run(const char* what, size_t cap, const uint8_t** start, size_t* n) {
    uint32_t len = 0;
    if (!u32(&len)) return fail(std::string(what) + " length is truncated");
    if (len > cap) {
      return fail(std::string(what) + " length " + std::to_string(len) + " exceeds the limit of " +
                  std::to_string(cap));
    }
    if (len > left_) {
      return fail(std::string(what) + " length " + std::to_string(len) + " overruns the body (" +
                  std::to_string(left_) + " bytes left)");
    }
    *start = p_;
    *n = len;
    advance(len);
    return true;
  }
  bool str(const char* what, size_t cap, std::string* s) {
    const uint8_t* start = nullptr;
    size_t n = 0;
    if (!run(what, cap, &start, &n)) return false;
    s->assign(reinterpret_cast<const char*>(start), n);
    return true;
  }
  bool bytes(const char* what, size_t cap, Bytes* b) {
    const uint8_t* start = nullptr;
    size_t n = 0;
    if (!run(what, cap, &start, &n)) return false;
    b->assign(start, start + n);
    return true;
  }
  // A count of items that take at least minItemBytes each: a count the body cannot hold
  // is rejected before reserving anything.
  bool count(const char* what, size_t minCount, size_t minItemBytes, uint32_t* count) {
    if (!u32(count)) return fail(std::string(what) + " count is truncated");
    if (*count > kMaxKeys) {
      return fail(std::string(what) + " count " + std::to_string(*count) +
                  " exceeds the limit of " + std::to_string(kMaxKeys));
    }
    if (*count < minCount) {
      return fail(std::string(what) + " count " + std::to_string(*count) + " is too small");
    }
    if (static_cast<uint64_t>(*count) * minItemBytes > left_) {
      return fail(std::string(what) + " count " + std::to_string(*count) + " cannot fit in the " +
                  std::to_string(left_) + " body bytes left");
    }
    return true;
  }
  bool keys(std::vector<std::string>* ks, size_t minCount) {
    uint32_t count = 0;
    if (!this->count("key", minCount, 4, &count)) return false;
    ks->clear();
    ks->reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      std::string k;
      if (!str("key", kMaxKeyBytes, &k)) return false;
      ks->push_back(std::move(k));
    }
    return true;
  }
  // A fixed-size run of raw bytes (nonces, MACs: no length prefix).
  template <size_t N>
  bool fixed(const char* what, std::array<uint8_t, N>* a) {
    if (left_ < N) return fail(std::string("body ends inside the ") + what);
    std::memcpy(a->data(), p_, N);
    advance(N);
    return true;
  }
  // MULTI_SET's pairs.
  bool pairs(std::vector<std::string>* ks, std::vector<Bytes>* vs) {
    uint32_t n = 0;
    if (!count("pair", 0, 8, &n)) return false;
    ks->clear();
    vs->clear();
    ks->reserve(n);
    vs->reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      std::string k;
      Bytes v;
      if (!str("key", kMaxKeyBytes, &k) || !bytes("value", kMaxValueBytes, &v)) return false;
      ks->push_back(std::move(k));
      vs->push_back(std::move(v));
    }
    return true;
  }
  // MULTI_GET's values.
  bool values(std::vector<Bytes>* vs) {
    uint32_t n = 0;
    if (!count("value", 0, 4, &n)) return false;
    vs->clear();
    vs->reserve(n);
    for (uint32_t i = 0; i < n; ++i) {
      Bytes v;
      if (!bytes("value", kMaxValueBytes, &v)) return false;
      vs->push_back(std::move(v));
    }
    return true;
  }
  bool boolean(bool* v) {
    uint8_t b = 0;
    if (!u8(&b)) return false;
    if (b > 1) return fail("boolean byte " + hexByte(b) + " is neither 0 nor 1");
    *v = b == 1;
    return true;
  }

 private:
  void advance(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
  std::string error_;
};

DecodeResult errorResult(std::string why) {
  DecodeResult r;
  r.status = DecodeStatus::Error;
  r.error = std::move(why);
  return r;
}

struct Header {
  Command command = Command::Ping;
  uint8_t status = 0;
  size_t bodyLen = 0;
  uint32_t tag = 0;
};

// Validates the header bytes present so far, byte by byte, so garbage is rejected as
// soon as its first byte arrives. Returns Ok with *h filled when the whole frame is in.
DecodeResult decodeHeader(const uint8_t* data, size_t size, bool request, Header* h) {
  const uint8_t magic = request ? kRequestMagic : kResponseMagic;
  if (size >= 1 && data[0] != magic) {
    return errorResult("bad magic " + hexByte(data[0]) + " (expected " + hexByte(magic) + ")");
  }
  if (size >= 2 && data[1] != kVersion) {
    return errorResult("unsupported protocol version " + std::to_string(data[1]) +
                       " (this side speaks " + std::to_string(kVersion) + ")");
  }
  if (size >= 3 && !validCommand(data[2])) {
    return errorResult("unknown command " + hexByte(data[2]));
  }
  if (size >= 4) {
    if (request && data[3] != 0) {
      return errorResult("reserved header byte is " + hexByte(data[3]) + ", not 0");
    }
    if (!request) {
      const uint8_t s = data[3];
      const auto c = static_cast<Command>(data[2]);
      const bool ok = s == static_cast<uint8_t>(Status::Ok) ||
                      s == static_cast<uint8_t>(Status::Invalid) ||
                      (s == static_cast<uint8_t>(Status::Timeout) && commandWaits(c));
      if (!ok) {
        return errorResult("status " + hexByte(s) + " is not valid for " +
                           std::string(toString(c)));
      }
    }
  }
  if (size < kHeaderBytes) return DecodeResult{};
  uint32_t bodyLen = 0;
  for (int i = 0; i < 4; ++i) bodyLen |= static_cast<uint32_t>(data[4 + i]) << (8 * i);
  if (bodyLen > kMaxBodyBytes) {
    return errorResult("body length " + std::to_string(bodyLen) + " exceeds the limit of " +
                       std::to_string(kMaxBodyBytes));
  }
  const size_t frame = kHeaderBytes + bodyLen;
  if (size < frame) {
    DecodeResult r;
    r.frameBytes = frame;
    return r;
  }
  h->command = static_cast<Command>(data[2]);
  h->status = data[3];
  h->bodyLen = bodyLen;
  h->tag = 0;
  for (int i = 0; i < 4; ++i) h->tag |= static_cast<uint32_t>(data[8 + i]) << (8 * i);
  DecodeResult r;
  r.status = DecodeStatus::Ok;
  r.consumed = frame;
  return r;
}

DecodeResult finish(const Reader& rd, bool ok, size_t frame, const char* what, Command c) {
  if (!ok) {
    return errorResult(std::string(what) + " " + std::string(toString(c)) + ": " + rd.error());
  }
  if (!rd.done()) {
    return errorResult(std::string(what) + " " + std::string(toString(c)) + " has " +
                       std::to_string(rd.left()) + " trailing body bytes");
  }
  DecodeResult r;
  r.status = DecodeStatus::Ok;
  r.consumed = frame;
  return r;
}

}  // namespace

std::string_view toString(Command c) {
  switch (c) {
    case Command::Set:
      return "SET";
    case Command::Get:
      return "GET";
    case Command::Add:
      return "ADD";
    case Command::Check:
      return "CHECK";
    case Command::Wait:
      return "WAIT";
    case Command::Erase:
      return "ERASE";
    case Command::Ping:
      return "PING";
    case Command::Hello:
      return "HELLO";
    case Command::Auth:
      return "AUTH";
    case Command::MultiGet:
      return "MULTI_GET";
    case Command::MultiSet:
      return "MULTI_SET";
    case Command::CompareSet:
      return "COMPARE_SET";
  }
  return "?";
}

std::string_view toString(Status s) {
  switch (s) {
    case Status::Ok:
      return "OK";
    case Status::Timeout:
      return "TIMEOUT";
    case Status::Invalid:
      return "INVALID";
  }
  return "?";
}

std::string_view toString(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::NeedMore:
      return "NeedMore";
    case DecodeStatus::Ok:
      return "Ok";
    case DecodeStatus::Error:
      return "Error";
  }
  return "?";
}

void encodeRequest(const Request& r, Bytes* out) {
  switch (r.command) {
    case Command::Set:
      checkKey(r.key);
      checkValue(r.value);
      break;
    case Command::Get:
    case Command::Add:
    case Command::Erase:
      checkKey(r.key);
      break;
    case Command::CompareSet:
      checkKey(r.key);
      checkValue(r.expected);
      checkValue(r.value);
      break;
    case Command::MultiSet:
      if (r.values.size() != r.keys.size()) {
        throwError(ErrorKind::InvalidArgument, "store MULTI_SET of " +
                                                   std::to_string(r.keys.size()) + " keys and " +
                                                   std::to_string(r.values.size()) + " values");
      }
      for (const Bytes& v : r.values) checkValue(v);
      [[fallthrough]];
    case Command::Check:
    case Command::Wait:
    case Command::MultiGet: {
      checkKeys(r.keys);
      // Refuse an oversized key list before building a frame of it.
      const uint64_t body = 12 + runBytes(r.keys) + runBytes(r.values);
      if (body > kMaxBodyBytes) {
        throwError(ErrorKind::InvalidArgument,
                   "store " + std::string(toString(r.command)) + " of " +
                       std::to_string(r.keys.size()) + " keys needs " + std::to_string(body) +
                       " bytes; the frame limit is " + std::to_string(kMaxBodyBytes));
      }
      break;
    }
    case Command::Ping:
    case Command::Hello:
    case Command::Auth:
      break;
    default:
      throwError(ErrorKind::InvalidArgument,
                 "unknown store command " + std::to_string(static_cast<int>(r.command)));
  }
  encodeFrame(kRequestMagic, r.command, 0, r.tag, out, [&](Writer& w) {
    switch (r.command) {
      case Command::Set:
        w.str(r.key);
        w.bytes(r.value.data(), r.value.size());
        break;
      case Command::Get:
        w.i64(r.timeoutMs);
        w.str(r.key);
        break;
      case Command::Add:
        w.str(r.key);
        w.i64(r.delta);
        break;
      case Command::Check:
        w.keys(r.keys);
        break;
      case Command::Wait:
        w.i64(r.timeoutMs);
        w.keys(r.keys);
        break;
      case Command::Erase:
        w.str(r.key);
        break;
      case Command::Ping:
        break;
      case Command::Hello:
        w.u8(r.hasKey ? 1 : 0);
        w.fixed(r.nonce);
        break;
      case Command::Auth:
        w.fixed(r.mac);
        break;
      case Command::MultiGet:
        w.i64(r.timeoutMs);
        w.keys(r.keys);
        break;
      case Command::MultiSet:
        w.u32(static_cast<uint32_t>(r.keys.size()));
        for (size_t i = 0; i < r.keys.size(); ++i) {
          w.str(r.keys[i]);
          w.bytes(r.values[i].data(), r.values[i].size());
        }
        break;
      case Command::CompareSet:
        w.str(r.key);
        w.bytes(r.expected.data(), r.expected.size());
        w.bytes(r.value.data(), r.value.size());
        break;
    }
  });
}

void encodeResponse(const Response& r, Bytes* out) {
  if (!validCommand(static_cast<uint8_t>(r.command))) {
    throwError(ErrorKind::InvalidArgument,
               "unknown store command " + std::to_string(static_cast<int>(r.command)));
  }
  switch (r.status) {
    case Status::Ok:
      if (r.command == Command::Get || r.command == Command::CompareSet) checkValue(r.value);
      if (r.command == Command::MultiGet) {
        if (r.values.size() > kMaxKeys) {
          throwError(ErrorKind::InvalidArgument, "a MULTI_GET response of " +
                                                     std::to_string(r.values.size()) +
                                                     " values exceeds the key limit");
        }
        for (const Bytes& v : r.values) checkValue(v);
      }
      break;
    case Status::Timeout:
      if (!commandWaits(r.command)) {
        throwError(ErrorKind::InvalidArgument,
                   "a TIMEOUT response to " + std::string(toString(r.command)) + " is not valid");
      }
      if (r.keys.empty()) {
        throwError(ErrorKind::InvalidArgument, "a TIMEOUT response must name a missing key");
      }
      checkKeys(r.keys);
      break;
    case Status::Invalid:
      break;
    default:
      throwError(ErrorKind::InvalidArgument,
                 "unknown store status " + std::to_string(static_cast<int>(r.status)));
  }
  encodeFrame(kResponseMagic, r.command, static_cast<uint8_t>(r.status), r.tag, out,
              [&](Writer& w) {
                if (r.status == Status::Timeout) {
                  w.keys(r.keys);
                  return;
                }
                if (r.status == Status::Invalid) {
                  // An over-long explanation is cut, not refused: the refusal itself must arrive.
                  const size_t n = std::min(r.message.size(), kMaxMessageBytes);
                  w.bytes(reinterpret_cast<const uint8_t*>(r.message.data()), n);
                  return;
                }
                switch (r.command) {
                  case Command::Get:
                  case Command::CompareSet:
                    w.bytes(r.value.data(), r.value.size());
                    break;
                  case Command::MultiGet:
                    w.u32(static_cast<uint32_t>(r.values.size()));
                    for (const Bytes& v : r.values) w.bytes(v.data(), v.size());
                    break;
                  case Command::Add:
                    w.i64(r.number);
                    break;
                  case Command::Check:
                  case Command::Erase:
                    w.u8(r.flag ? 1 : 0);
                    break;
                  case Command::Hello:
                    w.u8(r.hasKey ? 1 : 0);
                    w.fixed(r.nonce);
                    w.fixed(r.mac);
                    break;
                  case Command::Set:
                  case Command::Wait:
                  case Command::Ping:
                  case Command::Auth:
                  case Command::MultiSet:
                    break;
                }
              });
}

DecodeResult decodeRequest(const uint8_t* data, size_t size, Request* out) {
  Header h;
  DecodeResult hr = decodeHeader(data, size, /*request=*/true, &h);
  if (hr.status != DecodeStatus::Ok) return hr;
  Reader rd(data + kHeaderBytes, h.bodyLen);
  Request q;
  q.command = h.command;
  q.tag = h.tag;
  bool ok = true;
  switch (h.command) {
    case Command::Set:
      ok = rd.str("key", kMaxKeyBytes, &q.key) && rd.bytes("value", kMaxValueBytes, &q.value);
      break;
    case Command::Get:
      ok = rd.i64(&q.timeoutMs) && rd.str("key", kMaxKeyBytes, &q.key);
      break;
    case Command::Add:
      ok = rd.str("key", kMaxKeyBytes, &q.key) && rd.i64(&q.delta);
      break;
    case Command::Check:
      ok = rd.keys(&q.keys, 0);
      break;
    case Command::Wait:
      ok = rd.i64(&q.timeoutMs) && rd.keys(&q.keys, 0);
      break;
    case Command::Erase:
      ok = rd.str("key", kMaxKeyBytes, &q.key);
      break;
    case Command::Ping:
      break;
    case Command::Hello:
      ok = rd.boolean(&q.hasKey) && rd.fixed("nonce", &q.nonce);
      break;
    case Command::Auth:
      ok = rd.fixed("mac", &q.mac);
      break;
    case Command::MultiGet:
      ok = rd.i64(&q.timeoutMs) && rd.keys(&q.keys, 0);
      break;
    case Command::MultiSet:
      ok = rd.pairs(&q.keys, &q.values);
      break;
    case Command::CompareSet:
      ok = rd.str("key", kMaxKeyBytes, &q.key) &&
           rd.bytes("expected", kMaxValueBytes, &q.expected) &&
           rd.bytes("desired", kMaxValueBytes, &q.value);
      break;
  }
  DecodeResult r = finish(rd, ok, hr.consumed, "request", h.command);
  if (r.status == DecodeStatus::Ok) *out = std::move(q);
  return r;
}

DecodeResult decodeResponse(const uint8_t* data, size_t size, Response* out) {
  Header h;
  DecodeResult hr = decodeHeader(data, size, /*request=*/false, &h);
  if (hr.status != DecodeStatus::Ok) return hr;
  Reader rd(data + kHeaderBytes, h.bodyLen);
  Response p;
  p.command = h.command;
  p.tag = h.tag;
  p.status = static_cast<Status>(h.status);
  bool ok = true;
  if (p.status == Status::Timeout) {
    ok = rd.keys(&p.keys, 1);
  } else if (p.status == Status::Invalid) {
    ok = rd.str("message", kMaxMessageBytes, &p.message);
  } else {
    switch (h.command) {
      case Command::Get:
      case Command::CompareSet:
        ok = rd.bytes("value", kMaxValueBytes, &p.value);
        break;
      case Command::MultiGet:
        ok = rd.values(&p.values);
        break;
      case Command::Add:
        ok = rd.i64(&p.number);
        break;
      case Command::Check:
      case Command::Erase:
        ok = rd.boolean(&p.flag);
        break;
      case Command::Hello:
        ok = rd.boolean(&p.hasKey) && rd.fixed("nonce", &p.nonce) && rd.fixed("mac", &p.mac);
        break;
      case Command::Set:
      case Command::Wait:
      case Command::Ping:
      case Command::Auth:
      case Command::MultiSet:
        break;
    }
  }
  DecodeResult r = finish(rd, ok, hr.consumed, "response to", h.command);
  if (r.status == DecodeStatus::Ok) *out = std::move(p);
  return r;
}

// ---- value rules -------------------------------------------------------------------

std::optional<int64_t> parseDecimalInt64(const Bytes& v) {
  size_t i = 0;
  const bool negative = !v.empty() && v[0] == '-';
  if (negative) i = 1;
  const size_t digits = v.size() - i;
  if (digits == 0 || digits > 19) return std::nullopt;  // 19 digits cannot overflow uint64
  uint64_t acc = 0;
  for (; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9') return std::nullopt;
    acc = acc * 10 + (v[i] - '0');
  }
  const uint64_t limit = negative ? uint64_t{1} << 63 : uint64_t{INT64_MAX};
  if (acc > limit) return std::nullopt;
  if (negative) return static_cast<int64_t>(0 - acc);  // two's complement, INT64_MIN included
  return static_cast<int64_t>(acc);
}

Bytes formatDecimal(int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

std::optional<int64_t> applyAdd(const std::string& key, const Bytes* current, int64_t delta,
                                std::string* error) {
  int64_t base = 0;
  if (current != nullptr) {
    std::optional<int64_t> parsed = parseDecimalInt64(*current);
    if (!parsed) {
      *error = "store add(" + describeKeys({key}) + ", " + std::to_string(delta) +
               "): the key holds a " + std::to_string(current->size()) +
               "-byte value that is not a decimal int64";
      return std::nullopt;
    }
    base = *parsed;
  }
  int64_t result = 0;
  if (__builtin_add_overflow(base, delta, &result)) {
    *error = "store add(" + describeKeys({key}) + ", " + std::to_string(delta) +
             ") overflows int64 (current value " + std::to_string(base) + ")";
    return std::nullopt;
  }
  return result;
}

void checkKey(const std::string& key) {
  if (key.size() > kMaxKeyBytes) {
    throwError(ErrorKind::InvalidArgument, "store key of " + std::to_string(key.size()) +
                                               " bytes exceeds the limit of " +
                                               std::to_string(kMaxKeyBytes));
  }
}

void checkValue(const Bytes& value) {
  if (value.size() > kMaxValueBytes) {
    throwError(ErrorKind::InvalidArgument, "store value of " + std::to_string(value.size()) +
                                               " bytes exceeds the limit of " +
                                               std::to_string(kMaxValueBytes));
  }
}

void checkKeys(const std::vector<std::string>& keys) {
  if (keys.size() > kMaxKeys) {
    throwError(ErrorKind::InvalidArgument, "store request names " + std::to_string(keys.size()) +
                                               " keys; the limit is " + std::to_string(kMaxKeys));
  }
  for (const std::string& k : keys) checkKey(k);
}

void checkPairs(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  if (keys.size() != values.size()) {
    throwError(ErrorKind::InvalidArgument, "store multiSet of " + std::to_string(keys.size()) +
                                               " keys and " + std::to_string(values.size()) +
                                               " values");
  }
  checkKeys(keys);
  for (const Bytes& v : values) checkValue(v);
}

bool compareSetMatches(const Bytes* current, const Bytes& expected) {
  return current == nullptr ? expected.empty() : *current == expected;
}

Deadline deadlineAfterMs(int64_t timeoutMs) {
  if (timeoutMs < 0 || timeoutMs > kMaxFiniteTimeoutMs) return Deadline::never();
  return Deadline::after(std::chrono::milliseconds(timeoutMs));
}

Deadline deadlineAfter(std::chrono::milliseconds timeout) {
  return deadlineAfterMs(timeout.count());
}

std::string describeKeys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 32;
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i > 0) s += ", ";
    for (unsigned char c : keys[i]) {
      if (c >= 0x20 && c < 0x7f && c != '\\') {
        s += static_cast<char>(c);
      } else {
        s += "\\x";
        s += hexByte(c).substr(2);
      }
    }
  }
  if (keys.size() > kShown) s += " and " + std::to_string(keys.size() - kShown) + " more";
  return s;
}

void throwStoreTimeout(std::string_view op, const std::vector<std::string>& missing,
                       std::chrono::milliseconds timeout, std::chrono::milliseconds elapsed,
                       const std::string& storeAddress) {
  ErrorInfo info;
  info.kind = ErrorKind::Timeout;
  info.message = "store " + std::string(op) + " timed out; missing " +
                 (missing.size() == 1 ? "key: " : std::to_string(missing.size()) + " keys: ") +
                 describeKeys(missing);
  info.peerAddress = storeAddress;
  info.timeoutMs = timeout.count() < 0 ? -1 : timeout.count();
  info.elapsedMs = elapsed.count();
  throwError(std::move(info));
}

}  // namespace tccl::storeproto
