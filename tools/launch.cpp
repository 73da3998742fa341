// tccl launch: starts the local ranks of a job, in the manner of torchrun. Node 0's
// launcher hosts the job's TcpStore; every launcher gives its ranks the rank
// environment (TCCL_* and torchrun's names), tags their output lines with the rank,
// forwards SIGINT/SIGTERM, and when a rank fails stops the others and exits with that
// rank's status. docs/launch.md is the user's guide.
//
// Process structure: each rank is forked from the launcher, asks the kernel to SIGKILL it
// when the launcher dies (PR_SET_PDEATHSIG, which survives execve) and then execs CMD. So
// no rank outlives a launcher that was itself SIGKILLed. (Ranks used to start as a
// `tccl _launch-exec` trampoline; loading tccl's libraries cost 35 ms of CPU per rank.) Each rank
// leads its own process group: terminal signals reach the launcher alone, which forwards them once,
// and stopping a rank's group also stops the processes it started.
//
// Multi-node: launchers meet in node 0's store under "tccl_launch/": node 0 publishes the
// job shape (checked by every other node) and the port torch-style programs use; a node
// whose rank fails publishes it, and the other launchers, polling, stop theirs; node 0
// keeps the store up until every node has said it is done (bounded).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <sstream>

#include "auth/auth.hpp"
#include "base/log.hpp"
#include "cli.hpp"
#include "core/process.hpp"
#include "net/iface.hpp"
#include "net/socket.hpp"
#include "subcommands.hpp"

extern char** environ;

namespace tccl::cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::vector<std::string> kValueOptions = {"nproc-per-node", "nnodes",      "node-rank",
                                                "master-addr",    "master-port", "timeout",
                                                "rdzv-timeout",   "grace",       "auth-key-file"};
const std::vector<std::string> kFlags = {"tag-output", "no-tag-output"};

constexpr const char* kKeyPrefix = "tccl_launch/";

struct LaunchConfig {
  int nproc = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;
  bool tag = true;
  double timeoutSec = 0;        // 0: none
  double rdzvTimeoutSec = 300;  // nodes > 0 reaching node 0's store; node 0's exit wait
  double graceSec = 5;          // SIGTERM -> SIGKILL
  std::optional<std::string> authKeyFile;
  std::vector<std::string> command;
};

// "SIGTERM" for 15.
std::string signalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::string s = "killed by " + signalName(sig);
    if (const char* what = strsignal(sig)) s += std::string(" (") + what + ")";
    if (WCOREDUMP(status)) s += ", core dumped";
    return s;
  }
  return "status " + std::to_string(status);
}

// The launcher's exit status for a rank's wait status: its exit code, or 128 + signal
// as a shell reports it.
int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

void say(const std::string& line) {
  const std::string s = "tccl launch: " + oneLine(line) + "\n";
  ssize_t n = ::write(STDERR_FILENO, s.data(), s.size());
  (void)n;
}

// ---- options -----------------------------------------------------------------------

// Seconds, at most kMaxSeconds (30 days: the job's clock arithmetic stays in range).
constexpr double kMaxSeconds = 30.0 * 24 * 3600;

double seconds(const Args& a, const std::string& name, double dflt) {
  const double v = a.getDouble(name, dflt);
  if (!(v >= 0)) throw UsageError{"--" + name + " must not be negative"};
  if (v > kMaxSeconds)
    throw UsageError{"--" + name + " must be at most " +
                     std::to_string(static_cast<int64_t>(kMaxSeconds)) + " s (30 days)"};
  return v;
}

// Raises the soft descriptor limit to what n ranks need here, within the hard limit (the
// ranks inherit it: each holds a socket per peer it talks to). Returns the limit now.
rlim_t raiseFileLimit(rlim_t need) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return RLIM_INFINITY;
  if (lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur < need) {
    const rlim_t old = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max == RLIM_INFINITY ? need : std::min(need, lim.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      TCCL_INFO("tccl launch: raised the open-file limit from " << old << " to " << lim.rlim_cur);
    }
    ::getrlimit(RLIMIT_NOFILE, &lim);
  }
  return lim.rlim_cur;
}

