#include "core/failure.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace tccl::failure {
namespace {

// Escapes '\\' and '\n' so every value fits on one "key=value" line (decoding
// splits at the first '=', so values may hold '=').
std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out += s[i] == 'n' ? '\n' : s[i];
    } else {
      out += s[i];
    }
  }
  return out;
}

template <typename T>
bool parseInt(std::string_view s, T* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::optional<ErrorKind> kindFromString(std::string_view s) {
  for (int k = 0; k <= static_cast<int>(ErrorKind::Aborted); ++k) {
    if (toString(static_cast<ErrorKind>(k)) == s) return static_cast<ErrorKind>(k);
  }
  return std::nullopt;
}

}  // namespace

namespace keys {
std::string heartbeat(int rank) { return "hb/" + std::to_string(rank); }
std::string signature(int64_t seq, int rank) {
  return "sig/" + std::to_string(seq) + "/" + std::to_string(rank);
}
std::string lastSignature(int rank) { return "sigmax/" + std::to_string(rank); }
std::string shrinkAlive(int shrink, int rank) {
  return "shrink/" + std::to_string(shrink) + "/alive/" + std::to_string(rank);
}
std::string shrinkCount(int shrink) { return "shrink/" + std::to_string(shrink) + "/count"; }
std::string shrinkMembers(int shrink) { return "shrink/" + std::to_string(shrink) + "/members"; }
std::string stuck(int64_t seq) { return "stuck/" + std::to_string(seq); }
std::string event(int64_t n) { return "ev/" + std::to_string(n); }
}  // namespace keys

bool Event::concerns(uint64_t ofJob, const std::string& ofComm, int rank) const {
  if (job != ofJob || comm != ofComm) return false;
  return kind == Kind::Cause || target < 0 || target == rank;
}

std::string encodeEvent(const Event& e) {
  return std::string(e.kind == Event::Kind::Census ? "census " : "cause ") + std::to_string(e.job) +
         " " + std::to_string(e.target) + " " + e.comm;
}

std::optional<Event> decodeEvent(const std::string& s) {
  Event e;
  std::string_view rest = s;
  auto word = [&]() {
    const size_t sp = rest.find(' ');
    std::string_view w = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    return w;
  };
  const std::string_view kind = word();
  if (kind == "census") {
    e.kind = Event::Kind::Census;
  } else if (kind == "cause") {
    e.kind = Event::Kind::Cause;
  } else {
    return std::nullopt;
  }
  if (!parseInt(word(), &e.job) || !parseInt(word(), &e.target) || e.target < -1 || rest.empty())
    return std::nullopt;
  e.comm = std::string(rest);
  return e;
}

std::string encodeSignature(const Signature& s) {
  return std::to_string(s.fingerprint) + " " + s.text;
}

std::optional<Signature> decodeSignature(const std::string& v) {
  Signature s;
  const size_t sp = v.find(' ');
  if (!parseInt(std::string_view(v).substr(0, sp), &s.fingerprint)) return std::nullopt;
  if (sp != std::string::npos) s.text = v.substr(sp + 1);
  return s;
}

std::string encodeLastSeq(int64_t seq) { return std::to_string(seq); }

std::optional<int64_t> decodeLastSeq(const std::string& s) {
  int64_t seq = 0;
  if (!parseInt(std::string_view(s), &seq)) return std::nullopt;
  return seq;
}

std::string encodeMembers(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : " ") + std::to_string(r);
  return out;
}

std::vector<int> decodeMembers(const std::string& s) {
  std::vector<int> ranks;
  std::istringstream is(s);
  for (int r; is >> r;) ranks.push_back(r);
  return ranks;
}

std::string encodeHeartbeat(const Heartbeat& h) {
  std::ostringstream os;
  os << h.beat << ' ' << h.entered << ' ' << h.completed << ' ' << h.fingerprint << ' '
     << escape(h.signature);
  for (const auto& p : h.recent)
    os << '\n' << p.seq << ' ' << p.fingerprint << ' ' << escape(p.signature);
  return os.str();
}

