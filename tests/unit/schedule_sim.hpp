// A strict simulator of all-reduce schedules, shared by the schedule tests
// (allreduce_algos_test.cpp, hier_test.cpp): it runs every rank's schedule against
// in-memory per-pair queues, more strictly than the executor needs:
//  - a send is two events, start (its dependency done; the payload is read) and
//    finish; its source range must not change in between (the executor reads the
//    buffer as the socket drains), and in "rendezvous" runs a send finishes only once
//    the receiver has started landing it (no socket buffering: the worst case for
//    deadlocks);
//  - a Copy receive lands in two events too: at the start its destination range is
//    overwritten with garbage (a half-landed payload), at the finish with the payload,
//    which needs the send to have finished;
//  - a Reduce receive lands in staging; its action runs once its dependency is done.
// Events run in random order (seeded): a random subset of the enabled events per round.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "reduce/reduce.hpp"
#include "tccl/types.hpp"

namespace tccl::algo::sim {

enum class Mode { Eager, Rendezvous, Mixed };

class Simulation {
 public:
  // inputs[r]: rank r's input, count elements of dtype.
  Simulation(int n, size_t count, DataType dtype, ReduceOp op,
             const std::vector<std::vector<uint8_t>>& inputs, std::vector<Schedule> scheds,
             bool inPlace, bool copyInputFirst, Mode mode, uint32_t seed)
      : n_(n),
        count_(count),
        dtype_(dtype),
        op_(op),
        elem_(dataTypeSize(dtype)),
        inPlace_(inPlace),
        copyInput_(inPlace && copyInputFirst),
        mode_(mode),
        rng_(seed),
        ranks_(static_cast<size_t>(n)),
        fifos_(static_cast<size_t>(n * n)) {
    for (int r = 0; r < n; ++r) {
      Rank& rk = ranks_[static_cast<size_t>(r)];
      rk.sched = std::move(scheds[static_cast<size_t>(r)]);
      rk.input = inputs[static_cast<size_t>(r)];
      // In place the output is the input; out of place it starts as garbage.
      rk.output = inPlace ? rk.input : std::vector<uint8_t>(count * elem_, 0x5a);
      rk.scratch.assign(rk.sched.scratchElems * elem_, 0x3c);
      rk.done.assign(rk.sched.ops.size(), 0);
      rk.chans.resize(static_cast<size_t>(n));
      for (size_t i = 0; i < rk.sched.ops.size(); ++i) {
        const Op& o = rk.sched.ops[i];
        Chan& c = rk.chans[static_cast<size_t>(o.peer)];
        (o.type == OpType::Send ? c.sends : c.recvs).push_back(i);
      }
      for (Chan& c : rk.chans) c.staging.resize(rk.sched.maxRecvElems() * elem_);
      remaining_ += rk.sched.ops.size();
    }
  }

  std::string run() {
    struct Event {
      int rank;
      int peer;
      int kind;  // 0 send start, 1 send finish, 2 land start, 3 land finish, 4 apply
    };
    std::vector<Event> events;
    while (remaining_ > 0) {
      events.clear();
      for (int r = 0; r < n_; ++r) {
        Rank& rk = ranks_[static_cast<size_t>(r)];
        for (int p = 0; p < n_; ++p) {
          Chan& c = rk.chans[static_cast<size_t>(p)];
          if (c.sendHead < c.sends.size()) {
            if (!c.sending && depDone(rk, c.sends[c.sendHead])) events.push_back({r, p, 0});
            if (c.sending && sendMayFinish(r, p)) events.push_back({r, p, 1});
          }
          if (c.recvHead < c.recvs.size()) {
            std::deque<Message>& q = fifo(p, r);
            if (!c.landing && !c.landed && !q.empty()) events.push_back({r, p, 2});
            if (c.landing && q.front().complete) events.push_back({r, p, 3});
            if (c.landed && depDone(rk, c.recvs[c.recvHead])) events.push_back({r, p, 4});
          }
        }
      }
      if (events.empty()) return "deadlock:" + pending();
      std::shuffle(events.begin(), events.end(), rng_);
      std::uniform_int_distribution<size_t> take(1, events.size());
      events.resize(take(rng_));
      for (const Event& e : events) {
        std::string err;
        switch (e.kind) {
          case 0:
            err = sendStart(e.rank, e.peer);
            break;
          case 1:
            err = sendFinish(e.rank, e.peer);
            break;
          case 2:
            err = landStart(e.rank, e.peer);
            break;
          case 3:
            err = landFinish(e.rank, e.peer);
            break;
          default:
            err = apply(e.rank, e.peer);
            break;
        }
        if (!err.empty()) return err;
      }
    }
    for (int a = 0; a < n_; ++a) {
      for (int b = 0; b < n_; ++b) {
        if (!fifo(a, b).empty()) {
          return "messages left over from " + std::to_string(a) + " to " + std::to_string(b);
        }
      }
    }
    return "";
  }