// The ranks the launcher can supervise: one process each (RLIMIT_NPROC); with tagged
// output, two pipes each that it holds open, and on node 0 one store connection each
// (RLIMIT_NOFILE, raised towards its hard limit first).
void checkProcessLimits(const LaunchConfig& c) {
  rlimit lim{};
  const rlim_t files = (c.tag ? 2 : 0) * static_cast<rlim_t>(c.nproc) +
                       (c.nodeRank == 0 ? static_cast<rlim_t>(c.nproc) * c.nnodes : 0) + 64;
  const rlim_t have = raiseFileLimit(std::max<rlim_t>(files, 4096));
  if (have != RLIM_INFINITY && files > have) {
    throw UsageError{"--nproc-per-node " + std::to_string(c.nproc) + " needs about " +
                     std::to_string(files) +
                     " open files in the launcher (output pipes and store connections), more "
                     "than its hard limit allows (ulimit -Hn: " +
                     std::to_string(have) + "): raise it, or use --no-tag-output"};
  }
  if (::getrlimit(RLIMIT_NPROC, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      static_cast<rlim_t>(c.nproc) >= lim.rlim_cur) {
    throw UsageError{"--nproc-per-node " + std::to_string(c.nproc) +
                     " is more processes than this user may run (ulimit -u: " +
                     std::to_string(lim.rlim_cur) + ")"};
  }
}

LaunchConfig parseLaunch(int argc, char** argv, int first) {
  // Options end at "--" or at the first argument that is not an option (torchrun
  // style). Underscores in option names are accepted (--nproc_per_node).
  std::vector<std::string> opts;
  int cmdStart = argc;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      cmdStart = i + 1;
      break;
    }
    if (a.rfind("--", 0) != 0) {
      cmdStart = i;
      break;
    }
    auto eq = a.find('=');
    std::replace(a.begin(), eq == std::string::npos ? a.end() : a.begin() + eq, '_', '-');
    opts.push_back(a);
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (eq == std::string::npos &&
        std::find(kValueOptions.begin(), kValueOptions.end(), name) != kValueOptions.end() &&
        i + 1 < argc) {
      opts.push_back(argv[++i]);
    }
  }
  std::vector<char*> optPtrs;
  for (auto& s : opts) optPtrs.push_back(s.data());
  const Args a(static_cast<int>(optPtrs.size()), optPtrs.data(), 0, kValueOptions, kFlags);

  LaunchConfig c;
  for (int i = cmdStart; i < argc; ++i) c.command.push_back(argv[i]);
  if (c.command.empty()) throw UsageError{"no command to run (tccl launch [options] -- CMD ARGS)"};
  c.nproc = static_cast<int>(a.getInt("nproc-per-node", 1, 1, 4096));
  c.nnodes = static_cast<int>(a.getInt("nnodes", 1, 1, 65536));
  const int64_t nodeRank = a.getInt("node-rank", 0);
  c.nodeRank = nodeRank < 0 || nodeRank >= c.nnodes ? -1 : static_cast<int>(nodeRank);
  if (c.nodeRank < 0) {
    throw UsageError{"--node-rank " + std::to_string(nodeRank) + " is not in [0, " +
                     std::to_string(c.nnodes) + ")"};
  }
  const auto addr = a.get("master-addr");
  const auto port = a.get("master-port");
  if (addr) c.masterAddr = *addr;
  if (c.masterAddr.empty()) throw UsageError{"--master-addr must not be empty"};
  c.masterPort = static_cast<int>(a.getInt("master-port", 0, 0, 65535));
  if (c.nnodes > 1) {
    if (!addr) throw UsageError{"--nnodes > 1 needs --master-addr (node 0's address)"};
    if (!port || c.masterPort == 0)
      throw UsageError{"--nnodes > 1 needs --master-port (the same non-zero port on every node)"};
  }
  if (a.flag("tag-output") && a.flag("no-tag-output"))
    throw UsageError{"--tag-output and --no-tag-output contradict each other"};
  c.tag = !a.flag("no-tag-output");
  c.timeoutSec = seconds(a, "timeout", 0);
  c.rdzvTimeoutSec = seconds(a, "rdzv-timeout", 300);
  c.graceSec = seconds(a, "grace", 5);
  c.authKeyFile = a.get("auth-key-file");
  checkProcessLimits(c);
  return c;
}

// ---- authentication ----------------------------------------------------------------

std::string randomHexKey() {
  unsigned char key[32];
  size_t got = 0;
  while (got < sizeof key) {
    ssize_t n = ::getrandom(key + got, sizeof key - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throwError(ErrorKind::System, "getrandom: " + net::errnoString(errno));
    }
    got += static_cast<size_t>(n);
  }
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned char b : key) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  std::fill(std::begin(key), std::end(key), 0);
  return hex;
}

