// Fuzzes the failure records ranks read from the store (src/core/failure.hpp): another
// rank's heartbeat (decodeHeartbeat) and the agreed cause of an abort (decodeCause). They
// arrive over the TcpStore from other processes, so they are network bytes like any other.
//
// The first input byte picks what the rest is:
//   0  a heartbeat record: decoding, encoding and decoding again gives the same record
//   1  a cause record: encode(decode(s)) is a fixed point (decoding it gives the same text)
//   2  a timeout to judge: a small world whose heartbeat records, read twice, come from
//      the input; judgeTimeout must name a rank of that world, and itself only as a Mismatch
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/failure.hpp"
#include "fuzz_check.hpp"

namespace tccl::failure {
namespace {

void heartbeatRoundTrip(const std::string& s) {
  const std::optional<Heartbeat> h = decodeHeartbeat(s);
  if (!h) return;
  const std::string again = encodeHeartbeat(*h);
  const std::optional<Heartbeat> h2 = decodeHeartbeat(again);
  FUZZ_CHECK(h2 && *h2 == *h, "decodeHeartbeat(encodeHeartbeat(h)) == h");
}

void causeRoundTrip(const std::string& s) {
  const std::optional<ErrorInfo> c = decodeCause(s);
  if (!c) return;
  FUZZ_CHECK(!toString(c->kind).empty() && toString(c->kind) != "?", "a decoded kind is known");
  const std::string text = encodeCause(*c);
  const std::optional<ErrorInfo> c2 = decodeCause(text);
  FUZZ_CHECK(c2.has_value(), "an encoded cause decodes");
  FUZZ_CHECK(encodeCause(*c2) == text, "encodeCause(decodeCause(t)) == t for an encoded t");
  (void)Error::format(*c2);  // what every survivor prints
}

// Input after the mode byte: self, world size (1..9), waited-on rank, seq, fingerprint,
// then up to 2 x world heartbeat records separated by '|' (first reading, then second);
// a missing or undecodable record is absent, as Communicator::readHeartbeats leaves it.
void judge(std::string_view in) {
  if (in.size() < 4) return;
  const int world = 1 + static_cast<uint8_t>(in[0]) % 9;
  const int self = static_cast<uint8_t>(in[1]) % world;
  int waitedOn = static_cast<uint8_t>(in[2]) % world;
  if (world > 1 && waitedOn == self) waitedOn = (self + 1) % world;
  const int64_t seq = static_cast<int8_t>(in[3]);
  in.remove_prefix(4);
  const uint32_t fingerprint = static_cast<uint32_t>(in.size()) * 2654435761u;
  std::vector<std::string> records;
  while (!in.empty() && records.size() < static_cast<size_t>(2 * world)) {
    const size_t bar = in.find('|');
    records.emplace_back(in.substr(0, bar));
    in = bar == std::string_view::npos ? std::string_view() : in.substr(bar + 1);
  }
  std::map<int, Heartbeat> first;
  std::map<int, Heartbeat> second;
  for (size_t i = 0; i < records.size(); ++i) {
    const int r = static_cast<int>(i) % world;
    if (r == self) continue;
    if (std::optional<Heartbeat> h = decodeHeartbeat(records[i])) {
      (i < static_cast<size_t>(world) ? first : second)[r] = *h;
    }
  }
  if (world == 1) return;  // a world of one never waits on anybody
  const Verdict v = judgeTimeout(self, world, seq, fingerprint, first, second, waitedOn);
  FUZZ_CHECK(v.culprit >= 0 && v.culprit < world, "the culprit is a rank of this world");
  FUZZ_CHECK(v.culprit != self || v.kind == ErrorKind::Mismatch,
             "a rank blames itself only for running a different collective");
  FUZZ_CHECK(!v.reason.empty(), "a verdict says why");
}

}  // namespace
}  // namespace tccl::failure

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      tccl::failure::heartbeatRoundTrip(rest);
      break;
    case 1:
      tccl::failure::causeRoundTrip(rest);
      break;
    default:
      tccl::failure::judge(rest);
      break;
  }
  return 0;
}
