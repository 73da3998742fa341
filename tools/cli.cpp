#include "cli.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <new>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "auth/auth.hpp"
#include "net/socket.hpp"
#include "tccl/half.hpp"

extern char** environ;

namespace tccl::cli {

std::string quoted(const std::string& s) {
  constexpr size_t kMax = 64;
  return "'" + oneLine(s.substr(0, kMax)) + (s.size() > kMax ? "...'" : "'");
}

std::string oneLine(const std::string& s) {
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

Args::Args(int argc, char** argv, int first, const std::vector<std::string>& valueOptions,
           const std::vector<std::string>& flags) {
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    raw_.push_back(a);
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      throw UsageError{"unexpected argument " + quoted(a)};
    std::string name = a.substr(2);
    std::string value;
    bool inlineValue = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inlineValue = true;
    }
    const bool isFlag = has(flags, name);
    if (!isFlag && !has(valueOptions, name))
      throw UsageError{"unknown option " + quoted("--" + name)};
    if (values_.count(name) != 0) throw UsageError{"--" + name + " is given twice"};
    if (isFlag) {
      if (inlineValue) throw UsageError{"--" + name + " takes no value"};
      values_[name] = "1";
      continue;
    }
    if (!inlineValue) {
      if (i + 1 >= argc) throw UsageError{"--" + name + " needs a value"};
      value = argv[++i];
      raw_.push_back(value);
    }
    if (value.empty()) throw UsageError{"--" + name + " needs a value (got an empty one)"};
    values_[name] = value;
  }
}

bool Args::flag(const std::string& name) const { return values_.count(name) != 0; }

std::optional<std::string> Args::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::get(const std::string& name, const std::string& dflt) const {
  return get(name).value_or(dflt);
}

namespace {

// Strict decimal: an optional '-', then digits, nothing else; nullopt (with *range set
// when it is a number too large for int64) otherwise.
std::optional<int64_t> decimal(const std::string& s, bool* range) {
  *range = false;
  const char* b = s.data();
  const char* e = b + s.size();
  if (b != e && *b == '+') ++b;  // "+5" is 5; from_chars takes no '+'
  int64_t x = 0;
  const auto [ptr, ec] = std::from_chars(b, e, x, 10);
  if (ec == std::errc::result_out_of_range) {
    *range = true;
    return std::nullopt;
  }
  if (ec != std::errc() || ptr != e || b == e) return std::nullopt;
  return x;
}

std::string rangeText(int64_t lo, int64_t hi) {
  return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
}

}  // namespace

int64_t parseInt(const std::string& s, const std::string& what, int64_t lo, int64_t hi) {
  bool range = false;
  const auto x = decimal(s, &range);
  const bool bounded =
      lo != std::numeric_limits<int64_t>::min() || hi != std::numeric_limits<int64_t>::max();
  if (range && !bounded) throw UsageError{what + ": " + quoted(s) + " is out of range"};
  if (range)
    throw UsageError{what + " must be in " + rangeText(lo, hi) + " (got " + quoted(s) + ")"};
  if (!x) throw UsageError{what + " expects an integer, got " + quoted(s)};
  if (*x < lo || *x > hi)
    throw UsageError{what + " must be in " + rangeText(lo, hi) + " (got " + std::to_string(*x) +
                     ")"};
  return *x;
}

int64_t Args::getInt(const std::string& name, int64_t dflt) const {
  return getInt(name, dflt, std::numeric_limits<int64_t>::min(),
                std::numeric_limits<int64_t>::max());
}

int64_t Args::getInt(const std::string& name, int64_t dflt, int64_t lo, int64_t hi) const {
  auto v = get(name);
  if (!v) return dflt;
  return parseInt(*v, "--" + name, lo, hi);
}

int getLocalWorld(const Args& a, const std::string& name, int dflt, int lo) {
  const int64_t w = a.getInt(name, dflt);
  if (w < lo || w > kMaxLocalWorld) {
    throw UsageError{"--" + name + " must be in " + rangeText(lo, kMaxLocalWorld) + " (got " +
                     std::to_string(w) +
                     (w > kMaxLocalWorld ? "): every rank is a process on this machine" : ")")};
  }
  return static_cast<int>(w);
}