// Sets up the job key in this process's environment, where the store, the transport
// and the ranks (who inherit it) read it, and checks it (a malformed key fails here, not
// in every rank). Must run before the store is created.
void setUpAuthentication(const LaunchConfig& c) {
  if (c.authKeyFile) {
    ::unsetenv("TCCL_AUTH_KEY");
    ::setenv("TCCL_AUTH_KEY_FILE", c.authKeyFile->c_str(), 1);
  }
  const char* key = std::getenv("TCCL_AUTH_KEY");
  const char* file = std::getenv("TCCL_AUTH_KEY_FILE");
  const bool given = (key != nullptr && *key != '\0') || (file != nullptr && *file != '\0');
  const bool off = auth::optedOut();
  if (!given && c.nnodes == 1 && !off) {
    // One launcher starts every rank: it can make up the secret and hand it down.
    ::setenv("TCCL_AUTH_KEY", randomHexKey().c_str(), 1);
  }
  if (!given && c.nnodes > 1) {
    // Several launchers cannot agree on a secret: a job across hosts needs one given, or
    // an explicit TCCL_AUTH=off. Said here once, before any store or rank starts (they
    // would each refuse the same way).
    bool loopback = false;
    try {
      const auto addrs = net::resolve(c.masterAddr, 0);
      loopback = !addrs.empty() && std::all_of(addrs.begin(), addrs.end(), [](const auto& a) {
        return net::isLoopbackAddress(a.ip());
      });
    } catch (const Error&) {
      // The store reports an unresolvable --master-addr.
    }
    auth::requireKeyToListen(
        false, !loopback,
        "this job of " + std::to_string(c.nnodes) + " nodes (its store and ranks)", c.masterAddr);
  }
  // Without a key (TCCL_AUTH=off, or the loopback) the store server and each rank log one WARN.
  if (auth::KeyPtr k = auth::keyFromEnv()) {
    TCCL_INFO("tccl launch: job key " << k->id() << (given ? "" : " (generated for this job)"));
  }
}

// ---- the ranks ---------------------------------------------------------------------

// One rank's output pipe (stdout or stderr): bytes until a newline, then one tagged line.
struct OutputPipe {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::string partial;
};

struct Rank {
  int rank = 0;
  int localRank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  OutputPipe out, err;
};

constexpr size_t kMaxLine = 64 * 1024;  // longer lines are cut into pieces this long

// Our own stdout gone: the output is dropped, supervising goes on.
void writeAll(int fd, const std::string& s) { (void)cli::writeAll(fd, s.data(), s.size()); }

void emitLines(OutputPipe& p, const std::string& tag, bool final) {
  size_t start = 0;
  while (true) {
    const size_t nl = p.partial.find('\n', start);
    if (nl == std::string::npos) break;
    writeAll(p.target, tag + p.partial.substr(start, nl + 1 - start));
    start = nl + 1;
  }
  p.partial.erase(0, start);
  if (!p.partial.empty() && (final || p.partial.size() >= kMaxLine)) {
    writeAll(p.target, tag + p.partial + "\n");
    p.partial.clear();
  }
}