std::optional<Heartbeat> decodeHeartbeat(const std::string& text) {
  Heartbeat h;
  const size_t nl = text.find('\n');
  const std::string s = text.substr(0, nl);
  std::string_view rest = s;
  auto field = [&](auto* out) {
    size_t sp = rest.find(' ');
    std::string_view f = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
    return parseInt(f, out);
  };
  if (!field(&h.beat) || !field(&h.entered) || !field(&h.completed) || !field(&h.fingerprint))
    return std::nullopt;
  h.signature = unescape(rest);
  std::string_view lines =
      nl == std::string::npos ? std::string_view() : std::string_view(text).substr(nl + 1);
  while (nl != std::string::npos) {
    const size_t end = lines.find('\n');
    rest = lines.substr(0, end);
    Heartbeat::Past p;
    if (!field(&p.seq) || !field(&p.fingerprint)) return std::nullopt;
    p.signature = unescape(rest);
    h.recent.push_back(std::move(p));
    if (end == std::string_view::npos) break;
    lines = lines.substr(end + 1);
  }
  return h;
}

std::string encodeCause(const ErrorInfo& i) {
  std::ostringstream os;
  auto put = [&](const char* key, const auto& value) { os << key << '=' << value << '\n'; };
  auto putStr = [&](const char* key, const std::string& value) {
    if (!value.empty()) os << key << '=' << escape(value) << '\n';
  };
  put("kind", toString(i.kind));
  putStr("message", i.message);
  put("rank", i.rank);
  put("peer", i.peer);
  putStr("peerAddress", i.peerAddress);
  putStr("collective", i.collective);
  put("seq", i.seq);
  putStr("algorithm", i.algorithm);
  putStr("phase", i.phase);
  put("step", i.step);
  put("steps", i.steps);
  put("bytesMoved", i.bytesMoved);
  put("bytesExpected", i.bytesExpected);
  put("elapsedMs", i.elapsedMs);
  put("timeoutMs", i.timeoutMs);
  put("culprit", i.culprit);
  putStr("culpritAddress", i.culpritAddress);
  put("detectedBy", i.detectedBy);
  putStr("localSignature", i.localSignature);
  putStr("remoteSignature", i.remoteSignature);
  return os.str();
}

std::optional<ErrorInfo> decodeCause(const std::string& s) {
  ErrorInfo i;
  bool haveKind = false;
  std::string_view rest = s;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    std::string_view key = line.substr(0, eq);
    std::string_view value = line.substr(eq + 1);
    bool ok = true;
    if (key == "kind") {
      auto k = kindFromString(value);
      ok = k.has_value();
      if (k) i.kind = *k;
      haveKind = ok;
    } else if (key == "message") {
      i.message = unescape(value);
    } else if (key == "rank") {
      ok = parseInt(value, &i.rank);
    } else if (key == "peer") {
      ok = parseInt(value, &i.peer);
    } else if (key == "peerAddress") {
      i.peerAddress = unescape(value);
    } else if (key == "collective") {
      i.collective = unescape(value);
    } else if (key == "seq") {
      ok = parseInt(value, &i.seq);
    } else if (key == "algorithm") {
      i.algorithm = unescape(value);
    } else if (key == "phase") {
      i.phase = unescape(value);
    } else if (key == "step") {
      ok = parseInt(value, &i.step);
    } else if (key == "steps") {
      ok = parseInt(value, &i.steps);
    } else if (key == "bytesMoved") {
      ok = parseInt(value, &i.bytesMoved);
    } else if (key == "bytesExpected") {
      ok = parseInt(value, &i.bytesExpected);
    } else if (key == "elapsedMs") {
      ok = parseInt(value, &i.elapsedMs);
    } else if (key == "timeoutMs") {
      ok = parseInt(value, &i.timeoutMs);
    } else if (key == "culprit") {
      ok = parseInt(value, &i.culprit);
    } else if (key == "culpritAddress") {
      i.culpritAddress = unescape(value);
    } else if (key == "detectedBy") {
      ok = parseInt(value, &i.detectedBy);
    } else if (key == "localSignature") {
      i.localSignature = unescape(value);
    } else if (key == "remoteSignature") {
      i.remoteSignature = unescape(value);
    }
    if (!ok) return std::nullopt;
  }
  if (!haveKind) return std::nullopt;
  return i;
}

