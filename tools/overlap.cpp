// tccl overlap: how much communication a data-parallel training step can hide behind
// its backward pass. N worker processes simulate a step over a model's gradient
// tensors (presets shaped like ResNet-50 and GPT-2 small, or a file): for each layer,
// from the last to the first, real CPU work proportional to its parameter count
// ("backward compute", calibrated to --compute-ms per step), then its gradient is
// ready. Variants:
//   sync        compute everything, then one all-reduce of all gradients (packed)
//   per-tensor  an asynchronous all-reduce of each gradient as soon as it is ready
//   bucket CAP  gradients packed into CAP-sized buckets (tccl::Bucketer), each
//               all-reduced asynchronously as soon as it is full
// Per variant, the medians over the steps of the slowest rank (largest median step): step time,
// compute time, communication time (the union of the intervals during which its all-reduces ran),
// exposed communication (step - compute) and the fraction hidden
// (1 - exposed / communication). Every gradient is verified after every step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli.hpp"
#include "subcommands.hpp"
#include "svg.hpp"
#include "tccl/bucketer.hpp"

namespace tccl::cli {
namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kValueOptions = {
    "world", "preset", "file", "scale", "compute-ms", "caps", "steps", "timeout-ms", "plot"};
const std::vector<std::string> kFlags = {"json"};

struct OverlapConfig {
  int world = 4;
  std::string preset = "resnet50";
  std::string file;
  double scale = 1.0;
  double computeMs = -1;  // < 0: auto (the measured time of the sync all-reduce)
  std::vector<uint64_t> caps = {1 << 20, 5 << 20, 25 << 20, 100 << 20};
  int steps = 3;
  int64_t timeoutMs = 300000;
  std::string plot;
  bool json = false;
};

// ---- model presets: parameter counts per tensor, in forward order ------------------

std::vector<size_t> resnet50() {
  std::vector<size_t> t;
  auto conv = [&](size_t cin, size_t cout, size_t k) { t.push_back(cin * cout * k * k); };
  auto bn = [&](size_t c) {
    t.push_back(c);  // weight
    t.push_back(c);  // bias
  };
  conv(3, 64, 7);
  bn(64);
  size_t in = 64;
  const std::pair<size_t, int> stages[] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (auto [mid, blocks] : stages) {
    const size_t out = mid * 4;
    for (int b = 0; b < blocks; ++b) {
      conv(in, mid, 1);
      bn(mid);
      conv(mid, mid, 3);
      bn(mid);
      conv(mid, out, 1);
      bn(out);
      if (b == 0) {  // projection shortcut
        conv(in, out, 1);
        bn(out);
      }
      in = out;
    }
  }
  t.push_back(2048 * 1000);  // fc weight
  t.push_back(1000);         // fc bias
  return t;
}

std::vector<size_t> gpt2Small() {
  const size_t d = 768;
  std::vector<size_t> t = {50257 * d, 1024 * d};  // token and position embeddings
  for (int layer = 0; layer < 12; ++layer) {
    for (size_t n : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d}) {
      t.push_back(n);  // ln_1 w/b, attn qkv w/b, attn proj w/b, ln_2 w/b, mlp fc w/b, mlp proj w/b
    }
  }
  t.push_back(d);  // ln_f weight
  t.push_back(d);  // ln_f bias
  return t;
}

// 2^40 parameters a tensor: times --scale (at most 1e6) it still fits in 64 bits; the
// memory check decides what runs.
constexpr int64_t kMaxTensorParams = int64_t{1} << 40;

std::vector<size_t> loadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw UsageError{"cannot read --file " + quoted(path)};
  std::vector<size_t> t;
  std::string line;
  int lineNo = 0;
  while (std::getline(f, line)) {
    ++lineNo;
    auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream is(line);
    std::string word, extra;
    if (!(is >> word)) continue;  // blank or a comment
    if (is >> extra)
      throw UsageError{path + ":" + std::to_string(lineNo) + ": one integer per line, got " +
                       quoted(line)};
    t.push_back(static_cast<size_t>(parseInt(
        word, path + ":" + std::to_string(lineNo) + ": a parameter count", 0, kMaxTensorParams)));
  }
  if (t.empty())
    throw UsageError{path + ": no parameter counts (one integer per line, forward order)"};
  return t;
}

