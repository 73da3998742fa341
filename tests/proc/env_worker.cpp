// A rank for the launcher tests (tests/cli/launch_test.sh): it finds its rank and store
// the way any tccl program does (Communicator::fromEnv), all-reduces rank+1 and checks
// the sum, and prints one line that says what it saw. Options make it misbehave the way
// the launcher must cope with:
//   --count N           elements to all-reduce (default 4096)
//   --fail-rank R       rank R exits at once with --code C (default 3), or is killed by
//                       --signal S instead; the others sleep --sleep seconds (a rank
//                       stuck in a collective)
//   --sleep S           (without --fail-rank) every rank prints "ready" and sleeps S s
//   --on-term report|ignore   SIGTERM prints "got SIGTERM" and exits 0, or is ignored
//   --grandchild        each sleeping rank first starts a copy of this program that
//                       sleeps too (the launcher must stop it with its rank)
//   --marker M          ignored: lets the test find its processes with pgrep
//   --show-key          print a digest of TCCL_AUTH_KEY (equal on every rank of a job)
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/launch_env.hpp"
#include "core/process.hpp"
#include "tccl/tccl.hpp"

extern char** environ;

namespace {

struct Options {
  size_t count = 4096;
  int failRank = -1;
  int code = 3;
  int signal = 0;
  double sleep = 60;
  bool sleepMode = false;
  std::string onTerm;
  bool grandchild = false;
  bool orphan = false;
  bool showKey = false;
};

void onTermReport(int) {
  const char msg[] = "got SIGTERM\n";
  ssize_t n = ::write(STDOUT_FILENO, msg, sizeof msg - 1);
  (void)n;
  ::_exit(0);
}

void sleepFor(double s) {
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(s * 1000)));
}

void startGrandchild(char** argv) {
  std::vector<std::string> args = {tccl::proc::selfExe(), "--orphan"};
  for (char** a = argv + 1; *a != nullptr; ++a) {
    if (std::strcmp(*a, "--marker") == 0 && a[1] != nullptr) {
      args.push_back("--marker");
      args.push_back(a[1]);
    }
  }
  std::vector<char*> p;
  for (auto& s : args) p.push_back(s.data());
  p.push_back(nullptr);
  pid_t pid = -1;
  if (::posix_spawn(&pid, p[0], nullptr, nullptr, p.data(), environ) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--count") {
      o.count = std::stoul(next());
    } else if (a == "--fail-rank") {
      o.failRank = std::stoi(next());
    } else if (a == "--code") {
      o.code = std::stoi(next());
    } else if (a == "--signal") {
      o.signal = std::stoi(next());
    } else if (a == "--sleep") {
      o.sleep = std::stod(next());
      o.sleepMode = true;
    } else if (a == "--on-term") {
      o.onTerm = next();
    } else if (a == "--grandchild") {
      o.grandchild = true;
    } else if (a == "--orphan") {
      o.orphan = true;
    } else if (a == "--marker") {
      next();
    } else if (a == "--show-key") {
      o.showKey = true;
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (o.orphan) {  // the grandchild: outlive nobody on purpose, just sleep
    sleepFor(60);
    return 0;
  }
  if (o.onTerm == "report") ::signal(SIGTERM, onTermReport);
  if (o.onTerm == "ignore") ::signal(SIGTERM, SIG_IGN);

  try {
    const tccl::launch::LaunchEnv env = tccl::launch::resolveLaunchEnv();
    const int r = env.rank;
    if (o.showKey) {
      const char* key = std::getenv("TCCL_AUTH_KEY");
      std::printf("key digits=%zu digest=%zx\n", key ? std::strlen(key) : 0,
                  key ? std::hash<std::string>{}(key) : 0);
    }
    if (o.failRank >= 0 || o.sleepMode) {
      if (r == o.failRank) {
        sleepFor(0.2);  // let the others start sleeping
        std::printf("rank %d failing with %s %d\n", r, o.signal ? "signal" : "exit",
                    o.signal ? o.signal : o.code);
        std::fflush(stdout);
        if (o.signal != 0) ::raise(o.signal);
        return o.code;
      }
      if (o.grandchild) startGrandchild(argv);
      std::printf("rank %d ready\n", r);
      std::fflush(stdout);
      sleepFor(o.sleep);
      return 0;
    }

    tccl::Communicator comm = tccl::Communicator::fromEnv();
    const int n = comm.size();
    std::vector<double> v(o.count, comm.rank() + 1.0);
    comm.allreduce(std::span<double>(v));
    const double expected = n * (n + 1) / 2.0;
    size_t bad = 0;
    for (double x : v) bad += x != expected ? 1 : 0;
    std::printf("rank %d of %d local %d of %d launcher=%s store=%s: allreduce sum=%g %s\n",
                comm.rank(), n, env.localRank, env.localWorldSize,
                std::string(tccl::launch::toString(env.launcher)).c_str(),
                env.storeVariables.c_str(), v.empty() ? expected : v[0], bad == 0 ? "OK" : "WRONG");
    std::fflush(stdout);
    return bad == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "env_worker: %s\n", e.what());
    return 1;
  }
}
