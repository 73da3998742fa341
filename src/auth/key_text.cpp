#include "auth/key_text.hpp"

namespace tccl::auth {
namespace {

bool isSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Overwrites bytes in a way the compiler may not drop (the buffer may hold key bytes).
void wipe(std::vector<uint8_t>* v) {
  volatile uint8_t* p = v->data();
  for (size_t i = 0; i < v->size(); ++i) p[i] = 0;
  v->clear();
}

}  // namespace

bool decodeHexKey(std::string_view text, std::vector<uint8_t>* out, std::string* error) {
  out->clear();
  while (!text.empty() && isSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && isSpace(text.back())) text.remove_suffix(1);
  if (text.size() % 2 != 0 || text.size() < 2 * kMinKeyBytes || text.size() > 2 * kMaxKeyBytes) {
    *error = "expected an even number of hex digits, " + std::to_string(2 * kMinKeyBytes) + " to " +
             std::to_string(2 * kMaxKeyBytes) + " of them (e.g. `openssl rand -hex 32`)," +
             " got " + std::to_string(text.size()) + " characters";
    return false;
  }
  out->resize(text.size() / 2);
  for (size_t i = 0; i < out->size(); ++i) {
    const int hi = hexValue(text[2 * i]);
    const int lo = hexValue(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      wipe(out);
      *error = "character " + std::to_string(2 * i + (hi < 0 ? 0 : 1) + 1) +
               " is not a hex digit (the key must be hex, e.g. `openssl rand -hex 32`)";
      return false;
    }
    (*out)[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace tccl::auth