double Args::getDouble(const std::string& name, double dflt) const {
  auto v = get(name);
  if (!v) return dflt;
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v->c_str(), &end);
  const bool spaced = std::isspace(static_cast<unsigned char>(v->front())) != 0;
  if (spaced || *end != '\0' || errno != 0 || !std::isfinite(x)) {
    throw UsageError{"--" + name + " expects a finite number, got " + quoted(*v)};
  }
  return x;
}

uint64_t parseSize(const std::string& s) {
  if (s.empty()) throw UsageError{"empty size"};
  if (s.front() == '-') throw UsageError{"size must not be negative: " + quoted(s)};
  if (!std::isdigit(static_cast<unsigned char>(s.front())))
    throw UsageError{"bad size " + quoted(s) + " (a number of bytes, optionally K, M or G)"};
  uint64_t x = 0;
  const char* b = s.data();
  const char* e = b + s.size();
  const auto [end, ec] = std::from_chars(b, e, x, 10);
  if (ec == std::errc::result_out_of_range)
    throw UsageError{"size " + quoted(s) + " does not fit in 64 bits"};
  if (ec != std::errc()) throw UsageError{"bad size " + quoted(s)};
  const std::string suffix(end, e);
  uint64_t mult = 1;
  if (suffix == "" || suffix == "B")
    mult = 1;
  else if (suffix == "K" || suffix == "k" || suffix == "KiB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "MiB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "GiB")
    mult = 1ull << 30;
  else
    throw UsageError{"bad size suffix in " + quoted(s) + " (use K, M or G)"};
  if (x > std::numeric_limits<uint64_t>::max() / mult)
    throw UsageError{"size " + quoted(s) + " does not fit in 64 bits"};
  return x * mult;
}

std::vector<uint64_t> parseSizeList(const std::string& list) {
  std::vector<uint64_t> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parseSize(item));
  return out;
}

uint64_t Args::getSize(const std::string& name, uint64_t dflt) const {
  auto v = get(name);
  if (!v) return dflt;
  try {
    return parseSize(*v);
  } catch (const UsageError& e) {
    throw UsageError{"--" + name + ": " + e.message};
  }
}

std::vector<std::string> splitList(const std::string& option, const std::string& value,
                                   size_t maxItems) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = value.find(',', start);
    const std::string item =
        value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) throw UsageError{option + ": empty item in " + quoted(value)};
    items.push_back(item);
    if (items.size() > maxItems)
      throw UsageError{option + " takes at most " + std::to_string(maxItems) + " items"};
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

uint64_t saturatingMul(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

uint64_t saturatingAdd(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

MemoryInfo memoryInfo() {
  MemoryInfo m;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long pageSize = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0)
    m.physical = saturatingMul(static_cast<uint64_t>(pages), static_cast<uint64_t>(pageSize));
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long long kb = 0;
      if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
        m.available = saturatingMul(kb, 1024);
        break;
      }
    }
    std::fclose(f);
  }
  return m;
}

void checkMemory(const std::string& command, uint64_t bytesPerRank, int ranks,
                 const std::string& what, bool onlyPhysical) {
  const MemoryInfo m = memoryInfo();
  const uint64_t perRank = saturatingAdd(bytesPerRank, kRankOverheadBytes);
  const uint64_t need = saturatingMul(perRank, static_cast<uint64_t>(std::max(ranks, 1)));
  const bool useAvailable = !onlyPhysical && m.available > 0;
  const uint64_t have = useAvailable ? m.available : m.physical;
  if (have == 0 || need <= have) return;
  auto bytes = [](uint64_t b) {
    return b == std::numeric_limits<uint64_t>::max() ? std::string("more than 16 EiB")
                                                     : formatBytes(static_cast<double>(b));
  };
  std::string msg = command + " needs " + bytes(need) + " of memory (" + std::to_string(ranks) +
                    (ranks == 1 ? " rank" : " ranks") + " x " + bytes(perRank) + ": " + what +
                    ", plus " + formatBytes(static_cast<double>(kRankOverheadBytes)) +
                    " per process); this machine has ";
  if (useAvailable)
    msg += formatBytes(static_cast<double>(m.available)) + " available (" +
           formatBytes(static_cast<double>(m.physical)) + " physical)";
  else
    msg += formatBytes(static_cast<double>(m.physical));
  throw UsageError{msg};
}

