// The real executor over in-memory links: every rank of a world is a thread running
// Executor::run on its own schedule, joined to every other rank by a MemLinkPair with
// random partial reads and writes and a small, random capacity (so that writes block
// and messages arrive in pieces). Shared by the executor tests (executor_test.cpp) and
// the schedule tests that check what schedules compute (allreduce_algos_test.cpp,
// hier_test.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/schedule.hpp"
#include "exec/executor.hpp"
#include "tccl/error.hpp"
#include "tccl/stats.hpp"
#include "tccl/types.hpp"
#include "transport/link.hpp"

namespace tccl::exectest {

// One rank's links, keyed by peer.
class MemLinkSet final : public LinkProvider {
 public:
  Link& link(int peer) override {
    auto it = links_.find(peer);
    if (it == links_.end()) {
      throwError(ErrorKind::InvalidArgument, "no link to rank " + std::to_string(peer));
    }
    return *it->second;
  }
  std::vector<int> connectedPeers() const override {
    std::vector<int> peers;
    for (const auto& [peer, l] : links_) {
      if (l->open()) peers.push_back(peer);
    }
    return peers;
  }
  void add(int peer, std::unique_ptr<Link> l) { links_[peer] = std::move(l); }
  // Destroys every link: the peers read end of file, their writes fail.
  void clear() { links_.clear(); }
  PeerCounters total() const {
    PeerCounters c;
    for (const auto& [peer, l] : links_) c += l->counters().snapshot();
    return c;
  }

 private:
  std::map<int, std::unique_ptr<Link>> links_;
};

struct MeshOptions {
  // Each pair's capacity (bytes per direction) is drawn log-uniformly from this range.
  size_t minCapacity = 1024;
  size_t maxCapacity = 64 * 1024;
  uint64_t seed = 1;  // 0: whole transfers (no partial I/O), capacities maxCapacity
  std::chrono::milliseconds timeout{30000};  // every rank's deadline
};

// A full mesh of in-memory links among n ranks.
inline std::vector<MemLinkSet> makeMesh(int n, const MeshOptions& o) {
  std::mt19937_64 rng(o.seed * 0x2545F4914F6CDD1Dull + 17);
  std::uniform_real_distribution<double> logCap(std::log2(static_cast<double>(o.minCapacity)),
                                                std::log2(static_cast<double>(o.maxCapacity)));
  std::vector<MemLinkSet> sets(static_cast<size_t>(n));
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const size_t cap = o.seed == 0 ? o.maxCapacity
                                     : std::clamp(static_cast<size_t>(std::exp2(logCap(rng))),
                                                  o.minCapacity, o.maxCapacity);
      const uint64_t seed = o.seed == 0 ? 0 : (rng() | 1);
      MemLinkPair p = makeMemLinkPair(a, b, Lane::Collective, cap, seed);
      sets[static_cast<size_t>(a)].add(b, std::move(p.a));
      sets[static_cast<size_t>(b)].add(a, std::move(p.b));
    }
  }
  return sets;
}