  const std::vector<uint8_t>& output(int r) const { return ranks_[static_cast<size_t>(r)].output; }
  const std::vector<uint8_t>& input(int r) const { return ranks_[static_cast<size_t>(r)].input; }

 private:
  struct Message {
    uint32_t step;
    Range range;
    std::vector<uint8_t> payload;
    bool complete = false;     // the send finished
    bool landStarted = false;  // the receiver started reading it
    bool rendezvous = false;   // its send may finish only after the land started
  };
  struct Chan {
    std::vector<size_t> sends;
    std::vector<size_t> recvs;
    size_t sendHead = 0;
    size_t recvHead = 0;
    bool sending = false;
    std::vector<uint8_t> snapshot;  // what the active send read
    bool landing = false;
    bool landed = false;
    std::vector<uint8_t> staging;
  };
  struct Rank {
    Schedule sched;
    std::vector<uint8_t> input;  // in place without a copy: unused, `output` is the buffer
    std::vector<uint8_t> output;
    std::vector<uint8_t> scratch;
    std::vector<char> done;
    std::vector<Chan> chans;
  };

  std::deque<Message>& fifo(int from, int to) {
    return fifos_[static_cast<size_t>(from * n_ + to)];
  }

  static bool depDone(const Rank& rk, size_t idx) {
    const int32_t d = rk.sched.ops[idx].dependsOn;
    return d < 0 || rk.done[static_cast<size_t>(d)] != 0;
  }

  // Element `offset` of buffer b (origins 0), or nullptr with `err` set.
  uint8_t* at(Rank& rk, BufferId b, const Range& range, std::string* err) {
    std::vector<uint8_t>* v = nullptr;
    switch (b) {
      case BufferId::Input:
        v = (inPlace_ && !copyInput_) ? &rk.output : &rk.input;
        break;
      case BufferId::Output:
        v = &rk.output;
        break;
      case BufferId::Scratch:
        v = &rk.scratch;
        break;
    }
    if ((range.offset + range.count) * elem_ > v->size()) {
      *err = "range [" + std::to_string(range.offset) + "+" + std::to_string(range.count) +
             ") outside its buffer";
      return nullptr;
    }
    return v->data() + range.offset * elem_;
  }

  bool sendMayFinish(int r, int p) {
    const Message& m = fifo(r, p).back();
    return !m.rendezvous || m.landStarted;
  }

  void complete(Rank& rk, size_t idx) {
    rk.done[idx] = 1;
    --remaining_;
  }

  std::string sendStart(int r, int p) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    Chan& c = rk.chans[static_cast<size_t>(p)];
    const Op& op = rk.sched.ops[c.sends[c.sendHead]];
    std::string err;
    const uint8_t* src = at(rk, op.buffer, op.range, &err);
    if (src == nullptr) return "rank " + std::to_string(r) + " send: " + err;
    c.snapshot.assign(src, src + op.range.count * elem_);
    Message m;
    m.step = op.step;
    m.range = op.range;
    m.payload = c.snapshot;
    m.rendezvous = mode_ == Mode::Rendezvous || (mode_ == Mode::Mixed && rng_() % 2 == 0);
    fifo(r, p).push_back(std::move(m));
    c.sending = true;
    return "";
  }

