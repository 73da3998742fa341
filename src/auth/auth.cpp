#include "auth/auth.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/config.hpp"
#include "base/log.hpp"
#include "tccl/error.hpp"

namespace tccl::auth {
namespace {

// A key file larger than this is not a hex key (512 hex digits plus whitespace).
constexpr size_t kMaxKeyFileBytes = 4096;
constexpr char kDomain[] = "tccl-auth-v1";  // 12 bytes, no terminator in the transcript

// Bytes of a key file, at most kMaxKeyFileBytes + 1 of them (one more says "too big").
std::string readKeyFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throwError(ErrorKind::InvalidArgument,
               "TCCL_AUTH_KEY_FILE='" + path + "' cannot be opened: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throwError(ErrorKind::InvalidArgument,
               "TCCL_AUTH_KEY_FILE='" + path + "' is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    TCCL_WARN("TCCL_AUTH_KEY_FILE='" << path << "' is readable or writable by group or others "
                                     << "(mode " << std::oct << (st.st_mode & 0777) << std::dec
                                     << "); chmod 600 it");
  }
  std::string text(kMaxKeyFileBytes + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throwError(ErrorKind::InvalidArgument,
                 "TCCL_AUTH_KEY_FILE='" + path + "' cannot be read: " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

void wipe(std::string* s) {
  if (!s->empty()) OPENSSL_cleanse(s->data(), s->size());
}

void putU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void putU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::atomic<bool> gWarnedUnauthenticated{false};

// The opt-out's one WARN (it replaces the "not set" one: a process logs one or the other).
void warnUnauthenticatedOnce(bool optedOut) {
  if (gWarnedUnauthenticated.exchange(true)) return;
  if (optedOut) {
    TCCL_WARN(
        "TCCL_AUTH=off: connections to and from this process are not authenticated, even "
        "where it listens beyond the loopback (any process that can reach its ports can "
        "join the job); see docs/security.md");
  } else {
    TCCL_WARN(
        "TCCL_AUTH_KEY is not set: connections to and from this process are not "
        "authenticated (any process that can reach its ports can join the job); "
        "see docs/security.md");
  }
}

}  // namespace

Key::Key(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}

Key::~Key() {
  if (!bytes_.empty()) OPENSSL_cleanse(bytes_.data(), bytes_.size());
}

std::string Key::id() const {
  static constexpr char kLabel[] = "tccl key id";
  const Mac m =
      hmacSha256(data(), size(), reinterpret_cast<const uint8_t*>(kLabel), sizeof kLabel - 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 4; ++i) {
    s += kHex[m[i] >> 4];
    s += kHex[m[i] & 15];
  }
  return s;
}

KeyPtr parseHexKey(std::string_view text, std::string* error) {
  std::vector<uint8_t> bytes;
  if (!decodeHexKey(text, &bytes, error)) return nullptr;
  return std::make_shared<const Key>(std::move(bytes));
}

KeyPtr keyFromEnv() {
  const std::optional<std::string> inline_ = config::getEnv("TCCL_AUTH_KEY");
  const std::optional<std::string> file = config::getEnv("TCCL_AUTH_KEY_FILE");
  if (inline_ && file) {
    throwError(ErrorKind::InvalidArgument,
               "both TCCL_AUTH_KEY and TCCL_AUTH_KEY_FILE are set; set only one");
  }
  const bool off = optedOut();
  if (off && (inline_ || file)) {
    throwError(ErrorKind::InvalidArgument,
               std::string("TCCL_AUTH=off and ") +
                   (inline_ ? "TCCL_AUTH_KEY" : "TCCL_AUTH_KEY_FILE") +
                   " are both set: unset TCCL_AUTH to authenticate with the key, or the key to "
                   "run unauthenticated");
  }
  if (!inline_ && !file) return nullptr;  // requireKeyToListen says so, once
  std::string text = inline_ ? *inline_ : readKeyFile(*file);
  std::string error;
  KeyPtr key;
  if (text.size() > kMaxKeyFileBytes) {
    error = "longer than " + std::to_string(kMaxKeyFileBytes) + " bytes";
  } else {
    key = parseHexKey(text, &error);
  }
  wipe(&text);
  if (!key) {
    throwError(
        ErrorKind::InvalidArgument,
        (inline_ ? std::string("TCCL_AUTH_KEY") : "the file TCCL_AUTH_KEY_FILE='" + *file + "'") +
            " is not a valid key: " + error);
  }
  return key;
}

bool optedOut() {
  const std::optional<std::string> v = config::getEnv("TCCL_AUTH");
  if (!v || *v == "on") return false;
  if (*v == "off") return true;
  throwError(ErrorKind::InvalidArgument,
             "TCCL_AUTH='" + *v + "' is neither 'off' (run without authentication) nor 'on'");
}

void requireKeyToListen(bool haveKey, bool beyondLoopback, const std::string& who,
                        const std::string& address, int rank) {
  if (haveKey) return;
  const bool off = optedOut();
  if (!beyondLoopback || off) {
    // Allowed, and said once per process: here rather than where the key is read, so that
    // a process that refuses to start prints its one error and nothing else.
    warnUnauthenticatedOnce(off);
    return;
  }
  throwError(ErrorKind::InvalidArgument,
             who + " would listen on " + address +
                 ", beyond the loopback, without a job key: any process that can reach that "
                 "port could join the job. Give every process of the job the same key, "
                 "TCCL_AUTH_KEY=$(openssl rand -hex 32) or TCCL_AUTH_KEY_FILE=<file holding "
                 "one> (tccl launch makes one on a single node), or run unauthenticated on "
                 "purpose with TCCL_AUTH=off (docs/security.md)",
             rank);
}

std::vector<uint8_t> transcriptBytes(Role who, const Transcript& t) {
  std::vector<uint8_t> out;
  out.reserve(sizeof kDomain - 1 + 2 + 8 + 8 + 12 + 2 * kNonceBytes);
  out.insert(out.end(), kDomain, kDomain + sizeof kDomain - 1);
  out.push_back(static_cast<uint8_t>(t.protocol));
  out.push_back(static_cast<uint8_t>(who));
  putU64(&out, t.jobId);
  putU64(&out, t.commId);
  putU32(&out, static_cast<uint32_t>(t.dialler));
  putU32(&out, static_cast<uint32_t>(t.acceptor));
  putU32(&out, static_cast<uint32_t>(t.worldSize));
  out.insert(out.end(), t.diallerNonce.begin(), t.diallerNonce.end());
  out.insert(out.end(), t.acceptorNonce.begin(), t.acceptorNonce.end());
  return out;
}

Mac proof(const Key& key, Role who, const Transcript& t) {
  const std::vector<uint8_t> msg = transcriptBytes(who, t);
  return hmacSha256(key.data(), key.size(), msg.data(), msg.size());
}

bool verify(const Key& key, Role who, const Transcript& t, const Mac& received) {
  return equalConstantTime(proof(key, who, t), received);
}

Mac hmacSha256(const uint8_t* key, size_t keyLen, const uint8_t* data, size_t len) {
  Mac out{};
  unsigned int outLen = 0;
  // HMAC() with a null key pointer would mean "no key": give it a valid pointer always.
  static const uint8_t kEmpty = 0;
  if (HMAC(EVP_sha256(), keyLen ? key : &kEmpty, static_cast<int>(keyLen), len ? data : &kEmpty,
           len, out.data(), &outLen) == nullptr ||
      outLen != out.size()) {
    throwError(ErrorKind::System, "HMAC-SHA256 failed in OpenSSL");
  }
  return out;
}

bool equalConstantTime(const Mac& a, const Mac& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Nonce randomNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    throwError(ErrorKind::System, "OpenSSL RAND_bytes failed: no entropy for a nonce");
  }
  return n;
}

std::string randomHexKey() {
  uint8_t bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    throwError(ErrorKind::System, "OpenSSL RAND_bytes failed: no entropy for a key");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : bytes) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  OPENSSL_cleanse(bytes, sizeof bytes);
  return hex;
}

bool ensureJobKeyInEnv() {
  if (config::getEnv("TCCL_AUTH_KEY") || config::getEnv("TCCL_AUTH_KEY_FILE")) return false;
  if (optedOut()) return false;
  std::string key = randomHexKey();
  const int rc = ::setenv("TCCL_AUTH_KEY", key.c_str(), 1);
  wipe(&key);
  if (rc != 0) throwError(ErrorKind::System, "setenv(TCCL_AUTH_KEY) failed");
  return true;
}

}  // namespace tccl::auth