int majorityOutlier(const std::map<int, uint32_t>& fingerprints, int worldSize) {
  std::map<uint32_t, std::vector<int>> groups;  // ranks in ascending order per group
  for (const auto& [rank, fp] : fingerprints) groups[fp].push_back(rank);
  if (groups.size() < 2) return -1;
  const std::vector<int>* best = nullptr;
  for (const auto& [fp, ranks] : groups) {
    if (!best || ranks.size() > best->size() ||
        (ranks.size() == best->size() && ranks.front() < best->front()))
      best = &ranks;
  }
  if (worldSize > 0 && static_cast<int>(fingerprints.size()) < worldSize &&
      2 * static_cast<int>(best->size()) <= worldSize)
    return -1;  // too few reports to tell the odd one out
  int outlier = -1;
  for (const auto& [fp, ranks] : groups) {
    if (&ranks == best) continue;
    if (outlier < 0 || ranks.front() < outlier) outlier = ranks.front();
  }
  return outlier;
}

std::optional<uint32_t> fingerprintAt(const Heartbeat& h, int64_t seq) {
  if (seq < 0) return std::nullopt;
  if (h.entered == seq) return h.fingerprint;
  for (const auto& p : h.recent) {
    if (p.seq == seq && p.fingerprint != 0) return p.fingerprint;
  }
  return std::nullopt;
}

bool compareAt(int64_t arrived, int worldSize) {
  if (worldSize < 2 || arrived < 2 || arrived > worldSize) return false;
  return arrived == worldSize || arrived == worldSize - 1 || arrived == worldSize / 2 + 1;
}

int stuckOutlier(int self, int worldSize, int64_t seq, uint32_t own,
                 const std::map<int, Heartbeat>& others) {
  std::map<int, uint32_t> fps{{self, own}};
  for (const auto& [r, h] : others) {
    if (r == self || r < 0 || r >= worldSize) continue;
    if (auto fp = fingerprintAt(h, seq)) fps[r] = *fp;
  }
  return majorityOutlier(fps, worldSize);
}

Verdict judgeTimeout(int self, int worldSize, int64_t seq, uint32_t fingerprint,
                     const std::map<int, Heartbeat>& first, const std::map<int, Heartbeat>& second,
                     int waitedOn) {
  Verdict v;
  // 1. No heartbeat, or one that stood still: the process is stopped or gone.
  for (int r = 0; r < worldSize; ++r) {
    if (r == self) continue;
    auto a = first.find(r);
    auto b = second.find(r);
    if (b == second.end()) {
      v.culprit = r;
      v.reason = "rank " + std::to_string(r) + " never published a heartbeat (not running?)";
      return v;
    }
    if (a != first.end() && b->second.beat <= a->second.beat) {
      v.culprit = r;
      v.reason = "rank " + std::to_string(r) +
                 " is not responding: its heartbeat stopped (process stopped, frozen or gone)";
      return v;
    }
  }
  // 2. Alive but not in this collective: stuck before it (in compute, or elsewhere).
  int behind = -1;
  int64_t least = seq;
  for (const auto& [r, h] : second) {
    if (r == self || r >= worldSize) continue;
    if (h.entered < least) {
      least = h.entered;
      behind = r;
    }
  }
  if (behind >= 0) {
    v.culprit = behind;
    v.reason = "rank " + std::to_string(behind) + " is alive but has not entered collective #" +
               std::to_string(seq) +
               (least >= 0 ? " (the last it entered is #" + std::to_string(least) + ")"
                           : " (it has entered none)");
    return v;
  }
  // 3. Everyone is in it: do they agree on what it is?
  std::map<int, uint32_t> fps;
  fps[self] = fingerprint;
  for (const auto& [r, h] : second) {
    if (r != self && r < worldSize && h.entered == seq) fps[r] = h.fingerprint;
  }
  int outlier = majorityOutlier(fps, worldSize);
  if (outlier >= 0) {
    v.culprit = outlier;
    v.kind = ErrorKind::Mismatch;
    if (outlier == self) {
      v.reason =
          "this rank runs a different collective #" + std::to_string(seq) + " than the majority";
    } else {
      v.reason = "rank " + std::to_string(outlier) + " runs a different collective #" +
                 std::to_string(seq) + ": " + second.at(outlier).signature;
    }
    return v;
  }
  // 4. All alive, all in the same call: the link or the peer's progress.
  v.culprit = waitedOn;
  v.reason = "every rank is alive and inside collective #" + std::to_string(seq) +
             "; no data came from rank " + std::to_string(waitedOn) + " in time";
  return v;
}

}  // namespace tccl::failure
