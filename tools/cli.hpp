// Shared pieces of the tccl CLI: argument parsing, number formatting, typed fill and
// verification of test vectors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/process.hpp"
#include "tccl/tccl.hpp"

namespace tccl::cli {

// Thrown for bad command-line arguments: main prints "tccl <cmd>: <message>" and
// exits with status 2.
struct UsageError {
  std::string message;
};

// Runs a subcommand's body and maps what it throws to one line on stderr, "tccl <cmd>:
// <message>" (a worker's "_demo-worker" shown as "demo worker"), and to the exit status:
// 2 for a UsageError and for what bad input causes (bad_alloc, length_error,
// invalid_argument, out_of_range), 1 for a tccl::Error and anything else.
int runReported(const std::string& cmd, const std::function<int()>& body);

// Limits the subcommands share (their --help texts name them).
inline constexpr int kMaxLocalWorld = 256;  // ranks one machine runs as processes
inline constexpr int64_t kMaxIters = 1000000;
inline constexpr int64_t kMaxTimeoutMs = int64_t{24} * 3600 * 1000;  // a day
inline constexpr size_t kMaxListItems = 64;                          // --sizes, --caps, --scaling

// "--key value", "--key=value" and bare "--flag". Unknown options, repeated options and
// empty values are errors.
class Args {
 public:
  Args(int argc, char** argv, int first, const std::vector<std::string>& valueOptions,
       const std::vector<std::string>& flags);
  bool flag(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get(const std::string& name, const std::string& dflt) const;
  // Decimal integers only (no spaces, no 0x, no wrap-around).
  int64_t getInt(const std::string& name, int64_t dflt) const;
  // The same, in [lo, hi]: "--world must be in [1, 256] (got 1000)".
  int64_t getInt(const std::string& name, int64_t dflt, int64_t lo, int64_t hi) const;
  // Finite numbers only (no inf, no nan).
  double getDouble(const std::string& name, double dflt) const;
  // Sizes with optional K/M/G suffix (powers of 1024): "64M" = 67108864.
  uint64_t getSize(const std::string& name, uint64_t dflt) const;
  DataType getDataType(const std::string& name, DataType dflt) const;
  ReduceOp getOp(const std::string& name, ReduceOp dflt) const;
  Algorithm getAlgorithm(const std::string& name, Algorithm dflt) const;
  // Every option as given, to pass on to worker processes.
  const std::vector<std::string>& raw() const { return raw_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> raw_;
};

// The world size of a subcommand that runs every rank here as a process: in
// [lo, kMaxLocalWorld], else "... (every rank is a process on this machine)".
int getLocalWorld(const Args& a, const std::string& name, int dflt, int lo);

uint64_t parseSize(const std::string& s);  // throws UsageError (bad text, overflow)
// A decimal integer in [lo, hi]; `what` names it in the error ("--scaling").
int64_t parseInt(const std::string& s, const std::string& what, int64_t lo, int64_t hi);
// "a,b,c" -> {"a", "b", "c"}: no empty items, at most maxItems of them.
std::vector<std::string> splitList(const std::string& option, const std::string& value,
                                   size_t maxItems = kMaxListItems);
// A user's text for an error message: in quotes, control characters escaped (so the
// message stays one line), cut after 64 characters.
std::string quoted(const std::string& s);
// s with control characters escaped (\x0a for a newline): one line, whatever it holds.
std::string oneLine(const std::string& s);
// A comma-separated list of sizes, each read by parseSize: "8,64K,4M".
std::vector<uint64_t> parseSizeList(const std::string& list);
std::string withCommas(uint64_t v);
std::string formatBytes(double bytes);  // "64 MiB", "8 B", up to EiB

// a * b, or UINT64_MAX when that overflows.
uint64_t saturatingMul(uint64_t a, uint64_t b);
uint64_t saturatingAdd(uint64_t a, uint64_t b);

// This machine's memory: physical (sysconf) and available (MemAvailable in /proc/meminfo;
// 0 when unknown).
struct MemoryInfo {
  uint64_t physical = 0;
  uint64_t available = 0;
};
MemoryInfo memoryInfo();
// Refuses (UsageError) a run of `ranks` processes on this machine that would each
// allocate `bytesPerRank` (plus kRankOverheadBytes) when that is more than the memory
// available (physical memory when MemAvailable is unknown, or with onlyPhysical). `what`
// says what the bytes are for: "input and output vectors".
inline constexpr uint64_t kRankOverheadBytes = uint64_t{16} << 20;
void checkMemory(const std::string& command, uint64_t bytesPerRank, int ranks,
                 const std::string& what, bool onlyPhysical = false);

// Element i of a test vector set to `value` (converted to the dtype).
void fill(void* buf, size_t count, DataType dtype, double value);
// The value every element of an all-reduce result must have when rank r held the
// constant r+1, for world n: sum n(n+1)/2, prod n!, min 1, max n, avg sum/n (integer
// avg truncates). Integer prod wraps like the kernels do.
double expectedConstant(int n, DataType dtype, ReduceOp op);
// First index whose value differs from `expected` (floating types: relative tolerance
// 1e-5 for float32, 1e-12 for float64; integers exact).
struct Mismatch {
  size_t index;
  double actual;
};
std::optional<Mismatch> firstMismatch(const void* buf, size_t count, DataType dtype,
                                      double expected);
std::string formatValue(double v, DataType dtype);

// Plural element names for reports: "doubles", "floats", "int32s", "int64s".
std::string elementNoun(DataType dtype);

// Runs `world` local ranks: hosts a TcpStore on 127.0.0.1 (port 0), starts this
// executable as `tccl <workerCommand> <args...>` once per rank with TCCL_RANK,
// TCCL_WORLD_SIZE and TCCL_STORE set, and reaps them before `deadline` (the rest are
// killed once one fails and `grace` has passed). The store stays up for the caller to
// read what the workers published.
struct LocalRun {
  std::unique_ptr<TcpStoreServer> server;
  std::vector<proc::ChildResult> children;
  double seconds = 0;
};
LocalRun runLocalRanks(int world, const std::string& workerCommand,
                       const std::vector<std::string>& args, Deadline deadline,
                       std::chrono::milliseconds grace);

// Runs a program without a shell: argv[0] is looked up in PATH (posix_spawnp), the
// arguments are passed as they are. With `out`, its stdout is read into *out. Returns the
// wait status; throws UsageError naming the program when it cannot be started
// ("rsvg-convert: not found").
int runProgram(const std::vector<std::string>& argv, std::string* out = nullptr);
// "exit 3", "killed by signal 9" for a wait status.
std::string describeWaitStatus(int status);
// A file name for another program's argument list: "./-x.png" for "-x.png", so that it is
// never taken for an option.
std::string pathArgument(const std::string& path);

// When ranks exited with status 2 (a usage error, or out of memory: each said so on its
// own line), throws UsageError "rank 0 (and 3 more) ..." so that the parent exits 2 with
// one line too, not with a report of what the ranks never measured.
void throwIfRanksRefused(const std::vector<proc::ChildResult>& children);
// 0 when every rank of the run succeeded. Otherwise each failed rank is named on stderr
// ("tccl <tool>: rank R <how it ended>") and the result is the exit status of the last
// one named (1 when it had none: killed by a signal).
int exitStatusOf(const LocalRun& run, const std::string& tool);

// Whether this process was started as one rank of a job by a launcher (TCCL_RANK or
// RANK in the environment: tccl launch, torchrun) rather than by a user.
bool rankFromEnvironment();

// key=value records published through the store by workers.
std::string encodeRecord(const std::map<std::string, std::string>& kv);
std::map<std::string, std::string> decodeRecord(const std::string& s);

// Writes all n bytes to fd, retrying short writes and EINTR. False: the fd failed
// (closed, or another error) before all were written.
bool writeAll(int fd, const void* data, size_t n);

}  // namespace tccl::cli