// Runs fn(rank, links) for every rank at once, one thread each. A rank that throws
// destroys its links, so that its peers fail (end of file) instead of waiting for it.
// Returns each rank's error text ("" for none).
inline std::vector<std::string> runRanks(std::vector<MemLinkSet>& sets,
                                         const std::function<void(int, MemLinkSet&)>& fn) {
  const int n = static_cast<int>(sets.size());
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      MemLinkSet& links = sets[static_cast<size_t>(r)];
      try {
        fn(r, links);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
        links.clear();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// One rank's buffers, as the communicator would pass them.
struct RankBuffers {
  std::vector<uint8_t> input;
  std::vector<uint8_t> output;
  std::vector<uint8_t> scratch;  // sized by execute() from the schedule
  size_t inputOrigin = 0;
  size_t outputOrigin = 0;
  bool inPlace = false;  // the executor's input is `output` (`input` unused)
};

struct ExecOutcome {
  std::vector<std::string> errors;     // per rank
  std::vector<PeerCounters> counters;  // per rank: the sum over its links
  std::string firstError() const {
    for (size_t r = 0; r < errors.size(); ++r) {
      if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
    }
    return "";
  }
};

// Runs every rank's schedule with the real executor over a fresh mesh.
inline ExecOutcome execute(const std::vector<algo::Schedule>& scheds,
                           std::vector<RankBuffers>& bufs, DataType dtype, ReduceOp op,
                           const MeshOptions& o = {}) {
  const int n = static_cast<int>(scheds.size());
  const size_t elem = dataTypeSize(dtype);
  std::vector<MemLinkSet> sets = makeMesh(n, o);
  const Deadline deadline = Deadline::after(o.timeout);
  ExecOutcome out;
  out.errors = runRanks(sets, [&](int r, MemLinkSet& links) {
    const algo::Schedule& s = scheds[static_cast<size_t>(r)];
    RankBuffers& b = bufs[static_cast<size_t>(r)];
    b.scratch.assign(std::max<size_t>(s.scratchElems * elem, 1), 0x3c);
    ExecContext ctx;
    ctx.input = b.inPlace ? b.output.data() : b.input.data();
    ctx.output = b.output.data();
    ctx.scratch = b.scratch.data();
    ctx.inputOrigin = b.inPlace ? b.outputOrigin : b.inputOrigin;
    ctx.outputOrigin = b.outputOrigin;
    ctx.dtype = dtype;
    ctx.op = op;
    ctx.worldSize = n;
    ctx.rank = r;
    ctx.seq = 7;
    ctx.fingerprint = 0xC0FFEE;
    ctx.collective = "test";
    ctx.seqFull = 7;
    ctx.deadline = deadline;
    ctx.timeoutMs = o.timeout.count();
    const std::vector<int> watch = links.connectedPeers();  // as the communicator passes them
    ctx.watchPeers = watch;
    Executor ex;
    ex.run(s, ctx, links);
  });
  for (const MemLinkSet& s : sets) out.counters.push_back(s.total());
  return out;
}

// The counters every rank must show after a clean run: the schedule's payload bytes and
// messages, plus a 24-byte header per message on the wire.
inline std::string checkCounters(const std::vector<algo::Schedule>& scheds, const ExecOutcome& out,
                                 size_t elem) {
  for (size_t r = 0; r < scheds.size(); ++r) {
    const algo::Schedule& s = scheds[r];
    uint64_t sends = 0, recvs = 0;
    for (const algo::Op& op : s.ops) {
      sends += op.type == algo::OpType::Send;
      recvs += op.type == algo::OpType::Recv;
    }
    const PeerCounters& c = out.counters[r];
    std::ostringstream os;
    os << "rank " << r << " counters: payload sent " << c.payloadSent << " / " << s.bytesSent(elem)
       << ", received " << c.payloadRecv << " / " << s.bytesReceived(elem) << "; messages "
       << c.messagesSent << " / " << sends << ", " << c.messagesRecv << " / " << recvs << "; wire "
       << c.wireSent << ", " << c.wireRecv;
    if (c.payloadSent != s.bytesSent(elem) || c.payloadRecv != s.bytesReceived(elem) ||
        c.messagesSent != sends || c.messagesRecv != recvs ||
        c.wireSent != c.payloadSent + 24 * sends || c.wireRecv != c.payloadRecv + 24 * recvs) {
      return os.str();
    }
  }
  return "";
}

template <typename T>
std::vector<uint8_t> bytesOf(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <typename T>
std::vector<T> valuesOf(const std::vector<uint8_t>& b, size_t count) {
  std::vector<T> v(count);
  if (count > 0) std::memcpy(v.data(), b.data(), count * sizeof(T));
  return v;
}

// ---- all-reduce over exact int64 data -----------------------------------------------

// (r+1)*1000 + i for sum and avg; for max the largest value sits on a different rank
// for each element.
inline int64_t allreduceInput(ReduceOp op, int n, int r, size_t i) {
  if (op == ReduceOp::Max) {
    return (static_cast<int64_t>((static_cast<size_t>(r) + i) % static_cast<size_t>(n)) + 1) *
               1000 +
           static_cast<int64_t>(i);
  }
  return (int64_t{r} + 1) * 1000 + static_cast<int64_t>(i);
}

// The closed form: sum_r (r+1)*1000 + i = 1000 n(n+1)/2 + n i; max n*1000 + i.
inline int64_t allreduceExpected(ReduceOp op, int n, size_t i) {
  if (op == ReduceOp::Max) return int64_t{n} * 1000 + static_cast<int64_t>(i);
  const int64_t sum = 1000 * int64_t{n} * (n + 1) / 2 + int64_t{n} * static_cast<int64_t>(i);
  return op == ReduceOp::Avg ? sum / n : sum;
}

// Runs an all-reduce's schedules (one per rank) over exact int64 data and checks every
// rank's result, input and counters; returns "" or what went wrong. As the
// communicator does: in place, copyInputFirst makes the schedule work from a copy of
// the input; at world 1 the result is a local copy.
inline std::string allreduceInt(const std::vector<algo::Schedule>& scheds, size_t count,
                                ReduceOp op, bool inPlace, bool copyInputFirst,
                                const MeshOptions& o = {}) {
  const int n = static_cast<int>(scheds.size());
  std::vector<RankBuffers> bufs(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> inputs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t>& in = inputs[static_cast<size_t>(r)];
    in.resize(count);
    for (size_t i = 0; i < count; ++i) in[i] = allreduceInput(op, n, r, i);
    RankBuffers& b = bufs[static_cast<size_t>(r)];
    if (inPlace) {
      b.output = bytesOf(in);
      if (copyInputFirst && count > 0 && n > 1) {
        b.input = b.output;  // the communicator's copy
      } else {
        b.inPlace = true;
      }
    } else {
      b.input = bytesOf(in);
      b.output.assign(count * 8, 0x5a);
    }
    if (n == 1 && !inPlace) b.output = b.input;  // the communicator's local copy
  }
  ExecOutcome out = execute(scheds, bufs, DataType::Int64, op, o);
  if (std::string e = out.firstError(); !e.empty()) return e;
  for (int r = 0; r < n; ++r) {
    const RankBuffers& b = bufs[static_cast<size_t>(r)];
    const std::vector<int64_t> got = valuesOf<int64_t>(b.output, count);
    for (size_t i = 0; i < count; ++i) {
      // World 1: the input itself (avg divides by 1).
      const int64_t want = n == 1 ? inputs[0][i] : allreduceExpected(op, n, i);
      if (got[i] != want) {
        std::ostringstream os;
        os << "rank " << r << " element " << i << ": got " << got[i] << ", expected " << want;
        return os.str();
      }
    }
    if (!inPlace && b.input != bytesOf(inputs[static_cast<size_t>(r)])) {
      return "rank " + std::to_string(r) + ": the input was overwritten";
    }
  }
  return checkCounters(scheds, out, 8);
}

// Runs an all-reduce's schedules out of place over `inputs` (the same number of
// elements of dtype on every rank); *outputs gets every rank's result. Returns "" or
// the first rank's error, or a counter that disagrees with the schedule.
inline std::string allreduceBytes(const std::vector<algo::Schedule>& scheds, DataType dtype,
                                  ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                                  std::vector<std::vector<uint8_t>>* outputs,
                                  const MeshOptions& o = {}) {
  std::vector<RankBuffers> bufs(scheds.size());
  for (size_t r = 0; r < scheds.size(); ++r) {
    bufs[r].input = inputs[r];
    bufs[r].output.assign(inputs[r].size(), 0x5a);
  }
  ExecOutcome out = execute(scheds, bufs, dtype, op, o);
  if (std::string e = out.firstError(); !e.empty()) return e;
  outputs->clear();
  for (RankBuffers& b : bufs) outputs->push_back(std::move(b.output));
  return checkCounters(scheds, out, dataTypeSize(dtype));
}

}  // namespace tccl::exectest
