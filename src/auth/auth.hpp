// Job membership: a per-job secret key and the HMAC-SHA256 challenge-response that every
// connection (rank to rank, rank to store) runs before anything else crosses it.
//
// The exchange, for a dialler D and an acceptor A sharing key K (docs/security.md):
//
//   D -> A   nonce_D                                  (fresh, 32 random bytes)
//   A -> D   nonce_A, mac_A = HMAC(K, T(Acceptor))    (fresh, 32 random bytes)
//   D -> A   mac_D = HMAC(K, T(Dialler))
//
// where T(role) is a fixed-layout transcript (see transcript()): a domain label, which
// protocol (transport or store), the role of the party that computes the MAC, the job id,
// communicator id, both ranks and the world size, and both nonces. Each side verifies the
// other's MAC with CRYPTO_memcmp before it trusts the connection. Hence:
//   - without K nobody computes a valid MAC (HMAC-SHA256 is a PRF);
//   - a recorded MAC is useless later: the verifier's own fresh nonce is in the transcript;
//   - a MAC cannot be reflected back to its sender: the role is in the transcript, so the
//     acceptor's MAC never verifies as a dialler's, and vice versa;
//   - a MAC made for one job / communicator / rank pair never verifies for another.
//
// Nothing here touches sockets; the transport (src/transport) and the store
// (src/store/tcp_store.cpp) carry these values in their own handshake messages.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "auth/key_text.hpp"

namespace tccl::auth {

inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;  // HMAC-SHA256

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;

// A job's secret. Never printed; the bytes are wiped when the key is destroyed.
class Key {
 public:
  explicit Key(std::vector<uint8_t> bytes);
  ~Key();
  Key(const Key&) = delete;
  Key& operator=(const Key&) = delete;

  const uint8_t* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  // A short public name for the key (8 hex digits of HMAC(K, "tccl key id")): lets two
  // hosts' logs show whether they hold the same key without showing the key.
  std::string id() const;

 private:
  std::vector<uint8_t> bytes_;
};

using KeyPtr = std::shared_ptr<const Key>;

// A key from its text form (decodeHexKey in key_text.hpp: hex digits, either case,
// 2 x kMinKeyBytes to 2 x kMaxKeyBytes of them, surrounding whitespace ignored). On
// failure returns nullptr and says why in *error (never quoting the text).
KeyPtr parseHexKey(std::string_view text, std::string* error);

// The key of this process's job: TCCL_AUTH_KEY (hex), or TCCL_AUTH_KEY_FILE (a file
// holding the same hex text, e.g. written by `openssl rand -hex 32`). nullptr when neither
// is set (requireKeyToListen then logs the one WARN). Throws InvalidArgumentError when both are
// set, when the key is malformed, or when the file cannot be read; warns when the file is readable
// by group or others.
//
// TCCL_AUTH=off (docs/security.md) is the explicit opt-out: the process may listen beyond
// the loopback without a key. Setting it together with a key is an InvalidArgumentError.
KeyPtr keyFromEnv();

// TCCL_AUTH: true for "off", false when unset or "on"; InvalidArgumentError otherwise.
bool optedOut();

// The secure-by-default rule: a process that listens beyond the loopback (`beyondLoopback`:
// its listening socket is bound to a non-loopback or wildcard address) must hold a key
// unless TCCL_AUTH=off. Otherwise throws one InvalidArgumentError that names `who` ("rank
// 3", "the store server") and `address`, and says how to set a key or opt out. A listener
// allowed without a key (loopback, or the opt-out) logs one WARN per process saying its
// connections are not authenticated (the opt-out's own text under TCCL_AUTH=off).
void requireKeyToListen(bool haveKey, bool beyondLoopback, const std::string& who,
                        const std::string& address, int rank = -1);

// Which end of a connection computes a MAC.
enum class Role : uint8_t { Dialler = 1, Acceptor = 2 };
// Which handshake the MAC is for (so that no MAC from one verifies in the other).
enum class Protocol : uint8_t { Transport = 1, Store = 2 };

// Everything both ends of one connection agree on by the time MACs are exchanged.
struct Transcript {
  Protocol protocol = Protocol::Transport;
  uint64_t jobId = 0;    // transport: the job id; store: 0
  uint64_t commId = 0;   // transport: the communicator id; store: 0
  int32_t dialler = -1;  // transport: the dialling rank; store: -1
  int32_t acceptor = -1;
  int32_t worldSize = 0;
  Nonce diallerNonce{};
  Nonce acceptorNonce{};
};

// The bytes `who` MACs: a fixed layout (no field can bleed into another), documented in
// docs/security.md.
std::vector<uint8_t> transcriptBytes(Role who, const Transcript& t);

// HMAC(key, transcriptBytes(who, t)).
Mac proof(const Key& key, Role who, const Transcript& t);
// Constant-time check of a MAC received from `who`.
bool verify(const Key& key, Role who, const Transcript& t, const Mac& received);

// HMAC-SHA256 (OpenSSL libcrypto).
Mac hmacSha256(const uint8_t* key, size_t keyLen, const uint8_t* data, size_t len);
// Constant time in the contents (CRYPTO_memcmp).
bool equalConstantTime(const Mac& a, const Mac& b);
// A fresh nonce from OpenSSL's CSPRNG. Throws SystemError if it has no entropy.
Nonce randomNonce();
// A fresh key (32 random bytes) in the text form TCCL_AUTH_KEY takes, for launchers that
// start every rank of a job themselves and can hand it down.
std::string randomHexKey();
// For such a launcher: when neither TCCL_AUTH_KEY nor TCCL_AUTH_KEY_FILE is set, puts a
// fresh key in this process's TCCL_AUTH_KEY, where the store it hosts and the ranks it
// starts (which inherit it) find it. Returns whether it did (never with TCCL_AUTH=off).
// Call before creating the store server.
bool ensureJobKeyInEnv();

}  // namespace tccl::auth
