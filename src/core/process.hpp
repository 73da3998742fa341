// Spawning and reaping local worker processes, with a hard deadline: used by the CLI
// (demo, bench) and by the multi-process tests. Not part of the public API.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tccl/types.hpp"

namespace tccl::proc {

struct ChildResult {
  int index = -1;  // 0..n-1, the order of spawning (the rank)
  pid_t pid = -1;
  bool exited = false;  // exited normally (exitCode valid)
  int exitCode = -1;
  int signal = 0;  // the signal that ended it, if any
  bool killedAtDeadline = false;
  bool ok() const { return exited && exitCode == 0; }
  std::string describe() const;  // "exit 0", "killed by signal 9 (deadline)", ...
};

using EnvList = std::vector<std::pair<std::string, std::string>>;

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup();  // SIGKILLs and reaps anything still running
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts n processes running argv (argv[0] is the program path); child i gets this
  // process's environment plus env(i). Throws SystemError if a spawn fails (the
  // processes already started are killed).
  void spawn(int n, const std::vector<std::string>& argv, const std::function<EnvList(int)>& env);

  // Reaps children until all have exited or the deadline passes; then SIGKILLs the
  // rest. If killOnFailure, the first child to fail gets the others SIGKILLed too
  // (after `grace` for them to finish on their own).
  std::vector<ChildResult> wait(Deadline deadline, bool killOnFailure = false,
                                std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  void killAll(int sig = 9);
  const std::vector<pid_t>& pids() const { return pids_; }

 private:
  std::vector<pid_t> pids_;
  std::vector<bool> reaped_;
};

// Path of the running executable (/proc/self/exe).
std::string selfExe();

}  // namespace tccl::proc