  std::string sendFinish(int r, int p) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    Chan& c = rk.chans[static_cast<size_t>(p)];
    const size_t idx = c.sends[c.sendHead];
    const Op& op = rk.sched.ops[idx];
    std::string err;
    const uint8_t* src = at(rk, op.buffer, op.range, &err);
    if (std::memcmp(src, c.snapshot.data(), c.snapshot.size()) != 0) {
      std::ostringstream os;
      os << "rank " << r << " op " << idx << ": the source of the send to " << p << " ["
         << op.range.offset << "+" << op.range.count << ") changed while it was being sent";
      return os.str();
    }
    fifo(r, p).back().complete = true;
    c.sending = false;
    c.sendHead++;
    complete(rk, idx);
    return "";
  }

  std::string landStart(int r, int p) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    Chan& c = rk.chans[static_cast<size_t>(p)];
    const size_t idx = c.recvs[c.recvHead];
    const Op& op = rk.sched.ops[idx];
    Message& m = fifo(p, r).front();
    if (m.step != op.step || m.range != op.range) {
      std::ostringstream os;
      os << "rank " << r << " op " << idx << " from " << p << ": got step " << m.step << " ["
         << m.range.offset << "+" << m.range.count << "), expected step " << op.step << " ["
         << op.range.offset << "+" << op.range.count << ")";
      return os.str();
    }
    if (op.action == RecvAction::Copy) {
      // A half-landed payload: whatever reads this range now reads garbage.
      std::string err;
      uint8_t* dst = at(rk, op.dst, op.range, &err);
      if (dst == nullptr) return "rank " + std::to_string(r) + " copy: " + err;
      std::memset(dst, 0xa5, op.range.count * elem_);
    }
    m.landStarted = true;
    c.landing = true;
    return "";
  }

  std::string landFinish(int r, int p) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    Chan& c = rk.chans[static_cast<size_t>(p)];
    const Op& op = rk.sched.ops[c.recvs[c.recvHead]];
    Message m = std::move(fifo(p, r).front());
    fifo(p, r).pop_front();
    std::string err;
    uint8_t* target =
        op.action == RecvAction::Copy ? at(rk, op.dst, op.range, &err) : c.staging.data();
    std::memcpy(target, m.payload.data(), m.payload.size());
    c.landing = false;
    c.landed = true;
    return "";
  }

  std::string apply(int r, int p) {
    Rank& rk = ranks_[static_cast<size_t>(r)];
    Chan& c = rk.chans[static_cast<size_t>(p)];
    const size_t idx = c.recvs[c.recvHead];
    const Op& op = rk.sched.ops[idx];
    std::string err;
    uint8_t* dst = at(rk, op.dst, op.range, &err);
    if (dst == nullptr) return "rank " + std::to_string(r) + " apply: " + err;
    const size_t len = op.range.count;
    if (op.action == RecvAction::Reduce) {
      const uint8_t* operand = at(rk, op.buffer, op.range, &err);
      if (operand == nullptr) return "rank " + std::to_string(r) + " operand: " + err;
      reduce::apply(dst, operand, c.staging.data(), len, dtype_, op_);
    }
    if (op.thenSelf) {
      reduce::apply(dst, dst, at(rk, BufferId::Input, op.range, &err), len, dtype_, op_);
    }
    if (op.finalize && op_ == ReduceOp::Avg) reduce::divide(dst, len, dtype_, n_);
    c.landed = false;
    c.recvHead++;
    complete(rk, idx);
    return "";
  }

  std::string pending() const {
    std::ostringstream os;
    for (int r = 0; r < n_; ++r) {
      const Rank& rk = ranks_[static_cast<size_t>(r)];
      for (int p = 0; p < n_; ++p) {
        const Chan& c = rk.chans[static_cast<size_t>(p)];
        if (c.sendHead < c.sends.size()) {
          os << " rank " << r << " send to " << p << " op " << c.sends[c.sendHead]
             << (c.sending ? " (sending)" : "") << ";";
        }
        if (c.recvHead < c.recvs.size()) {
          os << " rank " << r << " recv from " << p << " op " << c.recvs[c.recvHead]
             << (c.landed    ? " (landed)"
                 : c.landing ? " (landing)"
                             : "")
             << ";";
        }
      }
    }
    return os.str();
  }

  int n_;
  size_t count_;
  DataType dtype_;
  ReduceOp op_;
  size_t elem_;
  bool inPlace_;
  bool copyInput_;
  Mode mode_;
  std::mt19937 rng_;
  std::vector<Rank> ranks_;
  std::vector<std::deque<Message>> fifos_;
  size_t remaining_ = 0;
};