DataType Args::getDataType(const std::string& name, DataType dflt) const {
  auto v = get(name);
  if (!v) return dflt;
  auto t = parseDataType(*v);
  if (!t)
    throw UsageError{"unknown dtype " + quoted(*v) +
                     " (expected float32, float64, float16, bfloat16, int32, int64, int8 or "
                     "uint8)"};
  return *t;
}

ReduceOp Args::getOp(const std::string& name, ReduceOp dflt) const {
  auto v = get(name);
  if (!v) return dflt;
  auto op = parseReduceOp(*v);
  if (!op) throw UsageError{"unknown op " + quoted(*v) + " (expected sum, prod, min, max or avg)"};
  return *op;
}

Algorithm Args::getAlgorithm(const std::string& name, Algorithm dflt) const {
  auto v = get(name);
  if (!v) return dflt;
  auto a = parseAlgorithm(*v);
  if (!a)
    throw UsageError{"unknown algorithm " + quoted(*v) +
                     " (expected auto, ring, naive, tree, hd, rd or hier)"};
  return *a;
}

std::string withCommas(uint64_t v) {
  std::string s = std::to_string(v);
  std::string out;
  int n = 0;
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (n > 0 && n % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string formatBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, b == std::floor(b) ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

namespace {

// An integer value wrapped modulo 2^bits into T, as the kernels wrap (no undefined
// behaviour for out-of-range doubles; NaN and infinities give 0).
template <typename T>
T wrapTo(double v) {
  static_assert(sizeof(T) <= 4, "2^bits must be exact in a double, with room to add it");
  constexpr double kModulus = static_cast<double>(uint64_t{1} << (8 * sizeof(T)));
  if (!std::isfinite(v)) return T(0);
  double m = std::fmod(std::trunc(v), kModulus);  // in (-2^bits, 2^bits), exact
  if (m < 0) m += kModulus;
  return static_cast<T>(static_cast<uint64_t>(m));  // C++20: modular for signed T too
}

// The 16-bit floating types: bits <-> float, and their precision for firstMismatch.
struct F16Codec {
  static uint16_t store(float f) { return floatToHalf(f); }
  static float load(uint16_t h) { return halfToFloat(h); }
  static constexpr int kDigits = 11;   // significant bits
  static constexpr int kMinExp = -14;  // exponent of the smallest normal
};
struct BF16Codec {
  static uint16_t store(float f) { return floatToBFloat16(f); }
  static float load(uint16_t h) { return bfloat16ToFloat(h); }
  static constexpr int kDigits = 8;
  static constexpr int kMinExp = -126;
};

// The rank-order fold of the values 1..n in an integer type T with the kernels'
// semantics: sum and prod wrap modulo 2^bits, avg divides the wrapped sum once.
template <typename T>
double foldInt(int n, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  T acc = wrapTo<T>(1);
  for (int r = 2; r <= n; ++r) {
    const T v = wrapTo<T>(r);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(v)));
        break;
      case ReduceOp::Prod:
        acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) * static_cast<U>(v)));
        break;
      case ReduceOp::Min:
        acc = v < acc ? v : acc;
        break;
      case ReduceOp::Max:
        acc = acc < v ? v : acc;
        break;
      case ReduceOp::BAnd:
        acc = static_cast<T>(acc & v);
        break;
      case ReduceOp::BOr:
        acc = static_cast<T>(acc | v);
        break;
      case ReduceOp::BXor:
        acc = static_cast<T>(acc ^ v);
        break;
    }
  }
  if (op == ReduceOp::Avg) return static_cast<double>(static_cast<int64_t>(acc) / n);
  return static_cast<double>(acc);
}

// The bitwise ops over the values 1..n, which int32 and int64 hold exactly.
int64_t foldBits(int n, ReduceOp op) {
  int64_t acc = 1;
  for (int64_t r = 2; r <= n; ++r) {
    acc = op == ReduceOp::BAnd ? (acc & r) : op == ReduceOp::BOr ? (acc | r) : (acc ^ r);
  }
  return acc;
}