OverlapConfig parseOverlap(const Args& a) {
  OverlapConfig c;
  c.world = getLocalWorld(a, "world", 4, 1);
  c.preset = a.get("preset", "resnet50");
  c.file = a.get("file", "");
  if (a.get("preset") && !c.file.empty()) throw UsageError{"--preset and --file are exclusive"};
  c.scale = a.getDouble("scale", 1.0);
  const std::string cm = a.get("compute-ms", "auto");
  c.computeMs = cm == "auto" ? -1 : a.getDouble("compute-ms", -1);
  if (cm != "auto" && !(c.computeMs >= 0 && c.computeMs <= 3600000))
    throw UsageError{"--compute-ms must be auto or in [0, 3600000] (an hour)"};
  if (auto caps = a.get("caps")) {
    c.caps.clear();
    for (const std::string& item : splitList("--caps", *caps, 32)) {
      try {
        c.caps.push_back(parseSize(item));
      } catch (const UsageError& e) {
        throw UsageError{"--caps: " + e.message};
      }
    }
  }
  c.steps = static_cast<int>(a.getInt("steps", 3, 1, 10000));
  c.timeoutMs = a.getInt("timeout-ms", 300000, 1, kMaxTimeoutMs);
  c.plot = a.get("plot", "");
  c.json = a.flag("json");
  if (c.preset != "resnet50" && c.preset != "gpt2-small") {
    throw UsageError{"unknown --preset '" + c.preset + "' (resnet50 or gpt2-small; or --file)"};
  }
  if (!(c.scale > 0 && c.scale <= 1e6)) throw UsageError{"--scale must be in (0, 1e6]"};
  for (uint64_t cap : c.caps) {
    if (cap == 0) throw UsageError{"bucket caps must be positive"};
  }
  if (!c.plot.empty() && c.plot.size() < 5) throw UsageError{"--plot needs a FILE.svg"};
  if (!c.plot.empty() && c.plot.substr(c.plot.size() - 4) != ".svg") {
    throw UsageError{"--plot writes SVG: give a FILE.svg"};
  }
  return c;
}

std::vector<size_t> modelOf(const OverlapConfig& c) {
  std::vector<size_t> t = !c.file.empty()            ? loadFile(c.file)
                          : c.preset == "gpt2-small" ? gpt2Small()
                                                     : resnet50();
  if (c.scale != 1.0) {
    for (size_t& n : t) n = static_cast<size_t>(std::llround(static_cast<double>(n) * c.scale));
  }
  return t;
}

// ---- simulated backward compute -----------------------------------------------------

volatile double gSink = 0;

// Dependent floating-point work: it occupies a core for a time proportional to iters.
void burn(uint64_t iters) {
  double x = 1.0 + 1e-9 * static_cast<double>(iters % 7);
  for (uint64_t i = 0; i < iters; ++i) x = x * 1.0000001 + 1e-12;
  gSink = gSink + x;
}

// Iterations of burn() per millisecond on this rank (median of 5 trials).
double calibrate() {
  std::vector<double> rates;
  const uint64_t iters = 2'000'000;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    burn(iters);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(iters) / std::max(ms, 1e-3));
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// ---- one rank ---------------------------------------------------------------------------

struct Variant {
  std::string name;
  enum Kind { Sync, PerTensor, Bucketed } kind;
  uint64_t cap = 0;
};

struct StepTimes {
  double step = 0, compute = 0, comm = 0;
  size_t buckets = 0;
};

