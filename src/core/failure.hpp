// Failure handling's pure parts: the store keys and records ranks exchange (every one of
// them is named and encoded here, nowhere else), and the rules that turn them into one
// culprit every survivor agrees on. The protocol that uses them is in
// core/failure_protocol.cpp and core/heartbeat.cpp (docs/errors.md).
//
// Store keys (under the communicator's namespace, see docs/errors.md):
//   hb/<rank>              heartbeat record (encodeHeartbeat): written at construction,
//                          when the rank answers a census, and once when it has been
//                          stuck in one collective for a period (no periodic writes)
//   stuck/<seq>            counter: ranks stuck in collective #seq for a period
//   ev/count, ev/<n>       the family's event log, in the family root's namespace only:
//                          ev/count numbers the events, ev/<n> is one (encodeEvent);
//                          every process CHECKs for its next one once a period
//   sig/<seq>/<r>          rank r's signature of its collective #seq (encodeSignature),
//                          written when it fails
//   sigmax/<r>             rank r's last sequence number (encodeLastSeq), written after its
//                          signatures: once it is there, they all are
//   abort/claim            counter: the rank that takes it to 1 decides the culprit
//   abort/cause            the decided cause (encodeCause), read by every other rank
//   shrink/<n>/alive/<r>   rank r arrived at the communicator's n-th shrink
//   shrink/<n>/count       counter of arrivals at shrink n
//   shrink/<n>/members     the agreed members of shrink n (encodeMembers)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tccl/error.hpp"

namespace tccl::failure {

// ---- the keys ----------------------------------------------------------------------------
namespace keys {
std::string heartbeat(int rank);               // hb/<rank>
std::string signature(int64_t seq, int rank);  // sig/<seq>/<rank>
std::string lastSignature(int rank);           // sigmax/<rank>
inline constexpr const char* kClaim = "abort/claim";
inline constexpr const char* kCause = "abort/cause";
std::string shrinkAlive(int shrink, int rank);  // shrink/<n>/alive/<rank>
std::string shrinkCount(int shrink);            // shrink/<n>/count
std::string shrinkMembers(int shrink);          // shrink/<n>/members
std::string stuck(int64_t seq);                 // stuck/<seq>
std::string event(int64_t n);                   // ev/<n> (n from 1)
inline constexpr const char* kEventCount = "ev/count";
}  // namespace keys

// ---- the records -------------------------------------------------------------------------

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

// A rank's signature of one collective (sig/<seq>/<rank>): "fingerprint signature".
struct Signature {
  uint32_t fingerprint = 0;
  std::string text;
  bool operator==(const Signature&) const = default;
};
std::string encodeSignature(const Signature& s);
std::optional<Signature> decodeSignature(const std::string& s);
// The last sequence number whose signature a rank published (sigmax/<rank>), as a decimal.
std::string encodeLastSeq(int64_t seq);
std::optional<int64_t> decodeLastSeq(const std::string& s);
// The members a shrink agreed on, ascending old ranks: "0 1 3".
std::string encodeMembers(const std::vector<int>& ranks);
std::vector<int> decodeMembers(const std::string& s);
// The value of shrink/<n>/alive/<rank>.
inline constexpr const char* kAliveMark = "1";

// One event of a family's log (ev/<n>): "census|cause <job> <target> <communicator>".
// A census asks the ranks of one communicator (all of them, or only `target`) to write a
// fresh heartbeat record now; a cause says that communicator's abort/cause is decided.
struct Event {
  enum class Kind { Census, Cause };
  Kind kind = Kind::Census;
  uint64_t job = 0;  // the job id: a reused namespace's old events concern nobody
  int target = -1;   // census: the one rank asked, -1 for all
  std::string comm;  // the communicator's name (options.name: its store namespace)
  bool operator==(const Event&) const = default;
  // Whether rank `rank` of communicator `comm` in job `job` acts on it.
  bool concerns(uint64_t ofJob, const std::string& ofComm, int rank) const;
};
std::string encodeEvent(const Event& e);
std::optional<Event> decodeEvent(const std::string& s);

// ---- the rules ---------------------------------------------------------------------------

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

// The fingerprint a record gives for collective `seq`: the one it is in, or one of its
// recent ones; none when the record knows nothing of `seq`.
std::optional<uint32_t> fingerprintAt(const Heartbeat& h, int64_t seq);

// Stuck detection: a rank stuck in collective #seq for a period counts itself into
// stuck/<seq>; the rank whose count returns `arrived` compares everyone's records when
// that is one of the few counts worth it (a majority, all but one, all), so that one
// stuck collective costs O(N) record reads in all, not O(N) per rank and period.
bool compareAt(int64_t arrived, int worldSize);

// The stuck comparison: rank `self` (fingerprint `own`) and the others' records; the
// odd one out of collective `seq`, or -1 (majorityOutlier's rules over worldSize).
int stuckOutlier(int self, int worldSize, int64_t seq, uint32_t own,
                 const std::map<int, Heartbeat>& others);

}  // namespace tccl::failure
