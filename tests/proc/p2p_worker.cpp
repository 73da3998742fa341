// The point-to-point worker of tests/proc/p2p_test.cpp: builds a Communicator from the
// environment, runs one scenario, and publishes "proc/<scenario>/<rank>" in the store:
// "ok ..." or "error kind=K peer=P seconds=S tag=T msg=...". Exit status 0 means every
// check of this rank passed.
//
// Scenarios (argv[1]; sizes in bytes):
//   exchange B        every rank sendAsync B bytes to the right (tag 1) and recvAsync from
//                     the left, then waits: exact data, exact payload counts.
//   exchange-rev B    the same, receives posted before sends.
//   blocking-later B  rank 0 send()s B bytes (blocking) to rank 1, which recv()s only after
//                     500 ms: the send completes once the receive is posted.
//   tags              rank 0 sends A (tag 1) then B (tag 2) to rank 1, which receives
//                     tag 2 first: each lands in the right buffer.
//   anysource B       ranks 1..N-1 send B bytes to rank 0 with tag = rank; rank 0 posts
//                     N-1 receives from any rank with any tag: each names its sender.
//   group B           a ring in one group: groupStart, send right, recv left (blocking
//                     forms), groupEnd.
//   many K            every rank has K 8-byte messages in flight to the right and K from
//                     the left (tags 0..4 cycling), posted in opposite orders.
//   noreceiver B      rank 0 sends B bytes to rank 1 with a 1 s timeout; rank 1 never posts
//                     a receive (it stays alive 3 s): rank 0 fails with Timeout naming
//                     rank 1 and the tag.
//   withcollective B  p2p in flight while async and blocking all-reduces run.
//   sharedcore K      world 2: both ranks pin themselves to one CPU for a barrier, restore
//                     their affinity, then ping-pong K 8-byte messages (blocking calls;
//                     run with a long TCCL_SPIN_US so that nobody sleeps). Each notes its
//                     CPU after every round trip and, every 32, the machine's runnable
//                     tasks (/proc/loadavg); rank 0 records "ok same=S of=W busy=B": of
//                     the W round trips from K/5 on, S ended with both ranks on one CPU;
//                     B = 1 if more tasks than CPUs were runnable in over half the
//                     samples of either rank (a heartbeat or a store request is brief).
//                     "ok skip" where the affinity mask has one CPU.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tccl/tccl.hpp"

using namespace tccl;
using namespace std::chrono_literals;

namespace {

int gRank = -1;
std::string gScenario;
std::shared_ptr<Store> gStore;

void publish(const std::string& rec) {
  if (gStore) gStore->setString("proc/" + gScenario + "/" + std::to_string(gRank), rec);
}

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "[p2p worker rank " << gRank << "] CHECK FAILED: " << msg << std::endl;
  publish("fail " + msg);
  std::exit(1);
}

void check(bool ok, const std::string& what) {
  if (!ok) die(what);
}

// Byte i of what rank `from` sends rank `to` with `tag`: depends on all three and on i
// (a chunk at the wrong offset, or another message's bytes, is caught).
uint8_t pattern(int from, int to, int tag, size_t i) {
  return static_cast<uint8_t>((i * 131u) ^ (static_cast<unsigned>(from) * 17u) ^
                              (static_cast<unsigned>(to) * 5u) ^ (static_cast<unsigned>(tag) * 3u) ^
                              (i >> 9));
}

std::vector<uint8_t> message(int from, int to, int tag, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(from, to, tag, i);
  return v;
}

void expectMessage(const std::vector<uint8_t>& got, int from, int to, int tag,
                   const std::string& what) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != pattern(from, to, tag, i)) {
      die(what + ": first wrong byte at index " + std::to_string(i) + " of " +
          std::to_string(got.size()) + " (got " + std::to_string(got[i]) + ", want " +
          std::to_string(pattern(from, to, tag, i)) + ")");
    }
  }
}

// The fourth field of /proc/loadavg: runnable tasks on the machine (-1 if unreadable).
long runnableTasks() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c, d;
  if (!(f >> a >> b >> c >> d)) return -1;
  return std::stol(d.substr(0, d.find('/')));
}

