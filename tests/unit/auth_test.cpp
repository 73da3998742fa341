// Authentication: HMAC-SHA256 against RFC 4231, key parsing and loading, what the MACs
// bind, the v2 handshake messages of the transport and the store (exact bytes, truncated
// and hostile input), and the handshakes themselves in one process: two Transports in
// two threads, a TcpStore server and its clients, and a raw peer that replays or
// reflects MACs.
#include "auth/auth.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "net/socket.hpp"
#include "scoped_env.hpp"
#include "store/store_protocol.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"
#include "transport/transport.hpp"
#include "transport/wire.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;
using testing::ScopedEnv;

std::vector<uint8_t> fromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string toHex(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kHex[p[i] >> 4];
    s += kHex[p[i] & 15];
  }
  return s;
}

std::vector<uint8_t> bytesOf(const std::string& s) { return {s.begin(), s.end()}; }

constexpr char kKeyA[] = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr char kKeyB[] = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

auth::KeyPtr key(const char* hex) {
  std::string err;
  auth::KeyPtr k = auth::parseHexKey(hex, &err);
  EXPECT_TRUE(k) << err;
  return k;
}

// ---- HMAC-SHA256: RFC 4231 section 4 ---------------------------------------------------

struct Rfc4231Case {
  std::vector<uint8_t> key;
  std::vector<uint8_t> data;
  std::string mac;  // hex; case 5 is truncated to 128 bits
};

