// The failure protocol (docs/errors.md, "What happens after an error"): the abort state,
// the claim and the agreed cause, the verdicts that name a culprit, and the survivors'
// agreement of shrink(). Every store key and record it uses is in core/failure.hpp.
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "core/comm_impl.hpp"
#include "transport/wire.hpp"

namespace tccl {

namespace keys = failure::keys;

// ---- the abort state ----------------------------------------------------------------------

void Communicator::Impl::wake() {
  failure.abortFlag.store(true);
  if (failure.wakeFd >= 0) {
    uint64_t one = 1;
    ssize_t n = ::write(failure.wakeFd, &one, sizeof one);
    (void)n;
  }
}

ErrorInfo Communicator::Impl::setAbortCause(const ErrorInfo& info) {
  ErrorInfo stands;
  bool first = false;
  {
    std::lock_guard<std::mutex> lk(failure.abortMu);
    first = !failure.abortCause;
    if (first) failure.abortCause = info;
    failure.hasCause.store(true, std::memory_order_release);
    stands = *failure.abortCause;
  }
  // Point-to-point operations fail with the communicator: pending ones now, later
  // ones at once (the engine tells its peers on the p2p lane).
  if (first) {
    if (P2PRoom* room = p2pRoomIfAny()) room->abort(stands);
  }
  return stands;
}

std::optional<ErrorInfo> Communicator::Impl::currentAbortCause() const {
  std::lock_guard<std::mutex> lk(failure.abortMu);
  return failure.abortCause;
}

void Communicator::Impl::checkUsable() const {
  // Every call passes here: no lock until a cause exists (it is never cleared).
  if (!failure.hasCause.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lk(failure.abortMu);
  if (!failure.abortCause) return;
  ErrorInfo cause = *failure.abortCause;
  nameRanks(cause);  // its ranks are this communicator's, whoever decided it
  ErrorInfo info = cause;
  info.kind = ErrorKind::Aborted;
  info.message = "communicator aborted because of earlier error: " + Error::format(cause);
  info.rank = boot.rank;
  nameRanks(info);
  throwError(std::move(info));
}

// ---- claim and cause ----------------------------------------------------------------------

bool Communicator::Impl::claim(Store& via) {
  try {
    return via.add(keys::kClaim, 1) == 1;
  } catch (const std::exception&) {
    return true;  // no store to agree through: decide alone
  }
}

// Then an event in the family's log: a rank not inside a collective (in compute, say)
// learns of it at its watch's next look, and its next call fails at once.
void Communicator::Impl::publishCause(Store& via, const ErrorInfo& cause) {
  try {
    via.setString(keys::kCause, failure::encodeCause(cause));
  } catch (const std::exception&) {
    return;
  }
  postEvent(failure::Event::Kind::Cause);
}

std::optional<ErrorInfo> Communicator::Impl::awaitCause(std::chrono::milliseconds bound) {
  try {
    boot.store->wait({keys::kCause}, bound);
    return failure::decodeCause(boot.store->getString(keys::kCause));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Communicator::Impl::SigTable Communicator::Impl::awaitSignatures(int64_t lo, int64_t hi,
                                                                 std::chrono::milliseconds bound) {
  Store& store = *boot.store;
  SigTable table;
  std::set<int> done;
  const auto until = Deadline::Clock::now() + bound;
  auto pause = std::chrono::milliseconds(2);
  for (;;) {
    for (int r = 0; r < boot.size; ++r) {
      if (done.count(r)) continue;
      try {
        // sigmax is written after the signatures: once it is there, they all are.
        if (!store.check({keys::lastSignature(r)})) {
          // Not failed (yet): a rank already past #hi lists #lo..#hi in its heartbeat.
          const std::string hk = keys::heartbeat(r);
          if (r == boot.rank || failure.hbPeriod.count() == 0 || !store.check({hk})) continue;
          auto h = failure::decodeHeartbeat(store.getString(hk));
          if (!h || h->entered < hi) continue;
          done.insert(r);
          for (const auto& p : h->recent) {
            if (p.seq >= lo && p.seq <= hi) table[p.seq][r] = {p.fingerprint, p.signature};
          }
          continue;
        }
        done.insert(r);
        for (int64_t q = std::max<int64_t>(lo, 0); q <= hi; ++q) {
          const std::string k = keys::signature(q, r);
          if (!store.check({k})) continue;
          if (auto sig = failure::decodeSignature(store.getString(k))) table[q][r] = *sig;
        }
      } catch (const std::exception&) {
      }
    }
    if (static_cast<int>(done.size()) == boot.size || Deadline::Clock::now() >= until) return table;
    // Most ranks publish within milliseconds of the failure; the stragglers are looked
    // at less and less often (each round costs requests for every rank still missing).
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// ---- deciding the cause -------------------------------------------------------------------

// The rank that claims first decides the cause and publishes it; the others wait
// for it. Every rank so reports the same culprit.
ErrorInfo Communicator::Impl::decideCause(const ErrorInfo& local, const PreparedCall& call,
                                          const Running& what, bool claimed) {
  const std::chrono::milliseconds hbPeriod = failure.hbPeriod;
  const auto period = what.period.count() > 0 ? std::min(hbPeriod, what.period) : hbPeriod;
  const auto callTimeout = call.timeout.value_or(boot.timeout);
  const auto sigWait =
      std::clamp(callTimeout / 4, std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  if (!claimed) {
    if (auto cause = awaitCause(4 * period + sigWait + std::chrono::milliseconds(3000)))
      return *cause;
  }
  ErrorInfo c = local;
  c.rank = boot.rank;
  c.detectedBy = boot.rank;
  c.localSignature.clear();
  switch (local.kind) {
    case ErrorKind::Timeout:
      if (hbPeriod.count() == 0) {
        c.culprit = local.peer;
        break;
      }
      judgeTimeoutCause(c, local, call, what, period);
      break;
    case ErrorKind::Mismatch:
      judgeMismatchCause(c, local, call, what, sigWait);
      break;
    case ErrorKind::Aborted:
      // An abort message reached us before any cause was in the store.
      c.culprit = local.culprit >= 0 ? local.culprit : local.peer;
      break;
    default:
      c.culprit = local.peer;
      if (local.kind == ErrorKind::PeerClosed && local.peer >= 0)
        c.message = "rank " + std::to_string(local.peer) +
                    " closed its connections (the process exited or was killed): " + local.message;
      break;
  }
  if (c.culprit >= 0) {
    c.culpritAddress = c.culprit == boot.rank ? boot.transport->listenAddress()
                                              : boot.transport->publishedAddress(c.culprit);
  }
  publishCause(*boot.store, c);
  return c;
}

// A timeout: every record, then a census (every live rank writes a fresh record within
// one of its watch's periods), then every record again three periods later (a watch of a
// loaded host may be late by a period, and must not be taken for a stopped one). A
// stopped or dead rank's beat does not advance; a rank that never ran has no record.
// (A rank outside any call watches at the communicator's period: with a per-call
// timeout far below the communicator's it may answer too late, as its beat came too
// late before the census; the verdict stays within twice the call's timeout.)
void Communicator::Impl::judgeTimeoutCause(ErrorInfo& c, const ErrorInfo& local,
                                           const PreparedCall& call, const Running& what,
                                           std::chrono::milliseconds period) {
  auto first = readHeartbeats(*boot.store);
  postEvent(failure::Event::Kind::Census);
  std::this_thread::sleep_for(3 * period + std::chrono::milliseconds(50));
  auto second = readHeartbeats(*boot.store);
  auto v = failure::judgeTimeout(boot.rank, boot.size, call.seq, what.fingerprint, first, second,
                                 local.peer);
  c.kind = v.kind;
  c.culprit = v.culprit;
  c.message =
      v.reason + "; this rank waited on rank " + std::to_string(local.peer) + ": " + local.message;
  if (v.kind == ErrorKind::Mismatch) {
    c.localSignature = describe(call.seq, what);
    if (second.count(v.culprit)) c.remoteSignature = second[v.culprit].signature;
  }
}

// A mismatch: the first collective at which the ranks disagree names the odd one out: a
// rank that skipped one disagrees there, even if later numbers line up again.
void Communicator::Impl::judgeMismatchCause(ErrorInfo& c, const ErrorInfo& local,
                                            const PreparedCall& call, const Running& what,
                                            std::chrono::milliseconds sigWait) {
  const int64_t lo = call.seq - static_cast<int64_t>(Failure::kRecent) + 1;
  // A rank that does not fail (blocked elsewhere) publishes no signatures: its record
  // tells what it runs, once it answers this census.
  postEvent(failure::Event::Kind::Census);
  SigTable table = awaitSignatures(lo, call.seq, sigWait);
  std::map<int, failure::Signature> sigs;
  auto fingerprints = [](const std::map<int, failure::Signature>& of) {
    std::map<int, uint32_t> fps;
    for (const auto& [r, sig] : of) fps[r] = sig.fingerprint;
    return fps;
  };
  int outlier = -1;
  for (auto& [q, atQ] : table) {
    outlier = failure::majorityOutlier(fingerprints(atQ), boot.size);
    if (outlier >= 0) {
      sigs = atQ;
      c.seq = q;  // the collective the verdict is about
      break;
    }
  }
  if (outlier < 0) {
    sigs = table[call.seq];
    if (static_cast<int>(sigs.size()) < boot.size && failure.hbPeriod.count() > 0) {
      // A rank that has not failed yet (blocked elsewhere) did not publish: its
      // heartbeat tells what it runs now.
      for (const auto& [r, h] : readHeartbeats(*boot.store)) {
        if (!sigs.count(r) && h.entered == call.seq) sigs[r] = {h.fingerprint, h.signature};
      }
    }
    outlier = failure::majorityOutlier(fingerprints(sigs), boot.size);
  }
  std::map<int, uint32_t> fps = fingerprints(sigs);
  c.culprit = outlier >= 0 ? outlier : local.peer;
  // In the record: what the others called (local) and what the culprit called.
  c.localSignature = describe(call.seq, what);
  for (const auto& [r, sig] : sigs) {
    if (sig.fingerprint != fps[c.culprit]) c.localSignature = sig.text;
  }
  if (sigs.count(c.culprit)) c.remoteSignature = sigs[c.culprit].text;
  if (outlier < 0 && local.message.rfind(kCountsDisagree, 0) == 0) {
    // An uneven collective's counts: every rank ran the same call, and the message
    // names both ranks of the pair that disagree.
    c.message = local.message + " (seen by rank " + std::to_string(boot.rank) + ")";
    return;
  }
  c.message = "rank " + std::to_string(c.culprit) +
              " called a different collective than the others (" +
              (c.remoteSignature.empty() ? "?" : c.remoteSignature) + "); first seen by rank " +
              std::to_string(boot.rank) + ": " + local.message;
}

// ---- failing a call -----------------------------------------------------------------------

void Communicator::Impl::failCall(const Error& e, const PreparedCall& call, const Running& what) {
  const ErrorInfo& local = e.info();
  std::optional<ErrorInfo> known = currentAbortCause();
  failure.abortFlag.store(true);
  // Publish what this rank ran, and claim the decision, before any socket closes: a
  // peer that sees our abort then finds the claim taken and waits for our verdict
  // instead of blaming us.
  const bool claimed = known ? false : publishRanAndClaim();
  abortPeers(local, known, call.seq);
  const ErrorInfo cause = known ? *known : decideCause(local, call, what, claimed);
  ErrorInfo out = asSeenHere(local, cause, call, what);
  nameRanks(out);
  setAbortCause(out);
  throwError(std::move(out));
}

// sig/<seq>/<rank> for each of the last few collectives, then sigmax/<rank>; then the
// claim. Returns whether this rank claimed the decision.
bool Communicator::Impl::publishRanAndClaim() {
  std::vector<std::pair<int64_t, Running>> ran;
  {
    std::lock_guard<std::mutex> lk(failure.hbMu);
    for (const auto& entry : failure.recent) {
      if (entry.second.fingerprint != 0) ran.push_back(entry);
    }
  }
  try {
    int64_t lastSeq = -1;
    for (const auto& [seqNo, r] : ran) {
      boot.store->setString(keys::signature(seqNo, boot.rank),
                            failure::encodeSignature({r.fingerprint, describe(seqNo, r)}));
      lastSeq = std::max(lastSeq, seqNo);
    }
    boot.store->setString(keys::lastSignature(boot.rank), failure::encodeLastSeq(lastSeq));
  } catch (const std::exception&) {
  }
  return claim(*boot.store);
}

// Abort messages on every connection (docs/protocol.md), carrying the culprit if known.
void Communicator::Impl::abortPeers(const ErrorInfo& local, const std::optional<ErrorInfo>& known,
                                    int64_t seq) {
  wire::MessageHeader ah;
  ah.kind = wire::MsgKind::Abort;
  ah.seq = static_cast<uint32_t>(seq);
  int hint = known ? known->culprit
                   : (local.kind == ErrorKind::PeerClosed || local.kind == ErrorKind::Protocol
                          ? local.peer
                          : local.culprit);
  ah.fingerprint = hint >= 0 ? static_cast<uint32_t>(hint) : wire::kNoCulprit;
  ah.step = static_cast<uint32_t>(known ? known->kind : local.kind);
  boot.transport->abortAll(ah);
}

ErrorInfo Communicator::Impl::asSeenHere(const ErrorInfo& local, const ErrorInfo& cause,
                                         const PreparedCall& call, const Running& what) {
  ErrorInfo out = local;  // where this rank was: collective, phase, step, peer, bytes, time
  out.rank = boot.rank;
  out.kind = cause.kind;
  out.message = cause.message;
  out.culprit = cause.culprit;
  out.culpritAddress = cause.culpritAddress;
  if (out.culpritAddress.empty() && out.culprit >= 0 && out.culprit < boot.size) {
    out.culpritAddress = out.culprit == boot.rank ? boot.transport->listenAddress()
                                                  : boot.transport->publishedAddress(out.culprit);
  }
  out.detectedBy = cause.detectedBy;
  out.remoteSignature = cause.remoteSignature;
  out.localSignature.clear();
  if (cause.kind == ErrorKind::Mismatch) {
    out.localSignature = describe(call.seq, what);
    {
      // What this rank ran at the collective the verdict is about.
      std::lock_guard<std::mutex> lk(failure.hbMu);
      const auto& entry =
          failure.recent[static_cast<size_t>(std::max<int64_t>(cause.seq, 0)) % Failure::kRecent];
      if (cause.seq >= 0 && entry.first == cause.seq && entry.second.fingerprint != 0)
        out.localSignature = describe(cause.seq, entry.second);
    }
    // The culprit itself is shown what the others called.
    if (cause.culprit == boot.rank) out.remoteSignature = cause.localSignature;
    if (out.remoteSignature.empty() && cause.culprit >= 0 && cause.seq >= 0)
      out.remoteSignature = culpritSignature(cause);
  }
  if (out.collective.empty()) {
    out.collective = algo::spec(call.kind).name;
    out.seq = call.seq;
  }
  return out;
}

// The decider did not have the culprit's signature; the culprit publishes it when it
// fails, which is about now.
std::string Communicator::Impl::culpritSignature(const ErrorInfo& cause) {
  Store& store = *boot.store;
  const std::string k = keys::signature(cause.seq, cause.culprit);
  const auto until = Deadline::Clock::now() + std::chrono::milliseconds(500);
  std::string sig;
  try {
    while (!store.check({k}) && !store.check({keys::lastSignature(cause.culprit)}) &&
           Deadline::Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (store.check({k})) {
      if (auto s = failure::decodeSignature(store.getString(k))) sig = s->text;
    }
    // It never ran collective #seq: say what it runs (or last ran) instead.
    const std::string hk = keys::heartbeat(cause.culprit);
    if (sig.empty() && store.check({hk})) {
      auto h = failure::decodeHeartbeat(store.getString(hk));
      if (h && !h->signature.empty())
        sig = h->signature + " (its latest; it has no #" + std::to_string(cause.seq) + ")";
    }
  } catch (const std::exception&) {
  }
  return sig;
}

// ---- abort() and shrink() -----------------------------------------------------------------

void Communicator::Impl::abortNow(const std::string& reason) {
  if (currentAbortCause()) return;
  ErrorInfo c;
  c.kind = ErrorKind::Aborted;
  c.rank = boot.rank;
  c.culprit = boot.rank;
  c.detectedBy = boot.rank;
  c.culpritAddress = boot.transport->listenAddress();
  c.message = "rank " + std::to_string(boot.rank) + " aborted the communicator: " + reason;
  if (claim(*boot.store)) publishCause(*boot.store, c);
  setAbortCause(c);
  wake();
  // Not inside a collective: end the connections now (else the executing thread
  // does, when the wake interrupts it).
  std::unique_lock<std::mutex> lk(exec.execMu, std::try_to_lock);
  if (lk) {
    wire::MessageHeader ah;
    ah.kind = wire::MsgKind::Abort;
    ah.fingerprint = static_cast<uint32_t>(boot.rank);
    ah.step = static_cast<uint32_t>(ErrorKind::Aborted);
    boot.transport->abortAll(ah);
  }
}

// Every survivor marks itself alive and counts itself in; the first to arrive closes the
// membership (everyone expected, or whoever came before the deadline) and writes it.
// Returns the members, ascending old ranks.
std::vector<int> Communicator::Impl::agreeOnSurvivors(std::chrono::milliseconds wait) {
  Store& store = *boot.store;
  const int n = failure.shrinks++;
  std::optional<ErrorInfo> cause = currentAbortCause();
  const int dead =
      cause && cause->culprit >= 0 && cause->culprit != boot.rank ? cause->culprit : -1;
  const int expected = boot.size - (dead >= 0 ? 1 : 0);
  store.setString(keys::shrinkAlive(n, boot.rank), failure::kAliveMark);
  const int64_t arrival = store.add(keys::shrinkCount(n), 1);
  if (arrival == 1) {
    const auto until = Deadline::Clock::now() + wait;
    while (store.add(keys::shrinkCount(n), 0) < expected && Deadline::Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::vector<int> members;
    for (int r = 0; r < boot.size; ++r) {
      if (store.check({keys::shrinkAlive(n, r)})) members.push_back(r);
    }
    store.setString(keys::shrinkMembers(n), failure::encodeMembers(members));
  }
  store.wait({keys::shrinkMembers(n)}, wait + std::chrono::seconds(5));
  return failure::decodeMembers(store.getString(keys::shrinkMembers(n)));
}

}  // namespace tccl
