// The TcpStore wire protocol: round trips, truncation, and hostile input.
#include "store/store_protocol.hpp"

#include <gtest/gtest.h>

#include <random>

#include "tccl/error.hpp"

namespace tccl::storeproto {
namespace {

Bytes binaryValue() {
  Bytes v;
  for (int i = 0; i < 300; ++i) v.push_back(static_cast<uint8_t>(i * 7));
  v.push_back(0);
  v.push_back(0);
  return v;
}

std::vector<Request> sampleRequests() {
  std::vector<Request> out;
  Request r;
  r.command = Command::Set;
  r.key = "rank/3/addr";
  r.value = binaryValue();
  out.push_back(r);
  r = Request();
  r.command = Command::Set;
  r.key = "";  // empty key and empty value are legal
  out.push_back(r);
  r = Request();
  r.command = Command::Get;
  r.key = std::string("k\0ey", 4);
  r.timeoutMs = 1500;
  out.push_back(r);
  r = Request();
  r.command = Command::Add;
  r.key = "counter";
  r.delta = INT64_MIN;
  out.push_back(r);
  r = Request();
  r.command = Command::Check;
  r.keys = {"a", "", "c/d"};
  out.push_back(r);
  r = Request();
  r.command = Command::Check;  // no keys
  out.push_back(r);
  r = Request();
  r.command = Command::Wait;
  r.keys = {"x", "y"};
  r.timeoutMs = -1;
  out.push_back(r);
  r = Request();
  r.command = Command::Erase;
  r.key = "gone";
  out.push_back(r);
  r = Request();
  r.command = Command::Ping;
  r.tag = 0xFFFFFFFF;
  out.push_back(r);
  r = Request();
  r.command = Command::MultiGet;
  r.keys = {"host/0", "", "host/2"};
  r.timeoutMs = 7;
  r.tag = 3;
  out.push_back(r);
  r = Request();
  r.command = Command::MultiGet;  // no keys
  out.push_back(r);
  r = Request();
  r.command = Command::MultiSet;
  r.keys = {"a", "b"};
  r.values = {binaryValue(), Bytes()};
  out.push_back(r);
  r = Request();
  r.command = Command::MultiSet;  // no pairs
  out.push_back(r);
  r = Request();
  r.command = Command::CompareSet;
  r.key = "leader";
  r.expected = Bytes();
  r.value = binaryValue();
  out.push_back(r);
  return out;
}

std::vector<Response> sampleResponses() {
  std::vector<Response> out;
  Response r;
  r.command = Command::Set;
  out.push_back(r);
  r = Response();
  r.command = Command::Get;
  r.value = binaryValue();
  out.push_back(r);
  r = Response();
  r.command = Command::Get;
  r.status = Status::Timeout;
  r.keys = {"missing"};
  out.push_back(r);
  r = Response();
  r.command = Command::Add;
  r.number = -42;
  out.push_back(r);
  r = Response();
  r.command = Command::Add;
  r.status = Status::Invalid;
  r.message = "not an integer";
  out.push_back(r);
  r = Response();
  r.command = Command::Check;
  r.flag = true;
  out.push_back(r);
  r = Response();
  r.command = Command::Wait;
  r.status = Status::Timeout;
  r.keys = {"rank/3/addr", "rank/5/addr"};
  out.push_back(r);
  r = Response();
  r.command = Command::Wait;
  out.push_back(r);
  r = Response();
  r.command = Command::Erase;
  r.flag = false;
  out.push_back(r);
  r = Response();
  r.command = Command::Ping;
  r.tag = 77;
  out.push_back(r);
  r = Response();
  r.command = Command::MultiGet;
  r.values = {binaryValue(), Bytes(), Bytes{'x'}};
  out.push_back(r);
  r = Response();
  r.command = Command::MultiGet;
  r.status = Status::Timeout;
  r.keys = {"host/5"};
  out.push_back(r);
  r = Response();
  r.command = Command::MultiSet;
  out.push_back(r);
  r = Response();
  r.command = Command::CompareSet;
  r.value = binaryValue();
  out.push_back(r);
  return out;
}

Bytes encode(const Request& r) {
  Bytes b;
  encodeRequest(r, &b);
  return b;
}

Bytes encode(const Response& r) {
  Bytes b;
  encodeResponse(r, &b);
  return b;
}

void putU32(Bytes* b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*b)[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

TEST(StoreProtocol, RequestRoundTrip) {
  for (const Request& r : sampleRequests()) {
    SCOPED_TRACE(std::string(toString(r.command)));
    Bytes b = encode(r);
    Request back;
    DecodeResult d = decodeRequest(b.data(), b.size(), &back);
    ASSERT_EQ(d.status, DecodeStatus::Ok) << d.error;
    EXPECT_EQ(d.consumed, b.size());
    EXPECT_EQ(back, r);
  }
}

TEST(StoreProtocol, ResponseRoundTrip) {
  for (const Response& r : sampleResponses()) {
    SCOPED_TRACE(std::string(toString(r.command)) + " " + std::string(toString(r.status)));
    Bytes b = encode(r);
    Response back;
    DecodeResult d = decodeResponse(b.data(), b.size(), &back);
    ASSERT_EQ(d.status, DecodeStatus::Ok) << d.error;
    EXPECT_EQ(d.consumed, b.size());
    EXPECT_EQ(back, r);
  }
}

TEST(StoreProtocol, HeaderLayoutIsLittleEndian) {
  Request r;
  r.command = Command::Add;
  r.key = "k";
  r.delta = 0x0102030405060708;
  r.tag = 0x0A0B0C0D;
  Bytes b = encode(r);
  // header (bodyLen 13, tag), then u32 keyLen=1, 'k', i64 delta
  const Bytes expected = {0xC5, 3, 3, 0,   13,   0,    0,    0,    0x0D, 0x0C, 0x0B, 0x0A, 1,
                          0,    0, 0, 'k', 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  EXPECT_EQ(b, expected);
}

TEST(StoreProtocol, EveryTruncationNeedsMore) {
  for (const Request& r : sampleRequests()) {
    Bytes b = encode(r);
    for (size_t n = 0; n < b.size(); ++n) {
      Request out;
      DecodeResult d = decodeRequest(b.data(), n, &out);
      ASSERT_EQ(d.status, DecodeStatus::NeedMore)
          << toString(r.command) << " cut at " << n << ": " << d.error;
      EXPECT_EQ(d.consumed, 0u);
      EXPECT_EQ(d.frameBytes, n >= kHeaderBytes ? b.size() : 0u);
    }
  }
  for (const Response& r : sampleResponses()) {
    Bytes b = encode(r);
    for (size_t n = 0; n < b.size(); ++n) {
      Response out;
      DecodeResult d = decodeResponse(b.data(), n, &out);
      ASSERT_EQ(d.status, DecodeStatus::NeedMore)
          << toString(r.command) << " cut at " << n << ": " << d.error;
    }
  }
}

TEST(StoreProtocol, BackToBackFramesDecodeOneAtATime) {
  Bytes all;
  std::vector<Request> reqs = sampleRequests();
  for (const Request& r : reqs) encodeRequest(r, &all);
  size_t pos = 0;
  for (const Request& r : reqs) {
    Request out;
    DecodeResult d = decodeRequest(all.data() + pos, all.size() - pos, &out);
    ASSERT_EQ(d.status, DecodeStatus::Ok) << d.error;
    EXPECT_EQ(out, r);
    pos += d.consumed;
  }
  EXPECT_EQ(pos, all.size());
}

TEST(StoreProtocol, BadHeaderRejectedAtFirstBadByte) {
  Request out;
  const uint8_t http[] = {'G', 'E', 'T', ' ', '/'};
  DecodeResult d = decodeRequest(http, 1, &out);
  EXPECT_EQ(d.status, DecodeStatus::Error);
  EXPECT_NE(d.error.find("magic"), std::string::npos) << d.error;

  const uint8_t badVersion[] = {kRequestMagic, 9};
  d = decodeRequest(badVersion, sizeof badVersion, &out);
  EXPECT_EQ(d.status, DecodeStatus::Error);
  EXPECT_NE(d.error.find("version"), std::string::npos) << d.error;

  for (uint8_t cmd : {uint8_t{0}, uint8_t{13}, uint8_t{255}}) {
    const uint8_t badCommand[] = {kRequestMagic, kVersion, cmd};
    EXPECT_EQ(decodeRequest(badCommand, sizeof badCommand, &out).status, DecodeStatus::Error);
  }
  const uint8_t reserved[] = {kRequestMagic, kVersion, 7, 1};
  EXPECT_EQ(decodeRequest(reserved, sizeof reserved, &out).status, DecodeStatus::Error);

  // A response's magic is not a request's.
  Bytes resp = encode(sampleResponses()[0]);
  EXPECT_EQ(decodeRequest(resp.data(), resp.size(), &out).status, DecodeStatus::Error);
  Response rout;
  Bytes req = encode(sampleRequests()[0]);
  EXPECT_EQ(decodeResponse(req.data(), req.size(), &rout).status, DecodeStatus::Error);

  // TIMEOUT is only a valid answer to GET and WAIT; unknown statuses never.
  const uint8_t setTimeout[] = {kResponseMagic, kVersion, 1, 1};
  EXPECT_EQ(decodeResponse(setTimeout, sizeof setTimeout, &rout).status, DecodeStatus::Error);
  const uint8_t badStatus[] = {kResponseMagic, kVersion, 2, 3};
  EXPECT_EQ(decodeResponse(badStatus, sizeof badStatus, &rout).status, DecodeStatus::Error);
}

TEST(StoreProtocol, HugeBodyLengthRejectedFromHeaderAlone) {
  for (uint32_t len : {uint32_t{0xFFFFFFFF}, static_cast<uint32_t>(kMaxBodyBytes + 1)}) {
    Bytes b = {kRequestMagic, kVersion, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    putU32(&b, 4, len);
    Request out;
    DecodeResult d = decodeRequest(b.data(), b.size(), &out);
    EXPECT_EQ(d.status, DecodeStatus::Error) << len;
    EXPECT_NE(d.error.find("exceeds"), std::string::npos) << d.error;
  }
}

TEST(StoreProtocol, InnerLengthsAreCheckedAgainstCapsAndBody) {
  Request out;
  {
    // SET whose key length overruns the body.
    Request r;
    r.command = Command::Set;
    r.key = "abc";
    Bytes b = encode(r);
    putU32(&b, kHeaderBytes, 1000);
    DecodeResult d = decodeRequest(b.data(), b.size(), &out);
    EXPECT_EQ(d.status, DecodeStatus::Error);
    EXPECT_NE(d.error.find("overruns"), std::string::npos) << d.error;
  }
  {
    // A key length above the cap is refused even when the body claims to be that big.
    Bytes b = {kRequestMagic, kVersion, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    putU32(&b, 4, 4 + kMaxKeyBytes + 1);
    putU32(&b, kHeaderBytes, static_cast<uint32_t>(kMaxKeyBytes + 1));
    b.resize(kHeaderBytes + 4 + kMaxKeyBytes + 1, 'k');
    DecodeResult d = decodeRequest(b.data(), b.size(), &out);
    EXPECT_EQ(d.status, DecodeStatus::Error);
    EXPECT_NE(d.error.find("limit"), std::string::npos) << d.error;
  }
  {
    // WAIT claiming more keys than allowed, and more than the body can hold.
    Request r;
    r.command = Command::Wait;
    r.keys = {"a"};
    Bytes b = encode(r);
    putU32(&b, kHeaderBytes + 8, static_cast<uint32_t>(kMaxKeys + 1));
    EXPECT_EQ(decodeRequest(b.data(), b.size(), &out).status, DecodeStatus::Error);
    putU32(&b, kHeaderBytes + 8, 1000);
    EXPECT_EQ(decodeRequest(b.data(), b.size(), &out).status, DecodeStatus::Error);
  }
  {
    // Trailing bytes inside the body.
    Request r;
    r.command = Command::Erase;
    r.key = "k";
    Bytes b = encode(r);
    b.push_back(0);
    putU32(&b, 4, static_cast<uint32_t>(b.size() - kHeaderBytes));
    DecodeResult d = decodeRequest(b.data(), b.size(), &out);
    EXPECT_EQ(d.status, DecodeStatus::Error);
    EXPECT_NE(d.error.find("trailing"), std::string::npos) << d.error;
  }
  {
    // PING must have an empty body; CHECK response flag must be 0 or 1.
    Bytes b = {kRequestMagic, kVersion, 7, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    EXPECT_EQ(decodeRequest(b.data(), b.size(), &out).status, DecodeStatus::Error);
    Bytes c = {kResponseMagic, kVersion, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
    Response rout;
    EXPECT_EQ(decodeResponse(c.data(), c.size(), &rout).status, DecodeStatus::Error);
  }
  {
    // A TIMEOUT must name at least one key.
    Bytes b = {kResponseMagic, kVersion, 5, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    Response rout;
    EXPECT_EQ(decodeResponse(b.data(), b.size(), &rout).status, DecodeStatus::Error);
  }
}

TEST(StoreProtocol, MultiCommandsCheckTheirCounts) {
  Request out;
  {
    // MULTI_SET claiming more pairs than the body can hold (each takes 8 bytes at least).
    Request r;
    r.command = Command::MultiSet;
    r.keys = {"a"};
    r.values = {Bytes{'v'}};
    Bytes b = encode(r);
    putU32(&b, kHeaderBytes, 2);
    DecodeResult d = decodeRequest(b.data(), b.size(), &out);
    EXPECT_EQ(d.status, DecodeStatus::Error);
    putU32(&b, kHeaderBytes, static_cast<uint32_t>(kMaxKeys + 1));
    d = decodeRequest(b.data(), b.size(), &out);
    EXPECT_EQ(d.status, DecodeStatus::Error);
    EXPECT_NE(d.error.find("limit"), std::string::npos) << d.error;
  }
  {
    // A MULTI_GET reply claiming more values than it carries.
    Response r;
    r.command = Command::MultiGet;
    r.values = {Bytes{'v'}};
    Bytes b = encode(r);
    putU32(&b, kHeaderBytes, 3);
    Response rout;
    EXPECT_EQ(decodeResponse(b.data(), b.size(), &rout).status, DecodeStatus::Error);
  }
  {
    // TIMEOUT answers the waiting commands only: MULTI_GET yes, MULTI_SET and COMPARE_SET no.
    const uint8_t ok[] = {kResponseMagic, kVersion, 10, 1};
    const uint8_t bad1[] = {kResponseMagic, kVersion, 11, 1};
    const uint8_t bad2[] = {kResponseMagic, kVersion, 12, 1};
    Response rout;
    EXPECT_EQ(decodeResponse(ok, sizeof ok, &rout).status, DecodeStatus::NeedMore);
    EXPECT_EQ(decodeResponse(bad1, sizeof bad1, &rout).status, DecodeStatus::Error);
    EXPECT_EQ(decodeResponse(bad2, sizeof bad2, &rout).status, DecodeStatus::Error);
  }
  {
    // MULTI_SET with unequal key and value lists is refused before a byte is written.
    Request r;
    r.command = Command::MultiSet;
    r.keys = {"a", "b"};
    r.values = {Bytes()};
    Bytes b = {9};
    EXPECT_THROW(encodeRequest(r, &b), InvalidArgumentError);
    EXPECT_EQ(b, Bytes{9});
  }
}

TEST(StoreProtocol, CompareSetRule) {
  const Bytes a{'a'};
  const Bytes b{'b'};
  EXPECT_TRUE(compareSetMatches(nullptr, Bytes()));  // absent matches empty
  EXPECT_FALSE(compareSetMatches(nullptr, a));
  EXPECT_TRUE(compareSetMatches(&a, a));
  EXPECT_FALSE(compareSetMatches(&a, b));
  EXPECT_FALSE(compareSetMatches(&a, Bytes()));
  const Bytes empty;
  EXPECT_TRUE(compareSetMatches(&empty, Bytes()));  // present and empty matches empty too
}

TEST(StoreProtocol, EncoderEnforcesLimits) {
  Request r;
  r.command = Command::Set;
  r.key.assign(kMaxKeyBytes + 1, 'k');
  Bytes out = {1, 2, 3};
  EXPECT_THROW(encodeRequest(r, &out), InvalidArgumentError);
  EXPECT_EQ(out, (Bytes{1, 2, 3}));  // nothing appended on failure
  r.key = "k";
  r.value.assign(kMaxValueBytes + 1, 0);
  EXPECT_THROW(encodeRequest(r, &out), InvalidArgumentError);
  r = Request();
  r.command = Command::Wait;
  r.keys.assign(kMaxKeys + 1, "k");
  EXPECT_THROW(encodeRequest(r, &out), InvalidArgumentError);
  // Keys within their own limits but too many bytes in all for one frame.
  r.keys.assign(1030, std::string(kMaxKeyBytes, 'x'));
  EXPECT_THROW(encodeRequest(r, &out), InvalidArgumentError);
  EXPECT_EQ(out, (Bytes{1, 2, 3}));
  // The largest legal SET fits in one frame.
  static_assert(kMaxBodyBytes >= 4 + kMaxKeyBytes + 4 + kMaxValueBytes);
}

TEST(StoreProtocol, RandomAndMutatedInputNeverMisbehaves) {
  std::mt19937 rng(12345);
  std::vector<Bytes> seeds;
  for (const Request& r : sampleRequests()) seeds.push_back(encode(r));
  for (const Response& r : sampleResponses()) seeds.push_back(encode(r));
  for (int iter = 0; iter < 20000; ++iter) {
    Bytes b;
    if (iter % 2 == 0) {
      b.resize(rng() % 64);
      for (auto& x : b) x = static_cast<uint8_t>(rng());
      // Often start with a valid header prefix so the body paths get exercised.
      if (!b.empty() && iter % 4 == 0) b[0] = kRequestMagic;
      if (b.size() > 1 && iter % 4 == 0) b[1] = kVersion;
    } else {
      b = seeds[rng() % seeds.size()];
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int f = 0; f < flips && !b.empty(); ++f) {
        b[rng() % b.size()] = static_cast<uint8_t>(rng());
      }
      if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
    }
    Request q;
    DecodeResult d = decodeRequest(b.data(), b.size(), &q);
    if (d.status == DecodeStatus::Ok) {
      EXPECT_LE(d.consumed, b.size());
      EXPECT_GE(d.consumed, kHeaderBytes);
      // Whatever decodes re-encodes to the same bytes.
      Bytes again = encode(q);
      EXPECT_TRUE(std::equal(again.begin(), again.end(), b.begin()));
    }
    if (d.status == DecodeStatus::Error) {
      EXPECT_FALSE(d.error.empty());
    }
    Response p;
    d = decodeResponse(b.data(), b.size(), &p);
    if (d.status == DecodeStatus::Ok) {
      EXPECT_LE(d.consumed, b.size());
    }
  }
}

TEST(StoreProtocol, DecimalValues) {
  auto parse = [](const std::string& s) { return parseDecimalInt64(Bytes(s.begin(), s.end())); };
  EXPECT_EQ(parse("0"), 0);
  EXPECT_EQ(parse("-5"), -5);
  EXPECT_EQ(parse("007"), 7);
  EXPECT_EQ(parse("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse("-9223372036854775808"), INT64_MIN);
  for (const char* bad : {"", "-", "+1", " 1", "1 ", "1a", "0x10", "9223372036854775808",
                          "-9223372036854775809", "99999999999999999999", "1.5"}) {
    EXPECT_FALSE(parse(bad).has_value()) << bad;
  }
  EXPECT_EQ(formatDecimal(-17), (Bytes{'-', '1', '7'}));

  std::string error;
  Bytes cur = formatDecimal(INT64_MAX);
  EXPECT_FALSE(applyAdd("k", &cur, 1, &error).has_value());
  EXPECT_NE(error.find("overflow"), std::string::npos) << error;
  Bytes text = {'a', 'b'};
  EXPECT_FALSE(applyAdd("k", &text, 1, &error).has_value());
  EXPECT_EQ(applyAdd("k", nullptr, 5, &error), 5);
}

TEST(StoreProtocol, DescribeKeysEscapesAndCaps) {
  EXPECT_EQ(describeKeys({"a", std::string("b\0c", 3), "d\\"}), "a, b\\x00c, d\\x5c");
  std::vector<std::string> many(40, "k");
  EXPECT_NE(describeKeys(many).find("and 8 more"), std::string::npos);
}

TEST(StoreProtocol, HugeTimeoutsMeanNever) {
  EXPECT_TRUE(deadlineAfterMs(-1).isNever());
  EXPECT_TRUE(deadlineAfterMs(INT64_MAX).isNever());
  EXPECT_FALSE(deadlineAfterMs(1000).isNever());
  EXPECT_TRUE(deadlineAfter(std::chrono::milliseconds::max()).isNever());
}

}  // namespace
}  // namespace tccl::storeproto