// Exact int64 data: (r+1)*1000 + i for sum and avg; for max the largest value sits on
// a different rank for each element.
inline int64_t inputValue(ReduceOp op, int n, int r, size_t i) {
  if (op == ReduceOp::Max) {
    return (static_cast<int64_t>((static_cast<size_t>(r) + i) % static_cast<size_t>(n)) + 1) *
               1000 +
           static_cast<int64_t>(i);
  }
  return (int64_t{r} + 1) * 1000 + static_cast<int64_t>(i);
}

inline int64_t expectedValue(ReduceOp op, int n, size_t i) {
  if (op == ReduceOp::Max) return int64_t{n} * 1000 + static_cast<int64_t>(i);
  // sum_r (r+1)*1000 + i = 1000 n(n+1)/2 + n i
  const int64_t sum = 1000 * int64_t{n} * (n + 1) / 2 + int64_t{n} * static_cast<int64_t>(i);
  return op == ReduceOp::Avg ? sum / n : sum;
}

inline std::vector<std::vector<uint8_t>> intInputs(ReduceOp op, int n, size_t count) {
  std::vector<std::vector<uint8_t>> in(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = inputValue(op, n, r, i);
    in[static_cast<size_t>(r)].resize(count * 8);
    if (count > 0) std::memcpy(in[static_cast<size_t>(r)].data(), v.data(), count * 8);
  }
  return in;
}

// Runs all ranks' schedules over exact int64 data (intInputs) and checks every rank's
// result; returns "" or what went wrong (the first wrong element). copyInputFirst: in
// place, the schedule works from a copy of the input (as the communicator arranges for
// an algorithm that reads its input late).
inline std::string simulateInt(std::vector<Schedule> scheds, int n, size_t count, ReduceOp op,
                               bool inPlace, bool copyInputFirst, Mode mode, uint32_t seed) {
  const auto inputs = intInputs(op, n, count);
  Simulation sim(n, count, DataType::Int64, op, inputs, std::move(scheds), inPlace, copyInputFirst,
                 mode, seed);
  std::string err = sim.run();
  if (!err.empty()) return err;
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> out(count);
    if (count > 0) std::memcpy(out.data(), sim.output(r).data(), count * 8);
    // World 1 is the communicator's copy (and avg's division by 1), not the schedule's.
    for (size_t i = 0; i < count && n > 1; ++i) {
      const int64_t want = expectedValue(op, n, i);
      if (out[i] != want) {
        std::ostringstream os;
        os << "rank " << r << " element " << i << ": got " << out[i] << ", expected " << want;
        return os.str();
      }
    }
    if (!inPlace && sim.input(r) != inputs[static_cast<size_t>(r)]) {
      return "rank " + std::to_string(r) + ": the input was overwritten";
    }
  }
  return "";
}

// With one segment per range, the longest chain of messages: a receive completes one
// hop after its matching send, an op starts after its dependency. Each op's time by
// fixpoint iteration (the schedules are acyclic).
inline int longestMessageChain(const std::vector<Schedule>& all) {
  const int n = static_cast<int>(all.size());
  std::vector<std::vector<int>> t(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r)
    t[static_cast<size_t>(r)].assign(all[static_cast<size_t>(r)].ops.size(), 0);
  int longest = 0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      const Schedule& s = all[static_cast<size_t>(r)];
      std::vector<int> recvFrom(static_cast<size_t>(n), 0);
      for (size_t i = 0; i < s.ops.size(); ++i) {
        const Op& op = s.ops[i];
        int v =
            op.dependsOn >= 0 ? t[static_cast<size_t>(r)][static_cast<size_t>(op.dependsOn)] : 0;
        if (op.type == OpType::Recv) {
          // The m-th receive from p matches p's m-th send to this rank.
          const int m = recvFrom[static_cast<size_t>(op.peer)]++;
          const Schedule& ps = all[static_cast<size_t>(op.peer)];
          int seen = 0;
          for (size_t j = 0; j < ps.ops.size(); ++j) {
            if (ps.ops[j].type == OpType::Send && ps.ops[j].peer == r && seen++ == m) {
              v = std::max(v, t[static_cast<size_t>(op.peer)][j] + 1);
              break;
            }
          }
        }
        if (v != t[static_cast<size_t>(r)][i]) {
          t[static_cast<size_t>(r)][i] = v;
          changed = true;
        }
        longest = std::max(longest, v);
      }
    }
  }
  return longest;
}

}  // namespace tccl::algo::sim