// Total length of the union of [start, end] intervals, in seconds.
double unionSeconds(std::vector<std::pair<Clock::time_point, Clock::time_point>> iv) {
  std::sort(iv.begin(), iv.end());
  double total = 0;
  Clock::time_point curStart{}, curEnd{};
  bool open = false;
  for (const auto& [s, e] : iv) {
    if (!open || s > curEnd) {
      if (open) total += std::chrono::duration<double>(curEnd - curStart).count();
      curStart = s;
      curEnd = e;
      open = true;
    } else {
      curEnd = std::max(curEnd, e);
    }
  }
  if (open) total += std::chrono::duration<double>(curEnd - curStart).count();
  return total;
}

float gradValue(int rank, size_t layer) {
  return static_cast<float>(rank + 1) + static_cast<float>(layer % 7);
}

class Worker {
 public:
  Worker(Communicator& comm, std::vector<size_t> layers) : comm_(comm), layers_(std::move(layers)) {
    grads_.resize(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) grads_[i].assign(layers_[i], 0.0f);
    total_ = 0;
    for (size_t n : layers_) total_ += n;
    flat_.resize(total_);
  }

  void setCompute(double msPerStep, double itersPerMs) {
    iters_.assign(layers_.size(), 0);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const double share =
          total_ ? static_cast<double>(layers_[i]) / static_cast<double>(total_) : 0;
      iters_[i] = static_cast<uint64_t>(msPerStep * share * itersPerMs);
    }
  }

  StepTimes step(const Variant& v) {
    StepTimes t;
    const int r = comm_.rank();
    std::vector<WorkPtr> works;
    std::unique_ptr<Bucketer> bucketer;
    if (v.kind == Variant::Bucketed) {
      BucketOptions bo;
      bo.capBytes = v.cap;
      bo.firstCapBytes = std::min<size_t>(v.cap, size_t{1} << 20);
      bucketer = std::make_unique<Bucketer>(comm_, bo);
    }
    const auto t0 = Clock::now();
    for (size_t k = layers_.size(); k-- > 0;) {  // backward: last layer first
      const auto c0 = Clock::now();
      burn(iters_[k]);
      std::fill(grads_[k].begin(), grads_[k].end(), gradValue(r, k));
      t.compute += std::chrono::duration<double>(Clock::now() - c0).count();
      if (v.kind == Variant::PerTensor && !grads_[k].empty()) {
        works.push_back(comm_.allreduceAsync(std::span<float>(grads_[k])));
      } else if (v.kind == Variant::Bucketed) {
        bucketer->add(std::span<float>(grads_[k]));
      }
    }
    if (v.kind == Variant::Sync) {
      size_t off = 0;
      for (size_t k = layers_.size(); k-- > 0;) {
        std::copy(grads_[k].begin(), grads_[k].end(),
                  flat_.begin() + static_cast<std::ptrdiff_t>(off));
        off += grads_[k].size();
      }
      const auto a0 = Clock::now();
      comm_.allreduce(std::span<float>(flat_));
      t.comm = std::chrono::duration<double>(Clock::now() - a0).count();
      off = 0;
      for (size_t k = layers_.size(); k-- > 0;) {
        std::copy(flat_.begin() + static_cast<std::ptrdiff_t>(off),
                  flat_.begin() + static_cast<std::ptrdiff_t>(off + grads_[k].size()),
                  grads_[k].begin());
        off += grads_[k].size();
      }
      t.buckets = 1;
    } else {
      if (bucketer) {
        bucketer->finish();
        for (const auto& b : bucketer->buckets()) works.push_back(b.work);
      }
      std::vector<std::pair<Clock::time_point, Clock::time_point>> iv;
      const bool trace = std::getenv("TCCL_OVERLAP_TRACE") != nullptr && comm_.rank() == 0;
      for (auto& w : works) {
        w->wait();
        iv.emplace_back(w->startTime(), w->endTime());
        if (trace) {
          std::fprintf(
              stderr, "trace %s: %8.3f MiB start %8.1f ms dur %8.1f ms %s\n", v.name.c_str(),
              static_cast<double>(w->stats().bytes) / 1048576.0,
              std::chrono::duration<double, std::milli>(w->startTime() - t0).count(),
              std::chrono::duration<double, std::milli>(w->endTime() - w->startTime()).count(),
              w->stats().algorithm.c_str());
        }
      }
      t.comm = unionSeconds(iv);
      t.buckets = works.size();
    }
    t.step = std::chrono::duration<double>(Clock::now() - t0).count();
    return t;
  }

  // First wrong gradient element, as text; empty if all are right.
  std::string verify() const {
    const int n = comm_.size();
    for (size_t k = 0; k < layers_.size(); ++k) {
      float expect = 0;
      for (int r = 0; r < n; ++r) expect += gradValue(r, k);
      for (size_t i = 0; i < grads_[k].size(); ++i) {
        if (grads_[k][i] != expect) {
          return "rank " + std::to_string(comm_.rank()) + " tensor " + std::to_string(k) +
                 " index " + std::to_string(i) + ": expected " +
                 formatValue(expect, DataType::Float32) + ", got " +
                 formatValue(grads_[k][i], DataType::Float32);
        }
      }
    }
    return "";
  }

  size_t totalParams() const { return total_; }

 private:
  Communicator& comm_;
  std::vector<size_t> layers_;
  std::vector<std::vector<float>> grads_;
  std::vector<float> flat_;
  std::vector<uint64_t> iters_;
  size_t total_ = 0;
};

