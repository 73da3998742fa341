// Fuzzes auth::decodeHexKey: the text of TCCL_AUTH_KEY or of the file TCCL_AUTH_KEY_FILE
// names, which every store server, store client and rank parses at start.
//
// Against an independent reference (strip the whitespace, then every character a hex
// digit, an even count within the limits): the decoder accepts exactly those texts; an
// accepted key is the hex read two digits to a byte, and re-encoding it gives back the
// text, case aside; a refused one leaves the output empty and says why in words that
// depend only on the length and on which characters are hex (never on the text itself).
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "auth/key_text.hpp"
#include "fuzz_check.hpp"

namespace tccl::auth {
namespace {

bool spaceRef(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void checkOne(std::string_view text) {
  size_t b = 0;
  size_t e = text.size();
  while (b < e && spaceRef(text[b])) ++b;
  while (e > b && spaceRef(text[e - 1])) --e;
  const std::string_view core = text.substr(b, e - b);
  bool allHex = true;
  for (char c : core) allHex = allHex && std::isxdigit(static_cast<unsigned char>(c)) != 0;
  const bool valid = allHex && core.size() % 2 == 0 && core.size() >= 2 * kMinKeyBytes &&
                     core.size() <= 2 * kMaxKeyBytes;

  std::vector<uint8_t> key = {0xEE};  // must be replaced or cleared
  std::string error;
  const bool ok = decodeHexKey(text, &key, &error);
  FUZZ_CHECK(ok == valid, "accepts exactly the texts the reference accepts");
  if (!ok) {
    FUZZ_CHECK(key.empty(), "a refused text leaves no key behind");
    FUZZ_CHECK(!error.empty(), "a refusal says why");
    // The error depends only on the length and on which characters are hex digits: the
    // same text with every hex digit made '0' and everything else 'x' gets the same one.
    std::string masked(core);
    for (char& c : masked) c = std::isxdigit(static_cast<unsigned char>(c)) ? '0' : 'x';
    std::vector<uint8_t> unused;
    std::string maskedError;
    FUZZ_CHECK(!decodeHexKey(masked, &unused, &maskedError), "the masked text is refused too");
    FUZZ_CHECK(maskedError == error, "the error never carries the text's characters");
    return;
  }
  FUZZ_CHECK(key.size() * 2 == core.size(), "two digits to a byte");
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < key.size(); ++i) {
    const char hi = static_cast<char>(std::tolower(static_cast<unsigned char>(core[2 * i])));
    const char lo = static_cast<char>(std::tolower(static_cast<unsigned char>(core[2 * i + 1])));
    FUZZ_CHECK(kHex[key[i] >> 4] == hi && kHex[key[i] & 15] == lo, "the bytes are the hex");
  }
}

}  // namespace
}  // namespace tccl::auth

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy: ASan reports any read past the text.
  auto copy = std::make_unique<char[]>(size == 0 ? 1 : size);
  if (size > 0) std::memcpy(copy.get(), data, size);
  tccl::auth::checkOne(std::string_view(copy.get(), size));
  return 0;
}