// The same for a 16-bit floating type: every step computes in float and rounds to
// nearest even, as the kernels do (so a product past 65504 is inf in float16).
template <typename C>
double foldHalf(int n, ReduceOp op) {
  uint16_t acc = C::store(1.0f);
  for (int r = 2; r <= n; ++r) {
    const float a = C::load(acc);
    const float v = C::load(C::store(static_cast<float>(r)));
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc = C::store(a + v);
        break;
      case ReduceOp::Prod:
        acc = C::store(a * v);
        break;
      case ReduceOp::Min:
        acc = C::store(v < a ? v : a);
        break;
      case ReduceOp::Max:
        acc = C::store(a < v ? v : a);
        break;
      case ReduceOp::BAnd:  // integer types only: the library refuses them here
      case ReduceOp::BOr:
      case ReduceOp::BXor:
        break;
    }
  }
  if (op == ReduceOp::Avg) acc = C::store(C::load(acc) / static_cast<float>(n));
  return C::load(acc);
}

}  // namespace

void fill(void* buf, size_t count, DataType dtype, double value) {
  switch (dtype) {
    case DataType::Float32:
      std::fill_n(static_cast<float*>(buf), count, static_cast<float>(value));
      break;
    case DataType::Float64:
      std::fill_n(static_cast<double*>(buf), count, value);
      break;
    case DataType::Int32:
      std::fill_n(static_cast<int32_t*>(buf), count, static_cast<int32_t>(value));
      break;
    case DataType::Int64:
      std::fill_n(static_cast<int64_t*>(buf), count, static_cast<int64_t>(value));
      break;
    case DataType::Float16:
      std::fill_n(static_cast<uint16_t*>(buf), count, F16Codec::store(static_cast<float>(value)));
      break;
    case DataType::BFloat16:
      std::fill_n(static_cast<uint16_t*>(buf), count, BF16Codec::store(static_cast<float>(value)));
      break;
    case DataType::Int8:
      std::fill_n(static_cast<int8_t*>(buf), count, wrapTo<int8_t>(value));
      break;
    case DataType::UInt8:
      std::fill_n(static_cast<uint8_t*>(buf), count, wrapTo<uint8_t>(value));
      break;
  }
}

double expectedConstant(int n, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::Float16:
      return foldHalf<F16Codec>(n, op);
    case DataType::BFloat16:
      return foldHalf<BF16Codec>(n, op);
    case DataType::Int8:
      return foldInt<int8_t>(n, op);
    case DataType::UInt8:
      return foldInt<uint8_t>(n, op);
    case DataType::Int32:
    case DataType::Int64:
      if (isBitwise(op)) return static_cast<double>(foldBits(n, op));
      break;
    default:
      break;
  }
  const bool isInt = dtype == DataType::Int32 || dtype == DataType::Int64;
  switch (op) {
    case ReduceOp::Sum:
      return static_cast<double>(n) * (n + 1) / 2;
    case ReduceOp::Min:
      return 1;
    case ReduceOp::Max:
      return n;
    case ReduceOp::Avg: {
      int64_t sum = int64_t{n} * (n + 1) / 2;
      return isInt ? static_cast<double>(sum / n) : static_cast<double>(sum) / n;
    }
    case ReduceOp::Prod: {
      if (dtype == DataType::Int32) {
        uint32_t p = 1;
        for (int i = 1; i <= n; ++i) p *= static_cast<uint32_t>(i);
        return static_cast<int32_t>(p);
      }
      if (dtype == DataType::Int64) {
        uint64_t p = 1;
        for (int i = 1; i <= n; ++i) p *= static_cast<uint64_t>(i);
        return static_cast<double>(static_cast<int64_t>(p));
      }
      double p = 1;
      for (int i = 1; i <= n; ++i) p *= i;
      return p;
    }
    case ReduceOp::BAnd:  // integer types are folded above; floating types are refused
    case ReduceOp::BOr:
    case ReduceOp::BXor:
      break;
  }
  return 0;
}