double maxOverRanks(Communicator& comm, double v) {
  double out = 0;
  comm.allreduce(&v, &out, 1, DataType::Float64, ReduceOp::Max);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string name;
  size_t buckets = 0;
  double step = 0, compute = 0, comm = 0, exposed = 0, hidden = 0;
};

void writePlot(const std::string& path, const std::string& title, const std::vector<Row>& rows) {
  const int w = 860, rowH = 34, top = 60, left = 190, right = 150;
  const int h = top + rowH * static_cast<int>(rows.size()) + 60;
  double maxMs = 0;
  for (const Row& r : rows) maxMs = std::max({maxMs, r.step * 1e3, (r.compute + r.comm) * 1e3});
  maxMs = maxMs > 0 ? maxMs * 1.05 : 1;
  const double plotW = w - left - right;
  auto X = [&](double ms) { return left + plotW * ms / maxMs; };
  Svg svg(w, h);
  svg.text(w / 2.0, 24, title, 15, "middle");
  svg.text(w / 2.0, 44, "blue: compute   red: exposed communication   grey: communication (all)",
           11, "middle");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double y = top + rowH * static_cast<double>(i);
    svg.text(left - 8, y + 17, r.name, 12, "end");
    svg.rect(X(0), y + 2, X(r.compute * 1e3) - X(0), 14, "#4e79a7",
             "compute " + std::to_string(r.compute * 1e3) + " ms");
    svg.rect(X(r.compute * 1e3), y + 2, X(r.exposed * 1e3) - X(0), 14, "#e15759",
             "exposed " + std::to_string(r.exposed * 1e3) + " ms");
    svg.rect(X(0), y + 19, X(r.comm * 1e3) - X(0), 8, "#bab0ac",
             "communication " + std::to_string(r.comm * 1e3) + " ms");
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f ms, %.0f%% hidden", r.step * 1e3, r.hidden * 100);
    svg.text(X(std::max(r.step, r.comm) * 1e3) + 6, y + 17, buf, 11);
  }
  const double axisY = top + rowH * static_cast<double>(rows.size()) + 6;
  svg.line(X(0), axisY, X(maxMs), axisY, "#333");
  for (int k = 0; k <= 5; ++k) {
    const double ms = maxMs * k / 5;
    svg.line(X(ms), axisY, X(ms), axisY + 5, "#333");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", ms);
    svg.text(X(ms), axisY + 18, buf, 11, "middle");
  }
  svg.text(X(maxMs / 2), axisY + 36, "milliseconds per step (median, slowest rank)", 12, "middle");
  svg.save(path);
}

