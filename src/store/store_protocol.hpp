// The TcpStore wire protocol, and the value rules every Store implementation shares.
//
// Encoders and decoders are pure functions over bytes: no sockets, no clocks, no global
// state. The decoders accept any byte string (they are fuzzed) and never allocate more
// than the input they were given: every length is checked against its cap and against
// the bytes actually present before anything is reserved or copied.
//
// Every frame is a 12-byte header and `bodyLen` body bytes. Integers little-endian.
//
//   offset size field
//   0      1    magic     0xC5 request, 0xC6 response
//   1      1    version   3
//   2      1    command   1 SET, 2 GET, 3 ADD, 4 CHECK, 5 WAIT, 6 ERASE, 7 PING, 8 HELLO, 9 AUTH,
//                         10 MULTI_GET, 11 MULTI_SET, 12 COMPARE_SET
//   3      1    status    request: 0 (reserved); response: 0 OK, 1 TIMEOUT, 2 INVALID
//   4      4    bodyLen   <= kMaxBodyBytes
//   8      4    tag       chosen by the client; the response to a request carries its tag
//
// The tag lets several threads share one connection: the server goes on reading while a
// GET / WAIT / MULTI_GET is parked, so replies may come back out of order, and the client
// matches them to their requests by tag (docs/store.md).
//
// Bodies (str = u32 length + bytes; keys = u32 count + count x str):
//
//   request  SET   str key, str value        response OK    SET/WAIT/PING: empty
//            GET   i64 timeoutMs, str key                   GET: str value
//            ADD   str key, i64 delta                       ADD: i64 new value
//            CHECK keys                                     CHECK: u8 all exist (0/1)
//            WAIT  i64 timeoutMs, keys                      ERASE: u8 existed (0/1)
//            ERASE str key                      TIMEOUT (GET, WAIT): keys still missing
//            PING  empty                                    HELLO: u8 has key, nonce[32], mac[32]
//            HELLO u8 has key, nonce[32]                    AUTH: empty
//            AUTH  mac[32]                                  MULTI_GET: u32 count + count x str
//            MULTI_GET i64 timeoutMs, keys                  MULTI_SET: empty
//            MULTI_SET u32 count, count x (str key, str value)   COMPARE_SET: str value now
//            COMPARE_SET str key, str expected, str desired
//                                               TIMEOUT (GET, WAIT, MULTI_GET): keys missing
//                                               INVALID (any): str message
//
// COMPARE_SET stores `desired` when the key holds `expected`, or when the key is absent
// and `expected` is empty; either way it answers the value the key holds afterwards
// (empty when absent), as torch.distributed's compare_set does.

// HELLO and AUTH authenticate a connection (docs/security.md, auth/auth.hpp): the client
// opens with HELLO and its nonce; a store with a key answers with its nonce and its MAC,
// the client checks it and answers with AUTH and its own MAC. A store with a key serves
// nothing else until AUTH succeeds; a store without one serves a client that skips HELLO.
//
// timeoutMs < 0 means "no timeout". A body must be consumed exactly; trailing bytes are
// an error. docs/store.md has the same tables and the reasons behind them.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tccl/store.hpp"
#include "tccl/types.hpp"