namespace {

template <typename T>
std::optional<Mismatch> scan(const T* p, size_t n, double expected, double relTol) {
  for (size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(p[i]);
    const bool ok = relTol == 0
                        ? p[i] == static_cast<T>(expected)
                        : std::fabs(v - expected) <= relTol * std::max(1.0, std::fabs(expected));
    if (!ok) return Mismatch{i, v};
  }
  return std::nullopt;
}

// The ring adds in another order than the rank-order fold of expectedConstant, and
// every 16-bit step rounds, so results may differ by a few units in the last place
// once a partial result leaves the exactly representable integers (above 256 for
// bfloat16, 2048 for float16; below that, e.g. the default demo, they are equal).
// Measured on the demo's data over worlds up to 128: at most 8 ulps. A value within
// 8 ulps of the expected one passes; infinities and NaN must match in kind.
constexpr double kHalfUlpsAllowed = 8;

template <typename C>
std::optional<Mismatch> scanHalf(const uint16_t* p, size_t n, double expected) {
  int exp = 0;
  std::frexp(expected, &exp);  // |expected| in [2^(exp-1), 2^exp)
  const int e = std::max(exp - 1, C::kMinExp);
  const double tol = kHalfUlpsAllowed * std::ldexp(1.0, e - (C::kDigits - 1));
  for (size_t i = 0; i < n; ++i) {
    const double v = C::load(p[i]);
    bool ok;
    if (std::isnan(expected))
      ok = std::isnan(v);
    else if (std::isinf(expected))
      ok = v == expected;
    else
      ok = std::fabs(v - expected) <= tol;  // false for NaN and infinities
    if (!ok) return Mismatch{i, v};
  }
  return std::nullopt;
}

}  // namespace

std::optional<Mismatch> firstMismatch(const void* buf, size_t count, DataType dtype,
                                      double expected) {
  switch (dtype) {
    case DataType::Float32:
      return scan(static_cast<const float*>(buf), count, expected, 1e-5);
    case DataType::Float64:
      return scan(static_cast<const double*>(buf), count, expected, 1e-12);
    case DataType::Int32:
      return scan(static_cast<const int32_t*>(buf), count, expected, 0);
    case DataType::Int64:
      return scan(static_cast<const int64_t*>(buf), count, expected, 0);
    case DataType::Float16:
      return scanHalf<F16Codec>(static_cast<const uint16_t*>(buf), count, expected);
    case DataType::BFloat16:
      return scanHalf<BF16Codec>(static_cast<const uint16_t*>(buf), count, expected);
    case DataType::Int8:
      return scan(static_cast<const int8_t*>(buf), count, expected, 0);
    case DataType::UInt8:
      return scan(static_cast<const uint8_t*>(buf), count, expected, 0);
  }
  return std::nullopt;
}

std::string formatValue(double v, DataType dtype) {
  char buf[64];
  const bool isInt = dtype == DataType::Int32 || dtype == DataType::Int64 ||
                     dtype == DataType::Int8 || dtype == DataType::UInt8;
  if (isInt || v == std::floor(v)) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.6g", v);
  }
  return buf;
}

std::string elementNoun(DataType dtype) {
  switch (dtype) {
    case DataType::Float32:
      return "floats";
    case DataType::Float64:
      return "doubles";
    case DataType::Int32:
      return "int32s";
    case DataType::Int64:
      return "int64s";
    case DataType::Float16:
      return "float16s";
    case DataType::BFloat16:
      return "bfloat16s";
    case DataType::Int8:
      return "int8s";
    case DataType::UInt8:
      return "uint8s";
  }
  return "elements";
}

