#include "core/process.hpp"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <thread>

#include "net/socket.hpp"
#include "tccl/error.hpp"

extern char** environ;

namespace tccl::proc {

std::string ChildResult::describe() const {
  if (exited) return "exit " + std::to_string(exitCode);
  std::string s = "killed by signal " + std::to_string(signal);
  const char* name = strsignal(signal);
  if (name != nullptr) s += std::string(" (") + name + ")";
  if (killedAtDeadline) s += " at the deadline";
  return s;
}

std::string selfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throwError(ErrorKind::System, "readlink(/proc/self/exe): " + net::errnoString(errno));
  buf[n] = '\0';
  return buf;
}

ProcessGroup::~ProcessGroup() {
  killAll(SIGKILL);
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (!reaped_[i]) {
      int st = 0;
      ::waitpid(pids_[i], &st, 0);
    }
  }
}

void ProcessGroup::killAll(int sig) {
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (!reaped_[i]) ::kill(pids_[i], sig);
  }
}

void ProcessGroup::spawn(int n, const std::vector<std::string>& argv,
                         const std::function<EnvList(int)>& env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (int i = 0; i < n; ++i) {
    // Child environment: ours, with env(i) overriding.
    std::map<std::string, std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
      const char* eq = std::strchr(*e, '=');
      if (eq != nullptr) vars[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
    }
    for (auto& [k, v] : env(i)) vars[k] = v;
    std::vector<std::string> flat;
    for (auto& [k, v] : vars) flat.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : flat) envp.push_back(s.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), envp.data());
    if (rc != 0) {
      killAll(SIGKILL);
      throwError(ErrorKind::System, "cannot start " + argv[0] + ": " + net::errnoString(rc));
    }
    pids_.push_back(pid);
    reaped_.push_back(false);
  }
}

std::vector<ChildResult> ProcessGroup::wait(Deadline deadline, bool killOnFailure,
                                            std::chrono::milliseconds grace) {
  std::vector<ChildResult> results(pids_.size());
  for (size_t i = 0; i < pids_.size(); ++i) {
    results[i].index = static_cast<int>(i);
    results[i].pid = pids_[i];
  }
  size_t left = 0;
  for (bool r : reaped_) left += r ? 0 : 1;
  std::optional<Deadline> killAt;
  std::chrono::microseconds nap(200);
  while (left > 0) {
    bool reapedAny = false;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (reaped_[i]) continue;
      int st = 0;
      pid_t r = ::waitpid(pids_[i], &st, WNOHANG);
      if (r != pids_[i]) continue;
      reaped_[i] = true;
      --left;
      reapedAny = true;
      ChildResult& cr = results[i];
      if (WIFEXITED(st)) {
        cr.exited = true;
        cr.exitCode = WEXITSTATUS(st);
      } else if (WIFSIGNALED(st)) {
        cr.signal = WTERMSIG(st);
      }
      if (killOnFailure && !cr.ok() && !killAt) killAt = Deadline::after(grace);
    }
    if (left == 0) break;
    bool expired = deadline.expired();
    if (expired || (killAt && killAt->expired())) {
      for (size_t i = 0; i < pids_.size(); ++i) {
        if (!reaped_[i]) {
          ::kill(pids_[i], SIGKILL);
          results[i].killedAtDeadline = true;
        }
      }
      for (size_t i = 0; i < pids_.size(); ++i) {
        if (reaped_[i]) continue;
        int st = 0;
        ::waitpid(pids_[i], &st, 0);
        reaped_[i] = true;
        results[i].signal = WIFSIGNALED(st) ? WTERMSIG(st) : SIGKILL;
      }
      break;
    }
    if (!reapedAny) {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(20000));
    }
  }
  return results;
}

}  // namespace tccl::proc