// Reads what is there; closes the pipe at end of file.
void drain(OutputPipe& p, const std::string& tag) {
  char buf[16384];
  while (p.fd >= 0) {
    ssize_t n = ::read(p.fd, buf, sizeof buf);
    if (n > 0) {
      p.partial.append(buf, static_cast<size_t>(n));
      emitLines(p, tag, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    emitLines(p, tag, true);  // end of file (or an error: nothing more will come)
    ::close(p.fd);
    p.fd = -1;
  }
}

// Self-pipe: signal handlers only write the signal number here; the loop does the rest.
int gSignalPipe[2] = {-1, -1};

void onSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  ssize_t n = ::write(gSignalPipe[1], &b, 1);
  (void)n;
  errno = saved;
}

void installSignalHandlers() {
  if (::pipe2(gSignalPipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throwError(ErrorKind::System, "pipe2: " + net::errnoString(errno));
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the supervisor
}

// The paths execvp would try for cmd, in its order: cmd itself when it has a slash, else
// cmd in every directory of PATH (an empty entry is the current directory).
std::vector<std::string> execCandidates(const std::string& cmd) {
  if (cmd.find('/') != std::string::npos) return {cmd};
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr && *path != '\0' ? path : "/bin:/usr/bin";
  std::vector<std::string> out;
  size_t from = 0;
  while (true) {
    const size_t colon = dirs.find(':', from);
    const std::string dir = dirs.substr(from, colon == std::string::npos ? colon : colon - from);
    out.push_back((dir.empty() ? std::string(".") : dir) + "/" + cmd);
    if (colon == std::string::npos) break;
    from = colon + 1;
  }
  return out;
}

class Launcher {
 public:
  Launcher(const LaunchConfig& c, std::string storeAddr, std::string masterAddr, uint16_t torchPort,
           std::shared_ptr<TcpStore> store)
      : c_(c),
        storeAddr_(std::move(storeAddr)),
        masterAddr_(std::move(masterAddr)),
        torchPort_(torchPort),
        store_(std::move(store)) {}

  ~Launcher() {
    // Whatever happened, nothing of ours outlives us.
    for (Rank& r : ranks_) {
      if (r.running) {
        ::kill(-r.pid, SIGKILL);
        ::kill(r.pid, SIGKILL);
        int st = 0;
        ::waitpid(r.pid, &st, 0);
      }
      if (r.out.fd >= 0) ::close(r.out.fd);
      if (r.err.fd >= 0) ::close(r.err.fd);
    }
  }

  void start() {
    candidates_ = execCandidates(c_.command[0]);
    launcherPid_ = ::getpid();
    ranks_.resize(static_cast<size_t>(c_.nproc));
    for (int i = 0; i < c_.nproc; ++i) {
      Rank& r = ranks_[static_cast<size_t>(i)];
      r.localRank = i;
      r.rank = c_.nodeRank * c_.nproc + i;
      spawnRank(r);
    }
  }

  // Supervises the ranks until all have ended; returns the launcher's exit status.
  int supervise() {
    // No --timeout: a deadline never reached (a time point, not an optional: GCC 12 at -O1
    // under TSan warns, falsely, that the optional's value may be used uninitialised).
    const Clock::time_point jobDeadline =
        c_.timeoutSec > 0 ? Clock::now() + toDuration(c_.timeoutSec) : Clock::time_point::max();
    auto nextStoreCheck = Clock::now();
    std::optional<Clock::time_point> allExited;
    while (true) {
      reap();
      const bool anyRunning =
          std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; });
      if (!anyRunning && !allExited) allExited = Clock::now();
      // Output can outlive the ranks (a process they started holds the pipe): give it a
      // moment, then stop listening.
      const bool pipesOpen = std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) {
        return r.out.fd >= 0 || r.err.fd >= 0;
      });
      if (!anyRunning && (!pipesOpen || Clock::now() - *allExited > 500ms)) break;

      const auto now = Clock::now();
      if (anyRunning && now >= jobDeadline && !stopping_) {
        say("the job passed its --timeout of " + formatSeconds(c_.timeoutSec) + "; stopping " +
            std::to_string(runningCount()) + " rank(s)");
        stop(SIGTERM, 124);
      }
      if (anyRunning && killAt_ && now >= *killAt_) {
        for (Rank& r : ranks_) {
          if (!r.running) continue;
          say("rank " + std::to_string(r.rank) + " did not stop within " +
              formatSeconds(c_.graceSec) + " of " + signalName(stopSignal_) + ": SIGKILL");
          killRank(r, SIGKILL);
        }
        killAt_.reset();
      }
      if (store_ && c_.nnodes > 1 && anyRunning && now >= nextStoreCheck) {
        checkOtherNodes();
        nextStoreCheck = now + 100ms;
      }
      waitForEvents(100ms);
    }
    for (Rank& r : ranks_) {
      for (OutputPipe* p : {&r.out, &r.err}) {
        if (p->fd >= 0) {
          emitLines(*p, tagOf(r), true);
          ::close(p->fd);
          p->fd = -1;
        }
      }
    }
    return exitStatus_;
  }

 private:
  static std::chrono::nanoseconds toDuration(double sec) {
    return std::chrono::nanoseconds(static_cast<int64_t>(sec * 1e9));
  }
  static std::string formatSeconds(double s) {
    std::ostringstream os;
    os << s << " s";
    return os.str();
  }
  std::string tagOf(const Rank& r) const { return "[rank " + std::to_string(r.rank) + "] "; }
  int runningCount() const {
    return static_cast<int>(
        std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
  }

  std::vector<std::pair<std::string, std::string>> rankEnv(const Rank& r) const {
    const int world = c_.nnodes * c_.nproc;
    return {
        {"TCCL_RANK", std::to_string(r.rank)},
        {"TCCL_WORLD_SIZE", std::to_string(world)},
        {"TCCL_LOCAL_RANK", std::to_string(r.localRank)},
        {"TCCL_LOCAL_WORLD_SIZE", std::to_string(c_.nproc)},
        {"TCCL_STORE", storeAddr_},
        // torchrun's names, for programs written for it. MASTER_PORT is a port of its own
        // (tccl's store speaks tccl's protocol, not torch's): torch's rank 0 hosts its
        // store there, as it does under torchrun --standalone.
        {"RANK", std::to_string(r.rank)},
        {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(r.localRank)},
        {"LOCAL_WORLD_SIZE", std::to_string(c_.nproc)},
        {"GROUP_RANK", std::to_string(c_.nodeRank)},
        {"GROUP_WORLD_SIZE", std::to_string(c_.nnodes)},
        {"MASTER_ADDR", masterAddr_},
        {"MASTER_PORT", std::to_string(torchPort_)},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"},
    };
  }

  // The child between fork and exec: only async-signal-safe calls (the launcher has
  // other threads, whose locks the child may have inherited held). It leads its own
  // process group, asks to be SIGKILLed when the launcher dies (PR_SET_PDEATHSIG,
  // which survives execve), and becomes the command, trying the paths execvp would.
  [[noreturn]] void becomeRank(int out, int err, char* const* argv, char* const* envp) const {
    ::setpgid(0, 0);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::sigaction(sig, &dfl, nullptr);
    const int in = ::open("/dev/null", O_RDONLY);
    if (in > 0) {
      ::dup2(in, STDIN_FILENO);
      ::close(in);
    }
    if (out >= 0) ::dup2(out, STDOUT_FILENO);  // dup2 clears close-on-exec there
    if (err >= 0) ::dup2(err, STDERR_FILENO);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcherPid_) ::_exit(1);  // the launcher died before we could ask
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int why = ENOENT;
    for (const std::string& path : candidates_) {  // reading them allocates nothing
      ::execve(path.c_str(), argv, envp);
      if (errno == EACCES) {
        why = EACCES;
      } else if (errno != ENOENT && errno != ENOTDIR) {
        why = errno;
        break;
      }
    }
    char msg[512];
    size_t len = 0;
    auto put = [&](const char* t) {
      for (; *t != '\0' && len < sizeof msg - 1; ++t) msg[len++] = *t;
    };
    put("tccl launch: cannot run '");
    put(argv[0]);
    put("': ");
    const char* text = ::strerrordesc_np(why);
    put(text != nullptr ? text : "error");
    put("\n");
    ssize_t n = ::write(STDERR_FILENO, msg, len);
    (void)n;
    ::_exit(why == ENOENT ? 127 : 126);
  }

  void spawnRank(Rank& r) {
    // The environment: ours, with the rank's variables replacing any of the same name.
    auto extra = rankEnv(r);
    std::vector<std::string> flat;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq == nullptr) continue;
      const std::string name(*e, static_cast<size_t>(eq - *e));
      if (std::none_of(extra.begin(), extra.end(),
                       [&](const auto& kv) { return kv.first == name; }))
        flat.emplace_back(*e);
    }
    for (auto& [k, v] : extra) flat.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : flat) envp.push_back(s.data());
    envp.push_back(nullptr);

    std::vector<char*> args;
    for (const std::string& a : c_.command) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);

    int outPipe[2] = {-1, -1}, errPipe[2] = {-1, -1};
    if (c_.tag) {
      if (::pipe2(outPipe, O_CLOEXEC) != 0 || ::pipe2(errPipe, O_CLOEXEC) != 0)
        throwError(ErrorKind::System, "pipe2: " + net::errnoString(errno));
    }
    // No signal may run our handlers in the child before it has reset them.
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    const pid_t pid = ::fork();
    if (pid == 0) {
      becomeRank(c_.tag ? outPipe[1] : -1, c_.tag ? errPipe[1] : -1, args.data(), envp.data());
    }
    const int forkErr = errno;
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (pid > 0) ::setpgid(pid, pid);  // as the child does: whichever runs first
    if (c_.tag) {
      ::close(outPipe[1]);
      ::close(errPipe[1]);
    }
    if (pid < 0) {
      if (c_.tag) {
        ::close(outPipe[0]);
        ::close(errPipe[0]);
      }
      throwError(ErrorKind::System, "cannot start rank " + std::to_string(r.rank) + " (" +
                                        c_.command[0] + "): fork: " + net::errnoString(forkErr));
    }
    r.pid = pid;
    r.running = true;
    if (c_.tag) {
      r.out = {outPipe[0], STDOUT_FILENO, {}};
      r.err = {errPipe[0], STDERR_FILENO, {}};
      ::fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
      ::fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
    }
  }

  void killRank(Rank& r, int sig) {
    if (!r.running) return;
    ::kill(-r.pid, sig);  // the rank's process group: it and what it started
    ::kill(r.pid, sig);   // in case it left its group
  }

  // Stops every running rank: sig now, SIGKILL after the grace period. status is the
  // launcher's exit status unless one is already set.
  void stop(int sig, int status) {
    if (!stopping_) {
      stopping_ = true;
      stopSignal_ = sig;
      if (exitStatus_ == 0) exitStatus_ = status;
      killAt_ = Clock::now() + toDuration(c_.graceSec);
    }
    for (Rank& r : ranks_) killRank(r, sig);
  }

  void reap() {
    for (Rank& r : ranks_) {
      if (!r.running) continue;
      int st = 0;
      const pid_t got = ::waitpid(r.pid, &st, WNOHANG);
      if (got != r.pid) continue;
      r.running = false;
      r.status = st;
      // The rank is gone; its group may not be (processes it started).
      ::kill(-r.pid, SIGKILL);
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok && !stopping_) {
        const int others = runningCount();
        say("rank " + std::to_string(r.rank) + " (node " + std::to_string(c_.nodeRank) +
            ", local rank " + std::to_string(r.localRank) + ", pid " + std::to_string(r.pid) +
            ") failed: " + describeStatus(st) +
            (others > 0 ? "; stopping the other " + std::to_string(others) +
                              " local rank(s) (SIGTERM, then SIGKILL after " +
                              formatSeconds(c_.graceSec) + ")"
                        : ""));
        publishFailure(r, st);
        stop(SIGTERM, exitCodeOf(st));
      }
    }
  }

  void publishFailure(const Rank& r, int status) {
    if (!store_ || c_.nnodes == 1) return;
    try {
      if (store_->add(std::string(kKeyPrefix) + "failures", 1) == 1) {
        store_->setString(std::string(kKeyPrefix) + "failed",
                          std::to_string(exitCodeOf(status)) + " rank " + std::to_string(r.rank) +
                              " on node " + std::to_string(c_.nodeRank) +
                              " failed: " + describeStatus(status));
      }
    } catch (const Error& e) {
      say(std::string("could not tell the other nodes: ") + e.what());
    }
  }

  // Another node's rank failed, or node 0's store is gone: stop ours.
  void checkOtherNodes() {
    if (stopping_) return;
    try {
      if (!store_->check({std::string(kKeyPrefix) + "failed"})) return;
      const std::string rec = store_->getString(std::string(kKeyPrefix) + "failed");
      const auto space = rec.find(' ');
      int code = std::atoi(rec.substr(0, space).c_str());
      say("stopping node " + std::to_string(c_.nodeRank) + "'s " + std::to_string(runningCount()) +
          " rank(s): " + (space == std::string::npos ? rec : rec.substr(space + 1)));
      stop(SIGTERM, code != 0 ? code : 1);
    } catch (const Error& e) {
      say("lost node 0's store (" + std::string(e.what()) + "); stopping " +
          std::to_string(runningCount()) + " rank(s)");
      stop(SIGTERM, 1);
    }
  }

  void waitForEvents(std::chrono::milliseconds timeout) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, OutputPipe*>> owners;
    fds.push_back({gSignalPipe[0], POLLIN, 0});
    owners.push_back({nullptr, nullptr});
    for (Rank& r : ranks_) {
      for (OutputPipe* p : {&r.out, &r.err}) {
        if (p->fd < 0) continue;
        fds.push_back({p->fd, POLLIN, 0});
        owners.push_back({&r, p});
      }
    }
    int n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (n <= 0) return;
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) drain(*owners[i].second, tagOf(*owners[i].first));
    }
    if (fds[0].revents != 0) {
      unsigned char sigs[64];
      ssize_t got = 0;
      while ((got = ::read(gSignalPipe[0], sigs, sizeof sigs)) > 0) {
        for (ssize_t k = 0; k < got; ++k) onLauncherSignal(sigs[k]);
      }
    }
  }

  void onLauncherSignal(int sig) {
    if (sig == SIGCHLD) return;  // reap() runs next round
    if (runningCount() == 0) return;
    if (forwarded_ == sig) {
      // The same signal again, a second or more later (Ctrl-C twice): the user means it.
      // Sooner is one signal delivered twice: timeout(1), for one, signals its child and
      // then its whole process group, which includes the child.
      if (Clock::now() - forwardedAt_ < 1s) return;
      say("got " + signalName(sig) + " again: SIGKILL to " + std::to_string(runningCount()) +
          " rank(s)");
      for (Rank& r : ranks_) killRank(r, SIGKILL);
      return;
    }
    say("got " + signalName(sig) + ": forwarding it to " + std::to_string(runningCount()) +
        " rank(s) (SIGKILL after " + formatSeconds(c_.graceSec) + ")");
    forwarded_ = sig;
    forwardedAt_ = Clock::now();
    // A signal from the user restarts the grace period of any stop under way; the exit
    // status stays that of a rank that already failed.
    stopping_ = true;
    stopSignal_ = sig;
    if (exitStatus_ == 0) exitStatus_ = 128 + sig;
    killAt_ = Clock::now() + toDuration(c_.graceSec);
    for (Rank& r : ranks_) killRank(r, sig);
  }

  const LaunchConfig& c_;
  std::vector<std::string> candidates_;  // where the command may be, in execvp's order
  pid_t launcherPid_ = -1;
  std::string storeAddr_;
  std::string masterAddr_;
  uint16_t torchPort_;
  std::shared_ptr<TcpStore> store_;
  std::vector<Rank> ranks_;
  bool stopping_ = false;
  int stopSignal_ = SIGTERM;
  int forwarded_ = 0;
  Clock::time_point forwardedAt_;
  int exitStatus_ = 0;
  std::optional<Clock::time_point> killAt_;
};