size_t arg(int argc, char** argv, int i) {
  check(argc > i, "missing argument");
  return static_cast<size_t>(std::stoull(argv[i]));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  gScenario = argv[1];
  try {
    Communicator comm = Communicator::fromEnv();
    gRank = comm.rank();
    gStore = comm.store();
    const int n = comm.size(), r = comm.rank();
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    std::ostringstream rec;
    rec << "ok";
    if (gScenario == "exchange" || gScenario == "exchange-rev") {
      const size_t b = arg(argc, argv, 2);
      auto out = message(r, right, 1, b);
      std::vector<uint8_t> in(b, 0xA5);
      WorkPtr s, v;
      if (gScenario == "exchange") {
        s = comm.sendAsync(out.data(), b, DataType::UInt8, right, 1);
        v = comm.recvAsync(in.data(), b, DataType::UInt8, left, 1);
      } else {
        v = comm.recvAsync(in.data(), b, DataType::UInt8, left, 1);
        s = comm.sendAsync(out.data(), b, DataType::UInt8, right, 1);
      }
      s->wait();
      v->wait();
      expectMessage(in, left, r, 1, "exchange");
      check(v->source() == left && v->tag() == 1, "the receive names its sender and tag");
      check(s->stats().traffic.total().payloadSent == b, "send payload bytes");
      // docs/protocol.md: up to TCCL_P2P_EAGER_BYTES (64 KiB) one Eager message (the
      // pool's credit is whole here); more, an Rts and then Chunks of
      // TCCL_P2P_CHUNK_BYTES (512 KiB), the last one shorter.
      const char* chunkEnv = std::getenv("TCCL_P2P_CHUNK_BYTES");
      const size_t chunk = chunkEnv ? std::stoull(chunkEnv) : 512 * 1024;
      const size_t messages = b <= 64 * 1024 ? 1 : 1 + (b + chunk - 1) / chunk;
      check(s->stats().traffic.total().messagesSent == messages,
            "send messages: " + std::to_string(s->stats().traffic.total().messagesSent) +
                ", expected " + std::to_string(messages));
      check(s->stats().traffic.total().wireSent == b + 24 * messages, "send wire bytes");
      check(v->stats().traffic.total().payloadRecv == b, "receive payload bytes");
      check(v->stats().bytes == b, "receive length");
      rec << " seconds=" << v->stats().seconds;
    } else if (gScenario == "blocking-later") {
      const size_t b = arg(argc, argv, 2);
      if (r == 0) {
        auto out = message(0, 1, 4, b);
        const auto t0 = std::chrono::steady_clock::now();
        comm.send(out.data(), b, DataType::UInt8, 1, 4);
        rec << " seconds="
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } else if (r == 1) {
        std::this_thread::sleep_for(500ms);
        std::vector<uint8_t> in(b);
        RecvStatus st = comm.recv(in.data(), b, DataType::UInt8, 0, 4);
        check(st.source == 0 && st.tag == 4 && st.count == b, "status of the blocking recv");
        expectMessage(in, 0, 1, 4, "blocking-later");
      }
    } else if (gScenario == "tags") {
      const size_t a = 3000, b = 200000;
      if (r == 0) {
        auto ma = message(0, 1, 1, a), mb = message(0, 1, 2, b);
        comm.send(ma.data(), a, DataType::UInt8, 1, 1);
        comm.send(mb.data(), b, DataType::UInt8, 1, 2);
      } else if (r == 1) {
        std::vector<uint8_t> ga(a), gb(b);
        RecvStatus s2 = comm.recv(gb.data(), b, DataType::UInt8, 0, 2);
        RecvStatus s1 = comm.recv(ga.data(), a, DataType::UInt8, 0, 1);
        check(s2.tag == 2 && s2.count == b && s1.tag == 1 && s1.count == a, "statuses");
        expectMessage(gb, 0, 1, 2, "tag 2");
        expectMessage(ga, 0, 1, 1, "tag 1");
      }
    } else if (gScenario == "anysource") {
      const size_t b = arg(argc, argv, 2);
      if (r != 0) {
        auto out = message(r, 0, r, b);
        comm.send(out.data(), b, DataType::UInt8, 0, r);
      } else {
        std::vector<int> seen;
        for (int i = 1; i < n; ++i) {
          std::vector<uint8_t> in(b);
          RecvStatus st = comm.recv(in.data(), b, DataType::UInt8, kAnySource, kAnyTag);
          check(st.source >= 1 && st.source < n && st.tag == st.source, "any-source status");
          expectMessage(in, st.source, 0, st.source, "any-source message");
          seen.push_back(st.source);
        }
        std::sort(seen.begin(), seen.end());
        for (int i = 1; i < n; ++i)
          check(seen[static_cast<size_t>(i - 1)] == i, "every sender once");
        rec << " sources=" << seen.size();
      }
    } else if (gScenario == "group") {
      const size_t b = arg(argc, argv, 2);
      auto out = message(r, right, 7, b);
      std::vector<uint8_t> in(b);
      comm.groupStart();
      comm.send(out.data(), b, DataType::UInt8, right, 7);
      comm.recv(in.data(), b, DataType::UInt8, left, 7);
      comm.groupEnd();
      expectMessage(in, left, r, 7, "group ring");
    } else if (gScenario == "many") {
      const size_t k = arg(argc, argv, 2);
      std::vector<uint64_t> out(k), in(k, 0);
      std::vector<WorkPtr> works;
      for (size_t i = 0; i < k; ++i) out[i] = (uint64_t(r) << 40) | (i * 977 + 1);
      // Receives in reverse order of tag groups on odd ranks: matching is per tag.
      auto postRecvs = [&] {
        for (size_t i = 0; i < k; ++i)
          works.push_back(
              comm.recvAsync(&in[i], 1, DataType::Int64, left, static_cast<int>(i % 5)));
      };
      auto postSends = [&] {
        for (size_t i = 0; i < k; ++i)
          works.push_back(
              comm.sendAsync(&out[i], 1, DataType::Int64, right, static_cast<int>(i % 5)));
      };
      if (r % 2) {
        postRecvs();
        postSends();
      } else {
        postSends();
        postRecvs();
      }
      for (auto& w : works) w->wait();
      for (size_t i = 0; i < k; ++i) {
        check(in[i] == ((uint64_t(left) << 40) | (i * 977 + 1)),
              "message " + std::to_string(i) + " out of order or lost");
      }
    } else if (gScenario == "noreceiver") {
      const size_t b = arg(argc, argv, 2);
      if (r == 0) {
        auto out = message(0, 1, 9, b);
        CollectiveOptions o;
        o.timeout = 1000ms;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          comm.send(out.data(), b, DataType::UInt8, 1, 9, o);
          die("the send to a rank that never receives completed");
        } catch (const Error& e) {
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::string msg = e.what();
          for (char& c : msg) {
            if (c == ' ') c = '_';
          }
          rec.str("");
          rec << "error kind=" << toString(e.kind()) << " peer=" << e.peer() << " seconds=" << secs
              << " msg=" << msg;
        }
      } else if (r == 1) {
        std::this_thread::sleep_for(3000ms);  // alive, heartbeating, never receiving
      }
    } else if (gScenario == "withcollective") {
      const size_t b = arg(argc, argv, 2);
      auto out = message(r, right, 3, b);
      std::vector<uint8_t> in(b);
      std::vector<float> x(100000, 1.0f), y(1000, 2.0f);
      WorkPtr v = comm.recvAsync(in.data(), b, DataType::UInt8, left, 3);
      WorkPtr a = comm.allreduceAsync(x.data(), x.size(), DataType::Float32, ReduceOp::Sum);
      comm.allreduce(y.data(), y.size(), DataType::Float32, ReduceOp::Sum);  // waits its turn
      WorkPtr s = comm.sendAsync(out.data(), b, DataType::UInt8, right, 3);
      a->wait();
      s->wait();
      v->wait();
      expectMessage(in, left, r, 3, "p2p beside collectives");
      check(x[0] == float(n) && x.back() == float(n), "async all-reduce result");
      check(y[0] == 2.0f * float(n), "blocking all-reduce result");
    } else if (gScenario == "sharedcore") {
      const size_t k = arg(argc, argv, 2);
      check(n == 2, "sharedcore needs a world of 2");
      cpu_set_t mask;
      check(sched_getaffinity(0, sizeof mask, &mask) == 0, "sched_getaffinity");
      if (CPU_COUNT(&mask) < 2) {
        rec << " skip";
      } else {
        int first = 0;
        while (!CPU_ISSET(first, &mask)) ++first;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        check(sched_setaffinity(0, sizeof one, &one) == 0, "pin to one CPU");
        comm.barrier();  // both ranks now run on `first`
        check(sched_setaffinity(0, sizeof mask, &mask) == 0, "restore the affinity");
        std::vector<int32_t> cpu(k), peerCpu(k);
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        size_t samples = 0, over = 0;
        int64_t token = 0;
        for (size_t i = 0; i < k; ++i) {
          if (r == 0) {
            ++token;
            comm.send(&token, 1, DataType::Int64, 1, 5);
            comm.recv(&token, 1, DataType::Int64, 1, 5);
          } else {
            comm.recv(&token, 1, DataType::Int64, 0, 5);
            ++token;
            comm.send(&token, 1, DataType::Int64, 0, 5);
          }
          cpu[i] = static_cast<int32_t>(sched_getcpu());
          if (i % 32 == 0) {
            ++samples;
            if (runnableTasks() > cpus) ++over;
          }
        }
        check(token == static_cast<int64_t>(2 * k), "ping-pong tokens");
        const bool busy = 2 * over > samples;
        int32_t peerBusy = busy ? 1 : 0;
        if (r == 1) {
          comm.send(cpu.data(), k, DataType::Int32, 0, 6);
          comm.send(&peerBusy, 1, DataType::Int32, 0, 7);
        } else {
          comm.recv(peerCpu.data(), k, DataType::Int32, 1, 6);
          comm.recv(&peerBusy, 1, DataType::Int32, 1, 7);
          size_t same = 0;
          for (size_t i = k / 5; i < k; ++i) same += cpu[i] == peerCpu[i] ? 1 : 0;
          rec << " same=" << same << " of=" << (k - k / 5)
              << " busy=" << ((busy || peerBusy != 0) ? 1 : 0);
        }
      }
    } else {
      die("unknown scenario " + gScenario);
    }
    publish(rec.str());
    // Nobody leaves while a peer may still be reading from it.
    comm.barrier();
  } catch (const Error& e) {
    std::cerr << "[p2p worker rank " << gRank << "] " << e.what() << std::endl;
    publish(std::string("error kind=") + std::string(toString(e.kind())) +
            " peer=" + std::to_string(e.peer()));
    return 1;
  }
  return 0;
}