LocalRun runLocalRanks(int world, const std::string& workerCommand,
                       const std::vector<std::string>& args, Deadline deadline,
                       std::chrono::milliseconds grace) {
  LocalRun run;
  // Every rank is started here: a key made up for this run authenticates them all
  // (docs/security.md), unless the user gave one.
  auth::ensureJobKeyInEnv();
  run.server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  const std::string storeAddr = "127.0.0.1:" + std::to_string(run.server->port());
  std::vector<std::string> argv = {proc::selfExe(), workerCommand};
  argv.insert(argv.end(), args.begin(), args.end());
  const auto start = std::chrono::steady_clock::now();
  proc::ProcessGroup group;
  group.spawn(world, argv, [&](int r) {
    return proc::EnvList{{"TCCL_RANK", std::to_string(r)},
                         {"TCCL_WORLD_SIZE", std::to_string(world)},
                         {"TCCL_STORE", storeAddr}};
  });
  run.children = group.wait(deadline, /*killOnFailure=*/true, grace);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

int runProgram(const std::vector<std::string>& argv, std::string* out) {
  if (argv.empty()) throw UsageError{"no program to run"};
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int pipeFds[2] = {-1, -1};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (out != nullptr) {
    if (::pipe2(pipeFds, O_CLOEXEC) != 0) {
      posix_spawn_file_actions_destroy(&fa);
      throwError(ErrorKind::System, "pipe2: " + net::errnoString(errno));
    }
    posix_spawn_file_actions_adddup2(&fa, pipeFds[1], STDOUT_FILENO);
  }
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (out != nullptr) ::close(pipeFds[1]);
  if (rc != 0) {
    if (out != nullptr) ::close(pipeFds[0]);
    throw UsageError{argv[0] + ": " +
                     (rc == ENOENT ? std::string("not found") : net::errnoString(rc))};
  }
  if (out != nullptr) {
    char buf[4096];
    while (true) {
      const ssize_t n = ::read(pipeFds[0], buf, sizeof buf);
      if (n > 0) {
        out->append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    ::close(pipeFds[0]);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throwError(ErrorKind::System, "waitpid: " + net::errnoString(errno));
  }
  return status;
}

std::string describeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

std::string pathArgument(const std::string& path) {
  return !path.empty() && path.front() == '-' ? "./" + path : path;
}

void throwIfRanksRefused(const std::vector<proc::ChildResult>& children) {
  int first = -1, count = 0;
  for (const auto& ch : children) {
    if (!ch.exited || ch.exitCode != 2) continue;
    if (first < 0) first = ch.index;
    ++count;
  }
  if (count == 0) return;
  throw UsageError{"rank " + std::to_string(first) +
                   (count > 1 ? " (and " + std::to_string(count - 1) + " more)" : "") +
                   " stopped on the error above (exit 2)"};
}

int exitStatusOf(const LocalRun& run, const std::string& tool) {
  int rc = 0;
  for (const auto& r : run.children) {
    if (!r.ok()) {
      std::cerr << "tccl " << tool << ": rank " << r.index << " " << r.describe() << "\n";
      rc = r.exitCode > 0 ? r.exitCode : 1;
    }
  }
  return rc;
}

bool rankFromEnvironment() {
  return std::getenv("TCCL_RANK") != nullptr || std::getenv("RANK") != nullptr;
}

std::string encodeRecord(const std::map<std::string, std::string>& kv) {
  std::string s;
  for (const auto& [k, v] : kv) {
    s += k;
    s += '=';
    for (char c : v) s += (c == '\n' ? ' ' : c);
    s += '\n';
  }
  return s;
}

std::map<std::string, std::string> decodeRecord(const std::string& s) {
  std::map<std::string, std::string> kv;
  std::istringstream is(s);
  std::string line;
  while (std::getline(is, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

bool writeAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

namespace {
// "demo" for "_demo-worker": the name the user typed, for a worker's message.
std::string shownName(const std::string& cmd) {
  std::string s = cmd;
  if (!s.empty() && s.front() == '_') s.erase(0, 1);
  if (const auto dash = s.find('-'); dash != std::string::npos) s = s.substr(0, dash) + " worker";
  return s;
}

// One line on stderr, whatever the message holds.
void report(const std::string& cmd, const std::string& message) {
  std::cerr << "tccl " << oneLine(shownName(cmd)) << ": " << oneLine(message) << std::endl;
}
}  // namespace

int runReported(const std::string& cmd, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    report(cmd, e.message);
    return 2;
  } catch (const Error& e) {
    report(cmd, e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // The parent checks sizes against the machine's memory first (checkMemory); this is
    // what is left: memory taken by others meanwhile, or a limit (ulimit -v) below it.
    report(cmd, "out of memory (std::bad_alloc): use smaller sizes or fewer ranks");
    return 2;
  } catch (const std::length_error& e) {
    report(cmd, std::string("a size too large for this machine (") + e.what() + ")");
    return 2;
  } catch (const std::invalid_argument& e) {
    report(cmd, std::string("not a number where one was expected (") + e.what() + ")");
    return 2;
  } catch (const std::out_of_range& e) {
    report(cmd, std::string("a number out of range (") + e.what() + ")");
    return 2;
  } catch (const std::exception& e) {
    report(cmd, std::string("unexpected error: ") + e.what());
    return 1;
  } catch (...) {
    report(cmd, "unexpected error");
    return 1;
  }
}

}  // namespace tccl::cli