// A port nobody listens on right now, on host (bound, read, released).
uint16_t freePort(const std::string& host) {
  net::Fd probe = net::listenOn(host, 0);
  return net::localAddress(probe.get()).port();
}

std::string jobShape(const LaunchConfig& c) {
  return "nnodes=" + std::to_string(c.nnodes) + " nproc-per-node=" + std::to_string(c.nproc);
}

// Node 0 keeps the store up until the other nodes are done with it (bounded).
void waitForOtherNodes(TcpStore& store, const LaunchConfig& c, bool failed) {
  const auto limit = failed ? std::chrono::duration<double>(c.graceSec + 10)
                            : std::chrono::duration<double>(c.rdzvTimeoutSec);
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(limit);
  const std::string key = std::string(kKeyPrefix) + "done";
  int64_t done = 0;
  while (Clock::now() < until) {
    done = store.add(key, 0);
    if (done >= c.nnodes) return;
    pollfd pfd{gSignalPipe[0], POLLIN, 0};
    if (::poll(&pfd, 1, 50) > 0) {
      unsigned char sig = 0;
      while (::read(gSignalPipe[0], &sig, 1) == 1) {
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
          say("got " + signalName(sig) + " while " + std::to_string(c.nnodes - done) +
              " other node(s) still use the store; closing it");
          return;
        }
      }
    }
  }
  say("gave up after " + std::to_string(static_cast<int64_t>(limit.count())) + " s waiting for " +
      std::to_string(c.nnodes - done) + " other node(s) to finish; closing the store");
}

}  // namespace

