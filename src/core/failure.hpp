// Failure handling's pure parts: the records ranks exchange through the store, and
// the rules that turn them into one culprit every survivor agrees on.
//
// Store keys (under the communicator's namespace, see docs/errors.md):
//   hb/<rank>     heartbeat record, rewritten every TCCL_HEARTBEAT_MS by each rank
//   sig/<seq>/<r> rank r's signature of its collective #seq, written when it fails
//   abort/claim   counter: the rank that takes it to 1 decides the culprit
//   abort/cause   the decided cause (encodeCause), read by every other rank
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tccl/error.hpp"

namespace tccl::failure {

// What a rank says of itself, as text: "beat entered completed fingerprint sig", then
// one line "seq fingerprint sig" per recent collective (signatures escaped).
struct Heartbeat {
  int64_t beat = 0;          // increases every period while the process runs
  int64_t entered = -1;      // the last collective it entered (-1: none)
  int64_t completed = -1;    // the last collective it completed
  uint32_t fingerprint = 0;  // signature hash of `entered`
  std::string signature;     // readable signature of `entered`
  // The last few collectives it entered (seq, fingerprint, signature), so that a
  // decider comparing collective #k finds this rank's even after it has moved on.
  struct Past {
    int64_t seq = -1;
    uint32_t fingerprint = 0;
    std::string signature;
    bool operator==(const Past&) const = default;
  };
  std::vector<Past> recent;
  bool operator==(const Heartbeat&) const = default;
};
std::string encodeHeartbeat(const Heartbeat& h);
std::optional<Heartbeat> decodeHeartbeat(const std::string& s);

// ErrorInfo as "key=value" lines (values escaped); decode ignores unknown keys.
std::string encodeCause(const ErrorInfo& info);
std::optional<ErrorInfo> decodeCause(const std::string& s);

struct Verdict {
  int culprit = -1;
  ErrorKind kind = ErrorKind::Timeout;
  std::string reason;
};

// A timeout: `first` and `second` are every other rank's heartbeat read twice, some
// periods apart (a missing entry: no record). In order:
//  1. a rank whose beat did not advance is stopped or dead (lowest such rank);
//  2. else a rank that has not entered collective `seq` is stuck before it (the one
//     furthest behind, lowest rank on ties);
//  3. else ranks in `seq` whose signature differs from the majority: a Mismatch;
//  4. else nobody is to blame but the link: the peer this rank waited on.
Verdict judgeTimeout(int self, int worldSize, int64_t seq, uint32_t fingerprint,
                     const std::map<int, Heartbeat>& first, const std::map<int, Heartbeat>& second,
                     int waitedOn);

// A mismatch: the signatures (fingerprint) that ranks report for the same sequence
// number. The culprit is a rank outside the largest group (ties: the group holding
// the lowest rank wins), the lowest such rank; -1 when all agree.
// With worldSize > 0, only a conclusive verdict counts: every rank of the world
// reported, or the largest group is more than half of the world (else -1).
int majorityOutlier(const std::map<int, uint32_t>& fingerprints, int worldSize = 0);

}  // namespace tccl::failure