int runWorker(const OverlapConfig& c) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(c.timeoutMs);
  Communicator comm = Communicator::fromEnv(opts);
  const std::vector<size_t> layers = modelOf(c);
  Worker w(comm, layers);
  const std::string model = c.file.empty() ? c.preset : c.file;

  std::vector<Variant> variants = {{"sync (1 all-reduce)", Variant::Sync, 0},
                                   {"per-tensor async", Variant::PerTensor, 0}};
  for (uint64_t cap : c.caps)
    variants.push_back({"bucket " + formatBytes(static_cast<double>(cap)), Variant::Bucketed, cap});

  // Compute: calibrate the burn rate, then size it (auto: as long as the sync all-reduce).
  const double itersPerMs = calibrate();
  double computeMs = c.computeMs;
  if (computeMs < 0) {
    w.setCompute(0, itersPerMs);
    w.step(variants[0]);  // warm-up: connections, page faults
    std::vector<double> comms;
    for (int i = 0; i < 2; ++i) comms.push_back(w.step(variants[0]).comm);
    computeMs = maxOverRanks(comm, median(comms) * 1e3);
  }
  w.setCompute(computeMs, itersPerMs);

  std::vector<Row> rows;
  std::string wrong;
  for (const Variant& v : variants) {
    w.step(v);  // warm-up
    std::vector<double> step, compute, commT;
    size_t buckets = 0;
    for (int s = 0; s < c.steps; ++s) {
      StepTimes t = w.step(v);
      if (wrong.empty()) wrong = w.verify();
      step.push_back(t.step);
      compute.push_back(t.compute);
      commT.push_back(t.comm);
      buckets = t.buckets;
    }
    // Every rank's medians; the report shows the slowest rank's (largest median step).
    std::vector<double> exposed(step.size());
    for (size_t i = 0; i < step.size(); ++i) exposed[i] = std::max(0.0, step[i] - compute[i]);
    const double mine[4] = {median(step), median(compute), median(commT), median(exposed)};
    std::vector<double> all(4 * static_cast<size_t>(comm.size()), 0.0);
    std::copy(mine, mine + 4, all.begin() + 4 * comm.rank());
    comm.allreduce(all.data(), all.size(), DataType::Float64, ReduceOp::Sum);  // a gather
    size_t slowest = 0;
    for (size_t q = 0; q < static_cast<size_t>(comm.size()); ++q) {
      if (all[4 * q] > all[4 * slowest]) slowest = q;
    }
    Row row;
    row.name = v.name;
    row.buckets = buckets;
    row.step = all[4 * slowest];
    row.compute = all[4 * slowest + 1];
    row.comm = all[4 * slowest + 2];
    row.exposed = all[4 * slowest + 3];
    row.hidden = row.comm > 0 ? std::clamp(1.0 - row.exposed / row.comm, 0.0, 1.0) : 0.0;
    rows.push_back(row);
  }
  const double bad = maxOverRanks(comm, wrong.empty() ? 0 : 1);
  if (!wrong.empty()) std::cerr << "tccl overlap: FAIL: " << wrong << std::endl;
  if (comm.rank() != 0) return bad > 0 ? 1 : 0;

  const double mib = static_cast<double>(w.totalParams()) * 4 / 1048576.0;
  char buf[256];
  if (c.json) {
    std::ostringstream js;
    js << "{\"world\": " << comm.size() << ", \"model\": \"" << model
       << "\", \"tensors\": " << layers.size() << ", \"params\": " << w.totalParams()
       << ", \"compute_ms_per_step\": " << computeMs << ", \"steps\": " << c.steps
       << ", \"correct\": " << (bad > 0 ? "false" : "true") << ", \"variants\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      js << (i ? ", " : "") << "{\"name\": \"" << r.name << "\", \"buckets\": " << r.buckets
         << ", \"step_ms\": " << r.step * 1e3 << ", \"compute_ms\": " << r.compute * 1e3
         << ", \"comm_ms\": " << r.comm * 1e3 << ", \"exposed_ms\": " << r.exposed * 1e3
         << ", \"hidden\": " << r.hidden << "}";
    }
    js << "]}";
    std::cout << js.str() << std::endl;
  } else {
    std::snprintf(
        buf, sizeof buf,
        "overlap: world=%d, model=%s (%zu tensors, %.1fM params, %.1f MiB of float32 gradients)\n",
        comm.size(), model.c_str(), layers.size(), static_cast<double>(w.totalParams()) / 1e6, mib);
    std::cout << buf;
    std::snprintf(buf, sizeof buf,
                  "  backward compute %.1f ms per step%s; medians of %d steps, slowest rank\n",
                  computeMs, c.computeMs < 0 ? " (auto: the sync all-reduce's time)" : "", c.steps);
    std::cout << buf;
    std::snprintf(buf, sizeof buf, "  %-22s %8s %10s %12s %10s %12s %7s\n", "variant", "buckets",
                  "step(ms)", "compute(ms)", "comm(ms)", "exposed(ms)", "hidden");
    std::cout << buf;
    for (const Row& r : rows) {
      std::snprintf(buf, sizeof buf, "  %-22s %8zu %10.1f %12.1f %10.1f %12.1f %6.0f%%\n",
                    r.name.c_str(), r.buckets, r.step * 1e3, r.compute * 1e3, r.comm * 1e3,
                    r.exposed * 1e3, r.hidden * 100);
      std::cout << buf;
    }
    std::cout << "  correctness: "
              << (bad > 0 ? "FAIL (see the ranks' messages above)"
                          : "PASS (every gradient of every step == its sum over ranks)")
              << "\n";
  }
  if (!c.plot.empty()) {
    std::snprintf(buf, sizeof buf, "tccl overlap: %s, world %d, compute %.0f ms/step",
                  model.c_str(), comm.size(), computeMs);
    writePlot(c.plot, buf, rows);
    if (!c.json) std::cout << "  plot: " << c.plot << "\n";
  }
  return bad > 0 ? 1 : 0;
}

}  // namespace

int overlapMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  OverlapConfig c = parseOverlap(a);
  // A bad --file: one line here, not one in every worker. Every rank holds its gradients,
  // a flat copy (sync) and the buckets (the model again, and a cap more at most).
  uint64_t params = 0;
  for (size_t n : modelOf(c)) params = saturatingAdd(params, n);
  const uint64_t model = saturatingMul(params, sizeof(float));
  const uint64_t maxCap = c.caps.empty() ? 0 : *std::max_element(c.caps.begin(), c.caps.end());
  checkMemory("--world " + std::to_string(c.world) + " with a model of " +
                  formatBytes(static_cast<double>(model)) + " of gradients",
              saturatingAdd(saturatingMul(model, 3), maxCap), c.world,
              "gradients, their flat copy and the buckets");
  LocalRun run = runLocalRanks(c.world, "_overlap-worker", a.raw(),
                               Deadline::after(std::chrono::milliseconds(c.timeoutMs * 4)),
                               std::chrono::milliseconds(5000));
  throwIfRanksRefused(run.children);
  int rc = 0;
  for (const auto& ch : run.children) {
    if (!ch.ok()) {
      std::cerr << "tccl overlap: rank " << ch.index << " " << ch.describe() << "\n";
      rc = 1;
    }
  }
  return rc;
}

int overlapWorkerMain(int argc, char** argv, int first) {
  Args a(argc, argv, first, kValueOptions, kFlags);
  OverlapConfig c = parseOverlap(a);
  try {
    return runWorker(c);
  } catch (const Error& e) {
    std::cerr << "tccl overlap worker: " << e.what() << std::endl;
    return 1;
  } catch (const UsageError& e) {
    std::cerr << "tccl overlap worker: " << e.message << std::endl;
    return 2;
  }
}

}  // namespace tccl::cli
