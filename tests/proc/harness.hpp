// The multi-process test harness: runs N worker processes (real processes over real
// TCP sockets on loopback) under a hard deadline after which every child is SIGKILLed,
// hosting their TcpStore here and collecting the records they publish.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/process.hpp"
#include "net/socket.hpp"
#include "tccl/tccl.hpp"

namespace tccl::testing {

using namespace std::chrono_literals;

struct Job {
  std::vector<proc::ChildResult> children;
  std::map<int, std::string> records;  // rank -> record published by the worker
  double seconds = 0;
};

inline std::string describe(const Job& job) {
  std::ostringstream os;
  for (const auto& c : job.children) {
    os << "rank " << c.index << ": " << c.describe();
    auto it = job.records.find(c.index);
    if (it != job.records.end()) os << " record: " << it->second;
    os << "\n";
  }
  return os.str();
}

struct JobSpec {
  std::string worker = TCCL_PROC_WORKER_PATH;  // the worker executable
  int world = 2;
  int spawn = -1;  // processes to start (default: world)
  std::vector<std::string> args;
  std::chrono::seconds deadline{120};
  proc::EnvList extraEnv;
  bool torchrunEnv = false;
  std::function<void(TcpStore& store)> whileRunning;
};

inline Job runJob(const JobSpec& spec) {
  TcpStoreServer server("127.0.0.1", 0);
  const std::string addr = "127.0.0.1:" + std::to_string(server.port());
  std::vector<std::string> argv = {spec.worker};
  argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  uint16_t masterPort = 0;
  if (spec.torchrunEnv) {
    // A free port for rank 0 to host the store on (bound and released here).
    net::Fd probe = net::listenOn("127.0.0.1", 0);
    masterPort = net::localAddress(probe.get()).port();
  }
  proc::ProcessGroup group;
  const auto start = std::chrono::steady_clock::now();
  group.spawn(spec.spawn < 0 ? spec.world : spec.spawn, argv, [&](int r) {
    proc::EnvList env = spec.extraEnv;
    if (spec.torchrunEnv) {
      env.push_back({"RANK", std::to_string(r)});
      env.push_back({"WORLD_SIZE", std::to_string(spec.world)});
      env.push_back({"MASTER_ADDR", "127.0.0.1"});
      env.push_back({"MASTER_PORT", std::to_string(masterPort)});
      env.push_back({"TCCL_RANK", ""});
      env.push_back({"TCCL_WORLD_SIZE", ""});
      env.push_back({"TCCL_STORE", ""});
    } else {
      env.push_back({"TCCL_RANK", std::to_string(r)});
      env.push_back({"TCCL_WORLD_SIZE", std::to_string(spec.world)});
      env.push_back({"TCCL_STORE", addr});
    }
    return env;
  });
  TcpStore store("127.0.0.1", server.port(), 5s);
  if (spec.whileRunning) spec.whileRunning(store);
  Job job;
  job.children = group.wait(Deadline::after(spec.deadline));
  job.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string scenario = spec.args.empty() ? "" : spec.args.front();
  for (int r = 0; r < spec.world; ++r) {
    const std::string key = "proc/" + scenario + "/" + std::to_string(r);
    if (!spec.torchrunEnv && store.check({key})) job.records[r] = store.getString(key);
  }
  return job;
}

inline void expectAllOk(const Job& job) {
  for (const auto& c : job.children) {
    EXPECT_TRUE(c.ok()) << describe(job);
  }
}

// Parses "error kind=K peer=P seconds=S ..." records.
struct Failure {
  std::string kind;
  int peer = -2;
  double seconds = -1;
  // Filled when the record has them (tests/proc/worker.cpp's describe()).
  std::string phase;
  int step = -2, steps = -2, culprit = -2;
  long long seq = -2, bytesMoved = -2, bytesExpected = -2;
};

inline Failure parseFailure(const std::string& rec) {
  Failure f;
  std::istringstream is(rec);
  std::string tok;
  while (is >> tok) {
    if (tok.rfind("kind=", 0) == 0) f.kind = tok.substr(5);
    if (tok.rfind("peer=", 0) == 0) f.peer = std::stoi(tok.substr(5));
    if (tok.rfind("seconds=", 0) == 0) f.seconds = std::stod(tok.substr(8));
    if (tok.rfind("what=", 0) == 0) break;  // free text from here on
    if (tok.rfind("phase=", 0) == 0) f.phase = tok.substr(6);
    if (tok.rfind("step=", 0) == 0) f.step = std::stoi(tok.substr(5));
    if (tok.rfind("steps=", 0) == 0) f.steps = std::stoi(tok.substr(6));
    if (tok.rfind("seq=", 0) == 0) f.seq = std::stoll(tok.substr(4));
    if (tok.rfind("culprit=", 0) == 0) f.culprit = std::stoi(tok.substr(8));
    if (tok.rfind("bytes_moved=", 0) == 0) f.bytesMoved = std::stoll(tok.substr(12));
    if (tok.rfind("bytes_expected=", 0) == 0) f.bytesExpected = std::stoll(tok.substr(15));
  }
  return f;
}

}  // namespace tccl::testing