const char* kLaunchUsage =
    "usage: tccl launch --nproc-per-node N [--nnodes M --node-rank K --master-addr A\n"
    "                   --master-port P] [--tag-output|--no-tag-output] [--timeout S]\n"
    "                   [--grace S] [--rdzv-timeout S] [--auth-key-file F] -- CMD ARGS\n"
    "Starts N ranks of CMD on this host (ranks K*N..K*N+N-1 of M*N); node 0 hosts the\n"
    "store on A:P. Each rank gets TCCL_RANK, TCCL_WORLD_SIZE, TCCL_LOCAL_RANK,\n"
    "TCCL_STORE and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.\n"
    "The first rank to fail stops the others; launch exits with its status.\n"
    "Limits: N in [1, 4096] and within ulimit -u (tagged output: 2N + 32 within ulimit -n),\n"
    "M in [1, 65536], P in [0, 65535], seconds at most 30 days; each option once.\n"
    "See docs/launch.md.\n";

int launchMain(int argc, char** argv, int first) {
  for (int i = first; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (argv[i][0] != '-') break;  // the command starts here
    if (!std::strcmp(argv[i], "-h") || !std::strcmp(argv[i], "--help")) {
      std::cout << kLaunchUsage;
      return 0;
    }
  }
  const LaunchConfig c = parseLaunch(argc, argv, first);
  setUpAuthentication(c);

  // The store: node 0 hosts it; every launcher is a client (node 0 of its own server).
  std::unique_ptr<TcpStoreServer> server;
  uint16_t storePort = static_cast<uint16_t>(c.masterPort);
  if (c.nodeRank == 0) {
    try {
      server = std::make_unique<TcpStoreServer>(c.masterAddr, storePort);
    } catch (const Error& e) {
      say("cannot host the store on " + net::joinHostPort(c.masterAddr, storePort) + ": " +
          e.what());
      return 1;
    }
    storePort = server->port();
  }
  const std::string storeAddr = net::joinHostPort(c.masterAddr, storePort);
  std::shared_ptr<TcpStore> store;
  uint16_t torchPort = 0;
  const auto rdzv = std::chrono::milliseconds(static_cast<int64_t>(c.rdzvTimeoutSec * 1000));
  try {
    store = std::make_shared<TcpStore>(c.masterAddr, storePort, rdzv);
    store->setTimeout(rdzv);
    if (c.nodeRank == 0) {
      torchPort = freePort(c.masterAddr);
      store->setString(std::string(kKeyPrefix) + "torch_port", std::to_string(torchPort));
      store->setString(std::string(kKeyPrefix) + "shape", jobShape(c));
    } else {
      const std::string shape = store->getString(std::string(kKeyPrefix) + "shape");
      if (shape != jobShape(c)) {
        say("node " + std::to_string(c.nodeRank) + " was started with " + jobShape(c) +
            " but node 0 with " + shape + "; every node needs the same");
        return 2;
      }
      torchPort = static_cast<uint16_t>(
          std::stoi(store->getString(std::string(kKeyPrefix) + "torch_port")));
    }
    const int64_t claims =
        store->add(std::string(kKeyPrefix) + "node/" + std::to_string(c.nodeRank), 1);
    if (claims > 1) {
      say("another launcher already joined as node " + std::to_string(c.nodeRank) +
          "; give every node its own --node-rank");
      return 2;
    }
  } catch (const Error& e) {
    say("node " + std::to_string(c.nodeRank) + " could not meet node 0's store at " + storeAddr +
        " within " + std::to_string(static_cast<int64_t>(c.rdzvTimeoutSec)) +
        " s (--rdzv-timeout): " + e.what());
    return 1;
  }
  TCCL_INFO("tccl launch: node " << c.nodeRank << "/" << c.nnodes << " starting " << c.nproc
                                 << " rank(s) of " << c.nproc * c.nnodes << "; store "
                                 << storeAddr);

  installSignalHandlers();
  int status = 0;
  {
    Launcher launcher(c, storeAddr, c.masterAddr, torchPort, store);
    try {
      launcher.start();
    } catch (const Error& e) {
      say(e.what());
      return 1;
    }
    status = launcher.supervise();
  }
  if (server) {
    const TcpStoreServer::Stats st = server->stats();
    TCCL_INFO("tccl launch: the store served " << st.requests << " requests on " << st.accepted
                                               << " connections (at most " << st.peakConnections
                                               << " at once)");
  }
  if (c.nnodes > 1) {
    try {
      store->add(std::string(kKeyPrefix) + "done", 1);
      if (c.nodeRank == 0) waitForOtherNodes(*store, c, status != 0);
    } catch (const Error& e) {
      if (c.nodeRank == 0) say(std::string("store: ") + e.what());
      // Nodes > 0: node 0 has already gone; nothing left to tell it.
    }
  }
  return status;
}

}  // namespace tccl::cli