TEST(AuthHmac, Rfc4231TestVectors) {
  const std::string longKeyData =
      "This is a test using a larger than block-size key and a larger than block-size data. "
      "The key needs to be hashed before being used by the HMAC algorithm.";
  std::vector<uint8_t> key4;
  for (uint8_t b = 1; b <= 25; ++b) key4.push_back(b);
  const std::vector<Rfc4231Case> cases = {
      {std::vector<uint8_t>(20, 0x0b), bytesOf("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {bytesOf("Jefe"), bytesOf("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::vector<uint8_t>(20, 0xaa), std::vector<uint8_t>(50, 0xdd),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {key4, std::vector<uint8_t>(50, 0xcd),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {std::vector<uint8_t>(20, 0x0c), bytesOf("Test With Truncation"),
       "a3b6167473100ee06e0c796c2955552b"},
      {std::vector<uint8_t>(131, 0xaa),
       bytesOf("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::vector<uint8_t>(131, 0xaa), bytesOf(longKeyData),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    const auth::Mac m = auth::hmacSha256(c.key.data(), c.key.size(), c.data.data(), c.data.size());
    EXPECT_EQ(toHex(m.data(), c.mac.size() / 2), c.mac) << "RFC 4231 test case " << i + 1;
  }
}

TEST(AuthHmac, ConstantTimeCompareAndNonces) {
  auth::Mac a{};
  auth::Mac b{};
  EXPECT_TRUE(auth::equalConstantTime(a, b));
  for (size_t i : {size_t{0}, size_t{17}, auth::kMacBytes - 1}) {
    b = a;
    b[i] ^= 0x80;
    EXPECT_FALSE(auth::equalConstantTime(a, b)) << "byte " << i;
  }
  // Fresh nonces: 32 random bytes never repeat in practice.
  const auth::Nonce n1 = auth::randomNonce();
  const auth::Nonce n2 = auth::randomNonce();
  EXPECT_NE(n1, n2);
  EXPECT_NE(n1, auth::Nonce{});
}

// ---- keys --------------------------------------------------------------------------

TEST(AuthKey, ParsesHexInEitherCaseWithSurroundingWhitespace) {
  std::string err;
  auth::KeyPtr k = auth::parseHexKey(" \n00112233445566778899AaBbCcDdEeFf\t\r\n", &err);
  ASSERT_TRUE(k) << err;
  EXPECT_EQ(std::vector<uint8_t>(k->data(), k->data() + k->size()),
            fromHex("00112233445566778899aabbccddeeff"));
  auth::KeyPtr big = auth::parseHexKey(std::string(2 * auth::kMaxKeyBytes, 'f'), &err);
  ASSERT_TRUE(big) << err;
  EXPECT_EQ(big->size(), auth::kMaxKeyBytes);
}

TEST(AuthKey, RejectsMalformedKeysWithoutQuotingThem) {
  const std::string secretish = "0123456789abcdef0123456789abcdeZ";  // 32 chars, one not hex
  const std::vector<std::string> bad = {
      "",
      std::string(2 * auth::kMinKeyBytes - 2, 'a'),  // too short
      std::string(2 * auth::kMinKeyBytes + 1, 'a'),  // odd
      std::string(2 * auth::kMaxKeyBytes + 2, 'a'),  // too long
      secretish,                                     // not hex
      "0x00112233445566778899aabbccddeeff",          // prefix not allowed
      "00112233 445566778899aabbccddeeff0011",       // inner space
      std::string(2 * auth::kMinKeyBytes, '\xff'),   // bytes, not text
  };
  for (const std::string& text : bad) {
    std::string err;
    EXPECT_FALSE(auth::parseHexKey(text, &err)) << text;
    EXPECT_FALSE(err.empty());
    if (text.size() > 8) {
      EXPECT_EQ(err.find(text), std::string::npos) << "error quotes the key";
    }
  }
  std::string err;
  auth::parseHexKey(secretish, &err);
  EXPECT_NE(err.find("character 32"), std::string::npos) << err;
}

TEST(AuthKey, IdIsStableAndTellsKeysApart) {
  auth::KeyPtr a = key(kKeyA);
  auth::KeyPtr a2 = key(kKeyA);
  auth::KeyPtr b = key(kKeyB);
  EXPECT_EQ(a->id().size(), 8u);
  EXPECT_EQ(a->id(), a2->id());
  EXPECT_NE(a->id(), b->id());
  EXPECT_EQ(std::string(kKeyA).find(a->id()), std::string::npos);
}

class AuthEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tccl_auth_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (const std::string& f : files_) ::unlink(f.c_str());
    ::rmdir(dir_.c_str());
  }
  std::string writeFile(const std::string& name, const std::string& text, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    ::chmod(path.c_str(), mode);
    files_.push_back(path);
    return path;
  }
  std::string dir_;
  std::vector<std::string> files_;
};

TEST_F(AuthEnvTest, NoKeyMeansUnauthenticated) {
  ScopedEnv k("TCCL_AUTH_KEY", nullptr);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  EXPECT_EQ(auth::keyFromEnv(), nullptr);
  ScopedEnv empty("TCCL_AUTH_KEY", "");  // empty is unset, as for every TCCL_ variable
  EXPECT_EQ(auth::keyFromEnv(), nullptr);
}

TEST_F(AuthEnvTest, KeyFromVariableOrFileIsTheSameKey) {
  auth::KeyPtr fromVar;
  {
    ScopedEnv k("TCCL_AUTH_KEY", kKeyA);
    ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
    fromVar = auth::keyFromEnv();
  }
  ASSERT_TRUE(fromVar);
  const std::string path = writeFile("key", std::string(kKeyA) + "\n", 0600);
  ScopedEnv k("TCCL_AUTH_KEY", nullptr);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", path.c_str());
  auth::KeyPtr fromFile = auth::keyFromEnv();
  ASSERT_TRUE(fromFile);
  EXPECT_EQ(fromFile->id(), fromVar->id());
  EXPECT_EQ(fromFile->size(), 32u);
}

TEST_F(AuthEnvTest, ConfigurationErrorsAreInvalidArgumentsNamingTheVariable) {
  const std::string good = writeFile("good", kKeyA, 0600);
  const std::string bad = writeFile("bad", "not a key at all, really not", 0600);
  const std::string huge = writeFile("huge", std::string(10000, 'a'), 0600);
  auto expectInvalid = [](const char* what, const std::string& mention) {
    try {
      auth::keyFromEnv();
      ADD_FAILURE() << what << ": no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  {
    ScopedEnv k("TCCL_AUTH_KEY", kKeyA);
    ScopedEnv f("TCCL_AUTH_KEY_FILE", good.c_str());
    expectInvalid("both set", "both TCCL_AUTH_KEY and TCCL_AUTH_KEY_FILE");
  }
  {
    ScopedEnv k("TCCL_AUTH_KEY", "0123456789abcdef");
    ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
    expectInvalid("short key", "TCCL_AUTH_KEY is not a valid key");
  }
  ScopedEnv k("TCCL_AUTH_KEY", nullptr);
  for (const std::string& path : {bad, huge, dir_ + "/missing", dir_}) {
    ScopedEnv f("TCCL_AUTH_KEY_FILE", path.c_str());
    expectInvalid(path.c_str(), path);
  }
}

TEST_F(AuthEnvTest, LaunchersMakeUpAKeyOnlyWhenNoneIsGiven) {
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  {
    ScopedEnv k("TCCL_AUTH_KEY", nullptr);
    EXPECT_TRUE(auth::ensureJobKeyInEnv());
    const char* made = std::getenv("TCCL_AUTH_KEY");
    ASSERT_NE(made, nullptr);
    EXPECT_EQ(std::string(made).size(), 64u);
    auth::KeyPtr key = auth::keyFromEnv();
    ASSERT_TRUE(key);
    EXPECT_EQ(key->size(), 32u);
    // A second launcher in the same environment keeps the first one's key.
    const std::string first = made;
    EXPECT_FALSE(auth::ensureJobKeyInEnv());
    EXPECT_EQ(std::string(std::getenv("TCCL_AUTH_KEY")), first);
  }
  {
    ScopedEnv k("TCCL_AUTH_KEY", kKeyA);
    EXPECT_FALSE(auth::ensureJobKeyInEnv());
    EXPECT_EQ(std::string(std::getenv("TCCL_AUTH_KEY")), kKeyA);
  }
  {
    ScopedEnv k("TCCL_AUTH_KEY", nullptr);
    ScopedEnv file("TCCL_AUTH_KEY_FILE", "/some/file");
    EXPECT_FALSE(auth::ensureJobKeyInEnv());
    EXPECT_EQ(std::getenv("TCCL_AUTH_KEY"), nullptr);
  }
  EXPECT_NE(auth::randomHexKey(), auth::randomHexKey());
}

TEST_F(AuthEnvTest, KeyFileReadableByOthersStillWorksButWarns) {
  const std::string path = writeFile("open", kKeyA, 0644);
  ScopedEnv k("TCCL_AUTH_KEY", nullptr);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", path.c_str());
  ScopedEnv d("TCCL_DEBUG", "WARN");
  ::testing::internal::CaptureStderr();
  auth::KeyPtr got = auth::keyFromEnv();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(got);
  // The log threshold is read once per process; only check the text when WARN is on.
  if (!err.empty()) {
    EXPECT_NE(err.find("chmod 600"), std::string::npos) << err;
  }
}

// ---- what a MAC binds ---------------------------------------------------------------

auth::Transcript sampleTranscript() {
  auth::Transcript t;
  t.protocol = auth::Protocol::Transport;
  t.jobId = 0x0102030405060708;
  t.commId = 0x1112131415161718;
  t.dialler = 1;
  t.acceptor = 3;
  t.worldSize = 4;
  for (size_t i = 0; i < auth::kNonceBytes; ++i) {
    t.diallerNonce[i] = static_cast<uint8_t>(i);
    t.acceptorNonce[i] = static_cast<uint8_t>(0x80 + i);
  }
  return t;
}

TEST(AuthTranscript, FixedLayout) {
  const auth::Transcript t = sampleTranscript();
  const std::vector<uint8_t> b = auth::transcriptBytes(auth::Role::Acceptor, t);
  ASSERT_EQ(b.size(), 12u + 2 + 8 + 8 + 4 + 4 + 4 + 32 + 32);
  EXPECT_EQ(std::string(b.begin(), b.begin() + 12), "tccl-auth-v1");
  EXPECT_EQ(b[12], 1);  // transport
  EXPECT_EQ(b[13], 2);  // acceptor
  EXPECT_EQ(b[14], 0x08);
  EXPECT_EQ(b[22], 0x18);
  EXPECT_EQ(b[30], 1);  // dialler rank
  EXPECT_EQ(b[34], 3);  // acceptor rank
  EXPECT_EQ(b[38], 4);  // world size
  EXPECT_EQ(b[42], 0x00);
  EXPECT_EQ(b[74], 0x80);
}

TEST(AuthTranscript, ProofVerifiesOnlyForTheSameKeyRoleAndEveryField) {
  auth::KeyPtr a = key(kKeyA);
  auth::KeyPtr b = key(kKeyB);
  const auth::Transcript t = sampleTranscript();
  const auth::Mac dialler = auth::proof(*a, auth::Role::Dialler, t);
  const auth::Mac acceptor = auth::proof(*a, auth::Role::Acceptor, t);
  EXPECT_TRUE(auth::verify(*a, auth::Role::Dialler, t, dialler));
  EXPECT_TRUE(auth::verify(*a, auth::Role::Acceptor, t, acceptor));
  // Reflection: one side's MAC is never the other's.
  EXPECT_NE(dialler, acceptor);
  EXPECT_FALSE(auth::verify(*a, auth::Role::Acceptor, t, dialler));
  EXPECT_FALSE(auth::verify(*a, auth::Role::Dialler, t, acceptor));
  // Another job's key.
  EXPECT_FALSE(auth::verify(*b, auth::Role::Dialler, t, dialler));

  // Every field is bound: replay with a fresh nonce, or on another job, communicator,
  // rank pair, world or protocol, fails.
  std::vector<auth::Transcript> changed(9, t);
  changed[0].diallerNonce[31] ^= 1;
  changed[1].acceptorNonce[0] ^= 1;
  changed[2].jobId ^= 1;
  changed[3].commId ^= 1;
  changed[4].dialler = 2;
  changed[5].acceptor = 2;
  changed[6].worldSize = 5;
  changed[7].protocol = auth::Protocol::Store;
  std::swap(changed[8].dialler, changed[8].acceptor);
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_FALSE(auth::verify(*a, auth::Role::Dialler, changed[i], dialler)) << "field " << i;
    EXPECT_FALSE(auth::verify(*a, auth::Role::Acceptor, changed[i], acceptor)) << "field " << i;
  }
}

// ---- the transport's v2 handshake messages --------------------------------------------

TEST(AuthWire, ChallengeAndProofRoundTrip) {
  for (wire::HelloKind kind : {wire::HelloKind::Challenge, wire::HelloKind::Proof}) {
    wire::Hello h;
    h.kind = kind;
    h.jobId = 42;
    h.commId = 43;
    h.rank = 1;
    h.worldSize = 3;
    h.targetRank = 0;
    h.flags = wire::kHelloFlagAuth;
    h.nonce = auth::randomNonce();
    h.mac = auth::proof(*key(kKeyA), auth::Role::Acceptor, sampleTranscript());
    uint8_t b[wire::kHelloSize];
    wire::encodeHello(h, b);
    wire::Hello out;
    ASSERT_EQ(wire::decodeHello(b, &out), wire::DecodeStatus::Ok);
    EXPECT_EQ(out, h);
    // A Challenge or Proof is never acceptable as the opening Hello.
    EXPECT_EQ(wire::checkHello(out, 42, 43, 0, 3), wire::RejectReason::Unexpected);
  }
}

TEST(AuthWire, PrefixJudgesStrangersAtTheirFirstWrongByte) {
  wire::Hello h;
  uint8_t b[wire::kHelloSize];
  wire::encodeHello(h, b);
  uint16_t version = 0;
  // Every prefix of a real message is plausible; the version appears with 8 bytes.
  for (size_t n = 0; n <= wire::kHelloSize; ++n) {
    EXPECT_TRUE(wire::plausibleHelloPrefix(b, n, &version)) << n;
  }
  EXPECT_EQ(version, wire::kProtocolVersion);
  // A version-1 peer's message says so in the same place.
  b[4] = 1;
  EXPECT_TRUE(wire::plausibleHelloPrefix(b, wire::kHelloPrefixSize, &version));
  EXPECT_EQ(version, 1);
  // Any wrong magic byte is caught as soon as it is present, not before.
  for (size_t i = 0; i < 4; ++i) {
    uint8_t bad[wire::kHelloSize];
    wire::encodeHello(h, bad);
    bad[i] ^= 0x20;
    for (size_t n = 0; n <= wire::kHelloSize; ++n) {
      EXPECT_EQ(wire::plausibleHelloPrefix(bad, n), n <= i) << "byte " << i << " n " << n;
    }
  }
  // A data header, an HTTP request, zeros: strangers at byte 0 or 1.
  const uint8_t http[] = {'G', 'E', 'T', ' '};
  EXPECT_FALSE(wire::plausibleHelloPrefix(http, sizeof http));
  const uint8_t zeros[8] = {};
  EXPECT_FALSE(wire::plausibleHelloPrefix(zeros, 1));
}

TEST(AuthWire, GarbageNeverDecodesAsAnUnknownKind) {
  // Every kind from 0 to 0xFFFF: 1..5 decode, the rest are BadKind; nothing else changes.
  wire::Hello h;
  uint8_t b[wire::kHelloSize];
  wire::encodeHello(h, b);
  for (uint32_t kind = 0; kind <= 0xFFFF; ++kind) {
    b[6] = static_cast<uint8_t>(kind);
    b[7] = static_cast<uint8_t>(kind >> 8);
    wire::Hello out;
    const wire::DecodeStatus st = wire::decodeHello(b, &out);
    if (kind >= 1 && kind <= 5) {
      ASSERT_EQ(st, wire::DecodeStatus::Ok) << kind;
      EXPECT_EQ(static_cast<uint32_t>(out.kind), kind);
    } else {
      ASSERT_EQ(st, wire::DecodeStatus::BadKind) << kind;
    }
  }
}

// ---- the store's HELLO and AUTH -----------------------------------------------------

TEST(AuthStoreProtocol, HelloAndAuthExactBytesAndRoundTrips) {
  storeproto::Request hello;
  hello.command = storeproto::Command::Hello;
  hello.hasKey = true;
  for (size_t i = 0; i < 32; ++i) hello.nonce[i] = static_cast<uint8_t>(i);
  Bytes b;
  storeproto::encodeRequest(hello, &b);
  ASSERT_EQ(b.size(), 12u + 1 + 32);
  EXPECT_EQ(b[0], storeproto::kRequestMagic);
  EXPECT_EQ(b[1], 3);  // protocol version 3
  EXPECT_EQ(b[2], 8);  // HELLO
  EXPECT_EQ(b[4], 33);
  EXPECT_EQ(b[12], 1);
  EXPECT_EQ(b[13], 0);
  EXPECT_EQ(b[44], 31);
  storeproto::Request back;
  storeproto::DecodeResult d = storeproto::decodeRequest(b.data(), b.size(), &back);
  ASSERT_EQ(d.status, storeproto::DecodeStatus::Ok) << d.error;
  EXPECT_EQ(back, hello);

  storeproto::Request proof;
  proof.command = storeproto::Command::Auth;
  proof.mac.fill(0xAB);
  b.clear();
  storeproto::encodeRequest(proof, &b);
  ASSERT_EQ(b.size(), 12u + 32);
  EXPECT_EQ(b[2], 9);  // AUTH
  d = storeproto::decodeRequest(b.data(), b.size(), &back);
  ASSERT_EQ(d.status, storeproto::DecodeStatus::Ok) << d.error;
  EXPECT_EQ(back, proof);

  storeproto::Response challenge;
  challenge.command = storeproto::Command::Hello;
  challenge.hasKey = true;
  challenge.nonce.fill(0x11);
  challenge.mac.fill(0x22);
  b.clear();
  storeproto::encodeResponse(challenge, &b);
  ASSERT_EQ(b.size(), 12u + 1 + 32 + 32);
  EXPECT_EQ(b[0], storeproto::kResponseMagic);
  storeproto::Response rback;
  d = storeproto::decodeResponse(b.data(), b.size(), &rback);
  ASSERT_EQ(d.status, storeproto::DecodeStatus::Ok) << d.error;
  EXPECT_EQ(rback, challenge);

  storeproto::Response refused;
  refused.command = storeproto::Command::Auth;
  refused.status = storeproto::Status::Invalid;
  refused.message = "authentication failed";
  b.clear();
  storeproto::encodeResponse(refused, &b);
  d = storeproto::decodeResponse(b.data(), b.size(), &rback);
  ASSERT_EQ(d.status, storeproto::DecodeStatus::Ok) << d.error;
  EXPECT_EQ(rback, refused);
}

TEST(AuthStoreProtocol, TruncatedOrMalformedHelloAndAuthAreRejected) {
  storeproto::Request hello;
  hello.command = storeproto::Command::Hello;
  hello.hasKey = true;
  hello.nonce.fill(7);
  Bytes b;
  storeproto::encodeRequest(hello, &b);
  storeproto::Request out;
  for (size_t n = 0; n < b.size(); ++n) {
    EXPECT_EQ(storeproto::decodeRequest(b.data(), n, &out).status,
              storeproto::DecodeStatus::NeedMore)
        << n;
  }
  // has-key is a boolean.
  Bytes bad = b;
  bad[storeproto::kHeaderBytes] = 2;
  EXPECT_EQ(storeproto::decodeRequest(bad.data(), bad.size(), &out).status,
            storeproto::DecodeStatus::Error);
  // A body one byte short or long (declared length changed to match).
  for (int delta : {-1, 1}) {
    bad = b;
    bad[4] = static_cast<uint8_t>(bad[4] + delta);
    if (delta > 0) bad.push_back(0);
    if (delta < 0) bad.pop_back();
    storeproto::DecodeResult d = storeproto::decodeRequest(bad.data(), bad.size(), &out);
    EXPECT_EQ(d.status, storeproto::DecodeStatus::Error) << delta;
    EXPECT_FALSE(d.error.empty());
  }
  // A version-1 frame is refused by a version-2 decoder, naming the version.
  bad = b;
  bad[1] = 1;
  storeproto::DecodeResult d = storeproto::decodeRequest(bad.data(), bad.size(), &out);
  EXPECT_EQ(d.status, storeproto::DecodeStatus::Error);
  EXPECT_NE(d.error.find("version"), std::string::npos) << d.error;
  // An AUTH reply carries nothing; a HELLO reply without its MAC is cut short.
  storeproto::Response r;
  const Bytes shortChallenge = {storeproto::kResponseMagic, 2, 8, 0, 33, 0, 0, 0, 1};
  Bytes sc = shortChallenge;
  sc.resize(8 + 33, 0);
  EXPECT_EQ(storeproto::decodeResponse(sc.data(), sc.size(), &r).status,
            storeproto::DecodeStatus::Error);
  EXPECT_EQ(storeproto::toString(storeproto::Command::Hello), "HELLO");
  EXPECT_EQ(storeproto::toString(storeproto::Command::Auth), "AUTH");
}

// ---- transport handshakes in one process ---------------------------------------------

struct HandshakeOutcome {
  std::string diallerError;   // "" if the dialler connected
  std::string acceptorError;  // "" if the acceptor connected
  ErrorKind diallerKind = ErrorKind::InvalidArgument;
  uint64_t diallerWire = 0;  // handshake bytes counted on the channel, when connected
  uint64_t acceptorWire = 0;
  std::string acceptorAddress;
  std::string log;  // stderr during the exchange
};

TransportConfig transportConfig(int rank, auth::KeyPtr k) {
  TransportConfig c;
  c.rank = rank;
  c.worldSize = 2;
  c.jobId = 77;
  c.commId = 78;
  c.authKey = std::move(k);
  c.authKeyFromEnv = false;
  return c;
}

// Rank 0 (dialler) and rank 1 (acceptor) with the given keys connect to each other.
HandshakeOutcome handshake(auth::KeyPtr diallerKey, auth::KeyPtr acceptorKey) {
  HandshakeOutcome o;
  auto store = std::make_shared<HashStore>();
  ScopedEnv debug("TCCL_DEBUG", "WARN");
  ::testing::internal::CaptureStderr();
  {
    Transport acceptor(transportConfig(1, acceptorKey), store);
    o.acceptorAddress = acceptor.listenAddress();
    auto acc = std::async(std::launch::async, [&] {
      try {
        acceptor.connect({0}, Deadline::after(1500ms));
        o.acceptorWire = acceptor.stats().perPeer.at(0).wireSent;
      } catch (const Error& e) {
        o.acceptorError = e.what();
      }
    });
    Transport dialler(transportConfig(0, diallerKey), store);
    try {
      dialler.connect({1}, Deadline::after(5000ms));
      o.diallerWire = dialler.stats().perPeer.at(1).wireSent;
    } catch (const Error& e) {
      o.diallerError = e.what();
      o.diallerKind = e.kind();
    }
    acc.get();
  }
  o.log = ::testing::internal::GetCapturedStderr();
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(AuthTransport, SameKeyConnectsWithTwoMessagesEachWay) {
  HandshakeOutcome o = handshake(key(kKeyA), key(kKeyA));
  EXPECT_EQ(o.diallerError, "");
  EXPECT_EQ(o.acceptorError, "");
  EXPECT_EQ(o.diallerWire, 2 * wire::kHelloSize);
  EXPECT_EQ(o.acceptorWire, 2 * wire::kHelloSize);
}

TEST(AuthTransport, NoKeysConnectWithOneMessageEachWay) {
  HandshakeOutcome o = handshake(nullptr, nullptr);
  EXPECT_EQ(o.diallerError, "");
  EXPECT_EQ(o.acceptorError, "");
  EXPECT_EQ(o.diallerWire, wire::kHelloSize);
  EXPECT_EQ(o.acceptorWire, wire::kHelloSize);
}

TEST(AuthTransport, DifferentKeysNeverConnectAndBothSidesSaySo) {
  HandshakeOutcome o = handshake(key(kKeyB), key(kKeyA));
  EXPECT_EQ(o.diallerKind, ErrorKind::Handshake) << o.diallerError;
  EXPECT_TRUE(contains(o.diallerError, "authentication failed")) << o.diallerError;
  EXPECT_TRUE(contains(o.diallerError, o.acceptorAddress)) << o.diallerError;
  EXPECT_TRUE(contains(o.acceptorError, "Timeout")) << o.acceptorError;
  // The acceptor's timeout says why rank 0 never got in, and from where it tried.
  EXPECT_TRUE(contains(o.acceptorError, "claiming to be rank 0 was refused: 127.0.0.1:"))
      << o.acceptorError;
  EXPECT_TRUE(contains(o.acceptorError, "authentication failed")) << o.acceptorError;
  // The acceptor logs the refusal with the dialler's address.
  EXPECT_TRUE(contains(o.log, "refused this rank's challenge") ||
              contains(o.log, "rejected a connection from 127.0.0.1:"))
      << o.log;
}

TEST(AuthTransport, KeyedAcceptorRefusesADiallerWithoutAKey) {
  HandshakeOutcome o = handshake(nullptr, key(kKeyA));
  EXPECT_EQ(o.diallerKind, ErrorKind::Handshake) << o.diallerError;
  EXPECT_TRUE(contains(o.diallerError, "requires an auth key")) << o.diallerError;
  EXPECT_TRUE(contains(o.diallerError, o.acceptorAddress)) << o.diallerError;
  EXPECT_TRUE(contains(o.acceptorError, "Timeout")) << o.acceptorError;
  EXPECT_TRUE(contains(o.acceptorError, "requires an auth key and the other side has none"))
      << o.acceptorError;
  EXPECT_TRUE(contains(o.log, "rejected a connection from 127.0.0.1:")) << o.log;
  EXPECT_TRUE(contains(o.log, "has no key")) << o.log;
}

TEST(AuthTransport, KeyedDiallerIsRefusedByAnAcceptorWithoutAKey) {
  HandshakeOutcome o = handshake(key(kKeyA), nullptr);
  EXPECT_EQ(o.diallerKind, ErrorKind::Handshake) << o.diallerError;
  EXPECT_TRUE(contains(o.diallerError, "the rejecting side has none")) << o.diallerError;
  EXPECT_TRUE(contains(o.acceptorError, "Timeout")) << o.acceptorError;
  EXPECT_TRUE(contains(o.acceptorError, "the other side authenticates with a key"))
      << o.acceptorError;
  EXPECT_TRUE(contains(o.log, "rejected a connection from 127.0.0.1:")) << o.log;
  EXPECT_TRUE(contains(o.log, "this rank has none")) << o.log;
}

// A raw peer that knows the protocol but not the key: it can replay a proof made for an
// earlier challenge or reflect the acceptor's own MAC, and neither gets in; then the real
// rank 0 connects and the acceptor carries on.
TEST(AuthTransport, ReplayedAndReflectedProofsAreRejectedAndTheAcceptorCarriesOn) {
  auth::KeyPtr k = key(kKeyA);
  auto store = std::make_shared<HashStore>();
  Transport acceptor(transportConfig(1, k), store);
  auto acc = std::async(std::launch::async, [&] { acceptor.connect({0}, Deadline::after(20s)); });
  auto [host, port] = net::splitHostPort(acceptor.listenAddress());

  // Opens a connection, says Hello with nonce n, returns the Challenge.
  auto open = [&, h = host, p = port](net::Fd* fd, const auth::Nonce& n) {
    *fd = net::connectWithRetry(h, p, Deadline::after(5s));
    wire::Hello hello;
    hello.jobId = 77;
    hello.commId = 78;
    hello.rank = 0;
    hello.worldSize = 2;
    hello.targetRank = 1;
    hello.flags = wire::kHelloFlagAuth;
    hello.nonce = n;
    uint8_t b[wire::kHelloSize];
    wire::encodeHello(hello, b);
    EXPECT_EQ(net::sendAll(fd->get(), b, sizeof b, Deadline::after(5s)), net::IoStatus::Ok);
    EXPECT_EQ(net::recvAll(fd->get(), b, sizeof b, Deadline::after(10s)), net::IoStatus::Ok);
    wire::Hello challenge;
    EXPECT_EQ(wire::decodeHello(b, &challenge), wire::DecodeStatus::Ok);
    EXPECT_EQ(challenge.kind, wire::HelloKind::Challenge);
    return challenge;
  };
  auto answer = [](net::Fd& fd, const auth::Mac& mac) {
    wire::Hello proof;
    proof.kind = wire::HelloKind::Proof;
    proof.jobId = 77;
    proof.commId = 78;
    proof.rank = 0;
    proof.worldSize = 2;
    proof.targetRank = 1;
    proof.flags = wire::kHelloFlagAuth;
    proof.mac = mac;
    uint8_t b[wire::kHelloSize];
    wire::encodeHello(proof, b);
    EXPECT_EQ(net::sendAll(fd.get(), b, sizeof b, Deadline::after(5s)), net::IoStatus::Ok);
    EXPECT_EQ(net::recvAll(fd.get(), b, sizeof b, Deadline::after(10s)), net::IoStatus::Ok);
    wire::Hello verdict;
    EXPECT_EQ(wire::decodeHello(b, &verdict), wire::DecodeStatus::Ok);
    return verdict;
  };

  const auth::Nonce n = auth::randomNonce();
  // A proof that was valid for the first challenge (computed here with the key, as if
  // recorded from a real rank) is replayed against the second: the acceptor's nonce
  // differs, so it fails.
  net::Fd first;
  wire::Hello c1 = open(&first, n);
  auth::Transcript t;
  t.jobId = 77;
  t.commId = 78;
  t.dialler = 0;
  t.acceptor = 1;
  t.worldSize = 2;
  t.diallerNonce = n;
  t.acceptorNonce = c1.nonce;
  EXPECT_TRUE(auth::verify(*k, auth::Role::Acceptor, t, c1.mac)) << "the challenge is genuine";
  const auth::Mac recorded = auth::proof(*k, auth::Role::Dialler, t);
  first.reset();
  net::Fd second;
  wire::Hello c2 = open(&second, n);
  EXPECT_NE(c2.nonce, c1.nonce) << "the acceptor's nonce must be fresh";
  wire::Hello v = answer(second, recorded);
  EXPECT_EQ(v.kind, wire::HelloKind::Reject);
  EXPECT_EQ(v.reason, wire::RejectReason::AuthFailed);
  // Reflection: the acceptor's own MAC sent back as the dialler's proof.
  net::Fd third;
  wire::Hello c3 = open(&third, n);
  v = answer(third, c3.mac);
  EXPECT_EQ(v.reason, wire::RejectReason::AuthFailed);

  // The real rank 0 still gets in.
  Transport dialler(transportConfig(0, k), store);
  dialler.connect({1}, Deadline::after(10s));
  EXPECT_NO_THROW(acc.get());
  EXPECT_TRUE(acceptor.connected(0));
  EXPECT_TRUE(dialler.connected(1));
}

// ---- the store ----------------------------------------------------------------------

// A TcpStoreServer whose key (or none) comes from the environment at construction.
std::unique_ptr<TcpStoreServer> serverWithKey(const char* hex) {
  ScopedEnv k("TCCL_AUTH_KEY", hex);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  return std::make_unique<TcpStoreServer>("127.0.0.1", 0);
}

std::unique_ptr<TcpStore> clientWithKey(const char* hex, uint16_t port) {
  ScopedEnv k("TCCL_AUTH_KEY", hex);
  ScopedEnv f("TCCL_AUTH_KEY_FILE", nullptr);
  return std::make_unique<TcpStore>("127.0.0.1", port, 5000ms);
}

std::string storeError(const char* hex, uint16_t port, ErrorKind* kind) {
  try {
    clientWithKey(hex, port);
  } catch (const Error& e) {
    *kind = e.kind();
    return e.what();
  }
  return "";
}

TEST(AuthStore, SameKeyServesWrongOrMissingKeyIsAHandshakeErrorNamingTheStore) {
  auto server = serverWithKey(kKeyA);
  const std::string addr = "127.0.0.1:" + std::to_string(server->port());
  auto good = clientWithKey(kKeyA, server->port());
  good->setString("k", "v");

  ErrorKind kind = ErrorKind::InvalidArgument;
  std::string err = storeError(kKeyB, server->port(), &kind);
  EXPECT_EQ(kind, ErrorKind::Handshake) << err;
  EXPECT_TRUE(contains(err, addr)) << err;
  EXPECT_TRUE(contains(err, "does not hold this job's key")) << err;

  kind = ErrorKind::InvalidArgument;
  err = storeError(nullptr, server->port(), &kind);
  EXPECT_EQ(kind, ErrorKind::Handshake) << err;
  EXPECT_TRUE(contains(err, addr)) << err;
  EXPECT_TRUE(contains(err, "requires authentication and the client has no key")) << err;

  // The store carries on for the good client, and for a new one.
  EXPECT_EQ(good->getString("k"), "v");
  EXPECT_EQ(clientWithKey(kKeyA, server->port())->getString("k"), "v");
}

TEST(AuthStore, KeyedClientRefusesAStoreWithoutAKey) {
  auto server = serverWithKey(nullptr);
  ErrorKind kind = ErrorKind::InvalidArgument;
  std::string err = storeError(kKeyA, server->port(), &kind);
  EXPECT_EQ(kind, ErrorKind::Handshake) << err;
  EXPECT_TRUE(contains(err, "this store has none")) << err;
  // Unkeyed clients of an unkeyed store work as before.
  auto plain = clientWithKey(nullptr, server->port());
  plain->setString("a", "b");
  EXPECT_EQ(plain->getString("a"), "b");
}

// Raw bytes to a keyed store: anything but HELLO first gets an INVALID naming the reason
// and the connection closes; so does a wrong AUTH; a huge declared body closes at once.
TEST(AuthStore, UnauthenticatedRawRequestsAreRefusedAndClosed) {
  auto server = serverWithKey(kKeyA);
  auto good = clientWithKey(kKeyA, server->port());
  good->setString("secret", "s");
  auto dial = [&] {
    return net::connectWithRetry("127.0.0.1", server->port(), Deadline::after(5s));
  };
  auto sendRequest = [](net::Fd& fd, const storeproto::Request& r) {
    Bytes b;
    storeproto::encodeRequest(r, &b);
    EXPECT_EQ(net::sendAll(fd.get(), b.data(), b.size(), Deadline::after(5s)), net::IoStatus::Ok);
  };
  // Reads one response, then expects end-of-file.
  auto readOneThenEof = [](net::Fd& fd, storeproto::Response* out) {
    Bytes buf;
    uint8_t chunk[4096];
    const Deadline d = Deadline::after(10s);
    for (;;) {
      size_t got = 0;
      net::IoStatus st = net::recvAll(fd.get(), chunk, 1, d, &got);
      if (st != net::IoStatus::Ok) break;
      buf.push_back(chunk[0]);
    }
    storeproto::DecodeResult r = storeproto::decodeResponse(buf.data(), buf.size(), out);
    return r.status == storeproto::DecodeStatus::Ok && r.consumed == buf.size();
  };

  {
    net::Fd fd = dial();
    storeproto::Request get;
    get.command = storeproto::Command::Get;
    get.key = "secret";
    get.timeoutMs = 0;
    sendRequest(fd, get);
    storeproto::Response r;
    ASSERT_TRUE(readOneThenEof(fd, &r));
    EXPECT_EQ(r.status, storeproto::Status::Invalid);
    EXPECT_TRUE(contains(r.message, "requires authentication")) << r.message;
    EXPECT_TRUE(r.value.empty());
  }
  {
    net::Fd fd = dial();
    storeproto::Request hello;
    hello.command = storeproto::Command::Hello;
    hello.hasKey = true;
    hello.nonce = auth::randomNonce();
    sendRequest(fd, hello);
    Bytes buf(storeproto::kHeaderBytes + 65);
    ASSERT_EQ(net::recvAll(fd.get(), buf.data(), buf.size(), Deadline::after(5s)),
              net::IoStatus::Ok);
    storeproto::Response challenge;
    ASSERT_EQ(storeproto::decodeResponse(buf.data(), buf.size(), &challenge).status,
              storeproto::DecodeStatus::Ok);
    EXPECT_TRUE(challenge.hasKey);
    // Reflect the store's MAC as our proof.
    storeproto::Request proof;
    proof.command = storeproto::Command::Auth;
    proof.mac = challenge.mac;
    sendRequest(fd, proof);
    storeproto::Response r;
    ASSERT_TRUE(readOneThenEof(fd, &r));
    EXPECT_EQ(r.status, storeproto::Status::Invalid);
    EXPECT_TRUE(contains(r.message, "authentication failed")) << r.message;
  }
  {
    net::Fd fd = dial();
    // A HELLO header declaring 64 MiB: closed from the header alone.
    const uint8_t hdr[] = {
        storeproto::kRequestMagic, storeproto::kVersion, 8, 0, 0, 0, 0, 4, 0, 0, 0, 0};
    ASSERT_EQ(net::sendAll(fd.get(), hdr, sizeof hdr, Deadline::after(5s)), net::IoStatus::Ok);
    uint8_t b = 0;
    EXPECT_NE(net::recvAll(fd.get(), &b, 1, Deadline::after(10s)), net::IoStatus::Ok);
  }
  EXPECT_EQ(good->getString("secret"), "s");
}

}  // namespace
}  // namespace tccl