namespace tccl::storeproto {

inline constexpr uint8_t kRequestMagic = 0xC5;
inline constexpr uint8_t kResponseMagic = 0xC6;
inline constexpr uint8_t kVersion = 3;  // 2: HELLO and AUTH; 3: tags, MULTI_*, COMPARE_SET
inline constexpr size_t kHeaderBytes = 12;

// Limits, shared by every store so that code moving between stores sees one contract.
inline constexpr size_t kMaxKeyBytes = size_t{64} << 10;
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kMaxKeys = 65536;  // per CHECK / WAIT / MULTI_GET / MULTI_SET
inline constexpr size_t kMaxMessageBytes = size_t{64} << 10;
// The largest body any frame may carry: a SET of the largest key and value plus their
// length fields, with slack. A CHECK / WAIT whose keys do not fit is rejected too.
inline constexpr size_t kMaxBodyBytes = kMaxValueBytes + kMaxKeyBytes + 64;

enum class Command : uint8_t {
  Set = 1,
  Get = 2,
  Add = 3,
  Check = 4,
  Wait = 5,
  Erase = 6,
  Ping = 7,
  Hello = 8,
  Auth = 9,
  MultiGet = 10,
  MultiSet = 11,
  CompareSet = 12,
};
inline constexpr Command kLastCommand = Command::CompareSet;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;
// The largest body of HELLO / AUTH in either direction: what an unauthenticated
// connection may declare before the store closes it.
inline constexpr size_t kMaxAuthBodyBytes = 1 + kNonceBytes + kMacBytes;
enum class Status : uint8_t { Ok = 0, Timeout = 1, Invalid = 2 };
std::string_view toString(Command c);
std::string_view toString(Status s);

struct Request {
  Command command = Command::Ping;
  uint32_t tag = 0;
  std::string key;                           // SET GET ADD ERASE COMPARE_SET
  Bytes value;                               // SET; COMPARE_SET: desired
  Bytes expected;                            // COMPARE_SET
  int64_t delta = 0;                         // ADD
  int64_t timeoutMs = -1;                    // GET WAIT MULTI_GET; negative: no timeout
  std::vector<std::string> keys;             // CHECK WAIT MULTI_GET MULTI_SET
  std::vector<Bytes> values;                 // MULTI_SET: one per key
  bool hasKey = false;                       // HELLO
  std::array<uint8_t, kNonceBytes> nonce{};  // HELLO
  std::array<uint8_t, kMacBytes> mac{};      // AUTH
  bool operator==(const Request&) const = default;
};

struct Response {
  Command command = Command::Ping;
  uint32_t tag = 0;
  Status status = Status::Ok;
  Bytes value;                               // OK to GET, COMPARE_SET
  std::vector<Bytes> values;                 // OK to MULTI_GET: one per key, in order
  int64_t number = 0;                        // OK to ADD: the new value
  bool flag = false;                         // OK to CHECK: all exist; OK to ERASE: existed
  std::vector<std::string> keys;             // TIMEOUT: the keys still missing
  std::string message;                       // INVALID: why the request was refused
  bool hasKey = false;                       // OK to HELLO
  std::array<uint8_t, kNonceBytes> nonce{};  // OK to HELLO
  std::array<uint8_t, kMacBytes> mac{};      // OK to HELLO (zeros without a key)
  bool operator==(const Response&) const = default;
};

enum class DecodeStatus : uint8_t { NeedMore, Ok, Error };
std::string_view toString(DecodeStatus s);

struct DecodeResult {
  DecodeStatus status = DecodeStatus::NeedMore;
  size_t consumed = 0;    // Ok: the bytes of the decoded frame (0 otherwise)
  size_t frameBytes = 0;  // NeedMore: the whole frame's size once its header is in, else 0
  std::string error;      // Error: why the bytes can never become a valid frame
};

// Appends one frame to *out. Throws InvalidArgumentError when a field exceeds a limit
// (nothing is appended then).
void encodeRequest(const Request& r, Bytes* out);
void encodeResponse(const Response& r, Bytes* out);

// Decodes the first frame of data[0, size). NeedMore: the bytes are a valid prefix of
// a frame (a header is rejected as soon as its first bad byte arrives). *out is
// written only on Ok.
DecodeResult decodeRequest(const uint8_t* data, size_t size, Request* out);
DecodeResult decodeResponse(const uint8_t* data, size_t size, Response* out);

// ---- value rules shared by every store ---------------------------------------------

// Strict decimal int64: optional '-', then 1..19 digits, nothing else, in range.
std::optional<int64_t> parseDecimalInt64(const Bytes& v);
Bytes formatDecimal(int64_t v);

// add(key, delta) over the current value (nullptr: absent). On success returns the
// new value; otherwise sets *error and returns nullopt (not an integer, overflow).
std::optional<int64_t> applyAdd(const std::string& key, const Bytes* current, int64_t delta,
                                std::string* error);

// Throw InvalidArgumentError when a key / value / key list exceeds its limit.
void checkKey(const std::string& key);
void checkValue(const Bytes& value);
void checkKeys(const std::vector<std::string>& keys);
// multiSet's pairs: as many values as keys, each within its limit.
void checkPairs(const std::vector<std::string>& keys, const std::vector<Bytes>& values);

// compareSet over the current value (nullptr: absent): whether `desired` replaces it.
bool compareSetMatches(const Bytes* current, const Bytes& expected);

// A store timeout as a Deadline. Negative or absurdly large (> 100 years) timeouts
// mean "never", which also keeps steady_clock arithmetic from overflowing.
Deadline deadlineAfter(std::chrono::milliseconds timeout);
Deadline deadlineAfterMs(int64_t timeoutMs);

// "a, b, c" with non-printable bytes escaped as \xNN; lists at most 32 keys and then
// says how many more are missing.
std::string describeKeys(const std::vector<std::string>& keys);

// Throws the TimeoutError of a store get() / wait(): the message names every missing
// key ("store wait timed out; missing keys: rank/3/addr, rank/5/addr"), and the info
// carries the time waited and allowed. storeAddress is "" for in-process stores.
[[noreturn]] void throwStoreTimeout(std::string_view op, const std::vector<std::string>& missing,
                                    std::chrono::milliseconds timeout,
                                    std::chrono::milliseconds elapsed,
                                    const std::string& storeAddress = "");

// What a server or client that refuses the other end's key tells the user to do.
inline constexpr char kAuthKeyHint[] =
    "set TCCL_AUTH_KEY or TCCL_AUTH_KEY_FILE the same for every process of the job";

}  // namespace tccl::storeproto
