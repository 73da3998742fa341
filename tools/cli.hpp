// Shared pieces of the tccl CLI: argument parsing, number formatting, typed fill and
// verification of test vectors.
#pragma once

#include <cstdint>
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

// "--key value", "--key=value" and bare "--flag". Unknown options are errors.
class Args {
 public:
  Args(int argc, char** argv, int first, const std::vector<std::string>& valueOptions,
       const std::vector<std::string>& flags);
  bool flag(const std::string& name) const;
  std::optional<std::string> get(const std::string& name) const;
  std::string get(const std::string& name, const std::string& dflt) const;
  int64_t getInt(const std::string& name, int64_t dflt) const;
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

uint64_t parseSize(const std::string& s);  // throws UsageError
// A comma-separated list of sizes, each read by parseSize: "8,64K,4M".
std::vector<uint64_t> parseSizeList(const std::string& list);
std::string withCommas(uint64_t v);
std::string formatBytes(double bytes);  // "64 MiB", "8 B"

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

}  // namespace tccl::cli
