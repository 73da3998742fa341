// tccl bench: nccl-tests-shaped benchmark of any collective and algorithm.
//
//   tccl bench --world 4 -b 8 -e 64M -f 2 --op allreduce --algo ring|tree|hd|rd|naive|auto|all
//
// Spawns N local ranks (processes), or, with no --world and a rank in the environment
// (TCCL_RANK / RANK, as under tccl launch, torchrun, mpirun), runs as that rank. Per
// size and algorithm: a correctness pass (rank-dependent data, every element checked,
// #wrong = wrong elements, max over ranks), warm-up iterations, then timed iterations
// (count agreed across ranks: --iters, or rank 0's choice for a ~0.2 s budget,
// broadcast to all); time = the slowest rank's average per iteration. Columns and
// factors as nccl-tests: size = bytes of the larger buffer per rank, algbw = size /
// time, busbw = algbw x factor (the collective table's busBwFactor: all-reduce
// 2(n-1)/n; reduce-scatter, all-gather, all-to-all, gather, scatter (n-1)/n; broadcast,
// reduce 1; barrier 0; send/recv 1), GB/s = 1e9 bytes/s; plus bytes/rank (payload sent,
// max over ranks, from the transport's counters) and its ratio to the collective's
// bandwidth-optimal bound. --op takes any name of the table (src/algorithms/
// collective_spec.hpp: "allreduce", "all_reduce", "ar", ...) or sendrecv; the buffer
// sizes, the root rule and the algorithms come from the table too. --inplace runs each
// collective in its in-place layout (the table's rule, as nccl-tests' in-place columns:
// one buffer; all-gather and gather read block `rank` of the output, reduce-scatter and
// scatter write block `rank` of the input).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

#include "algorithms/collective_spec.hpp"
#include "algorithms/select.hpp"
#include "bench_uneven.hpp"
#include "cli.hpp"
#include "core/process.hpp"
#include "pattern.hpp"
#include "subcommands.hpp"
#include "svg.hpp"

namespace tccl::cli {
namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kValueOptions = {
    "world",      "sizes",         "minbytes", "maxbytes", "stepfactor", "dtype",
    "op",         "redop",         "root",     "algo",     "iters",      "warmup",
    "timeout-ms", "segment-bytes", "plot",     "scaling",  "skew"};
const std::vector<std::string> kFlags = {"json",     "csv",      "crossover",
                                         "progress", "no-check", "inplace"};

// nccl-tests' short options.
const std::map<std::string, std::string> kShort = {
    {"-b", "--minbytes"}, {"-e", "--maxbytes"}, {"-f", "--stepfactor"}, {"-n", "--iters"},
    {"-w", "--warmup"},   {"-d", "--dtype"},    {"-o", "--redop"},      {"-r", "--root"}};

using algo::Collective;

// --op sendrecv: not a collective of the table but a ring shift of point-to-point
// sends and receives (rank r sends to r+1 and receives from r-1).
constexpr std::string_view kSendRecv = "sendrecv";

struct BenchConfig {
  int world = 0;  // 0: run as the rank the environment names
  std::vector<uint64_t> sizes;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  Collective coll = Collective::AllReduce;
  bool sendrecv = false;  // --op sendrecv (coll is then meaningless)
  std::string collName = "allreduce";
  int root = 0;
  std::string algoArg = "ring";
  int iters = 0;  // 0: adaptive
  int warmup = 5;
  int64_t timeoutMs = 120000;
  int64_t segmentBytes = 0;
  bool json = false, csv = false, crossover = false, progress = false, check = true;
  bool inPlace = false;  // --inplace: one buffer, the collective's in-place layout
  std::string plot;
  std::vector<int> scaling;
  int skew = 1;  // uneven collectives: rank 0's blocks are this many units (bench_uneven.hpp)
};

BenchConfig parseBench(const Args& a) {
  BenchConfig c;
  c.world = a.get("world") ? getLocalWorld(a, "world", 0, 1) : 0;
  c.crossover = a.flag("crossover");
  if (auto sizes = a.get("sizes")) {
    if (a.get("minbytes") || a.get("maxbytes") || a.get("stepfactor"))
      throw UsageError{"--sizes and -b/-e/-f are exclusive"};
    for (const std::string& item : splitList("--sizes", *sizes)) {
      try {
        c.sizes.push_back(parseSize(item));
      } catch (const UsageError& e) {
        throw UsageError{"--sizes: " + e.message};
      }
    }
  } else {
    const uint64_t lo = a.getSize("minbytes", c.crossover ? 1024 : 8);
    const uint64_t hi = a.getSize("maxbytes", c.crossover ? (16u << 20) : (64u << 20));
    const auto f = static_cast<uint64_t>(a.getInt("stepfactor", 2, 2, int64_t{1} << 30));
    if (lo > hi) throw UsageError{"-b/--minbytes is larger than -e/--maxbytes"};
    for (uint64_t s = std::max<uint64_t>(lo, 1); s <= hi; s *= f) {
      c.sizes.push_back(s);
      if (s > hi / f) break;  // the next one is past hi (and may not fit in 64 bits)
    }
  }
  c.dtype = a.getDataType("dtype", DataType::Float32);
  c.op = a.getOp("redop", ReduceOp::Sum);
  const std::string opArg = a.get("op", "allreduce");
  if (opArg == kSendRecv) {
    c.sendrecv = true;
    c.collName = kSendRecv;
  } else if (auto coll = algo::parseCollective(opArg)) {
    c.coll = *coll;
    c.collName = algo::spec(*coll).name;  // the canonical name, whichever alias was given
  } else {
    throw UsageError{"unknown --op '" + opArg + "' (" + algo::collectiveNames() + ", " +
                     std::string(kSendRecv) + "; or their nccl-tests names and aliases)"};
  }
  // A barrier moves no data: one row, whatever the sizes.
  const bool noData = !c.sendrecv && algo::spec(c.coll).input == algo::Extent::None &&
                      algo::spec(c.coll).output == algo::Extent::None;
  c.root = static_cast<int>(a.getInt("root", 0, 0, std::numeric_limits<int>::max()));
  c.algoArg = a.get("algo", c.crossover ? "ring,tree" : "auto");
  c.iters = static_cast<int>(a.getInt("iters", 0, 0, kMaxIters));
  c.warmup = static_cast<int>(a.getInt("warmup", 5, 0, kMaxIters));
  c.timeoutMs = a.getInt("timeout-ms", 120000, 1, kMaxTimeoutMs);
  c.segmentBytes = a.getInt("segment-bytes", 0, 0, int64_t{1} << 30);
  c.json = a.flag("json");
  c.csv = a.flag("csv");
  c.progress = a.flag("progress");
  c.check = !a.flag("no-check");
  c.inPlace = a.flag("inplace");
  if (c.inPlace) {
    // The layouts the collective table accepts (algo::classify); the others have none.
    if (c.sendrecv) throw UsageError{"--inplace: sendrecv sends and receives separate buffers"};
    const algo::CollectiveSpec& sp = algo::spec(c.coll);
    if (noData) throw UsageError{"--inplace: " + c.collName + " moves no data"};
    if (sp.uneven) throw UsageError{"--inplace is for the even collectives, not " + c.collName};
    if (sp.inPlace == algo::InPlaceRule::Refused)
      throw UsageError{"--inplace: " + c.collName + " has no in-place form"};
  }
  c.plot = a.get("plot", "");
  c.skew = static_cast<int>(a.getInt("skew", 1, 1, 1 << 20));
  if (a.get("skew") && (c.sendrecv || !algo::spec(c.coll).uneven)) {
    throw UsageError{
        "--skew applies to the uneven collectives only (allgatherv, "
        "reduce_scatter_v, alltoallv, gatherv, scatterv)"};
  }
  if (auto sc = a.get("scaling")) {
    for (const std::string& item : splitList("--scaling", *sc, 32))
      c.scaling.push_back(static_cast<int>(parseInt(item, "--scaling", 1, kMaxLocalWorld)));
  }
  if (c.sizes.empty()) throw UsageError{"no sizes to run"};
  if (noData) {
    if (!c.plot.empty()) throw UsageError{"--plot draws against size; " + c.collName + " has none"};
    c.sizes = {0};
  }
  if (c.json && c.csv) throw UsageError{"--json and --csv are exclusive"};
  if (!c.plot.empty()) {
    const auto dot = c.plot.rfind('.');
    const std::string ext = dot == std::string::npos ? "" : c.plot.substr(dot);
    if (ext != ".svg" && ext != ".png") throw UsageError{"--plot writes FILE.svg or FILE.png"};
    if (!c.scaling.empty() && ext != ".svg") throw UsageError{"--scaling --plot writes FILE.svg"};
  }
  if (!c.sendrecv && algo::spec(c.coll).rooted && c.world > 0 && c.root >= c.world) {
    throw UsageError{"--root " + std::to_string(c.root) + " is not a rank of a world of " +
                     std::to_string(c.world)};
  }
  return c;
}

// The algorithms --algo names for this collective ("all": every one it has).
std::vector<Algorithm> algorithmsFor(const BenchConfig& c) {
  std::vector<Algorithm> avail =
      c.sendrecv ? std::vector<Algorithm>{} : algo::spec(c.coll).algorithms;
  if (avail.empty()) avail = {Algorithm::Auto};  // nothing to name
  std::vector<Algorithm> out;
  std::stringstream ss(c.algoArg);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "all") {
      out.insert(out.end(), avail.begin(), avail.end());
      if (avail.size() > 1) out.push_back(Algorithm::Auto);
      continue;
    }
    auto a = parseAlgorithm(item);
    if (!a) throw UsageError{"unknown --algo '" + item + "'"};
    if (*a != Algorithm::Auto && std::find(avail.begin(), avail.end(), *a) == avail.end()) {
      throw UsageError{"--algo " + item + " is not available for " + c.collName};
    }
    out.push_back(*a);
  }
  return out;
}

double busFactor(const BenchConfig& c, int n) {
  return c.sendrecv ? 1 : algo::busBwFactor(c.coll, n);
}

// ---- one rank ---------------------------------------------------------------------

struct Row {
  uint64_t size = 0, count = 0;
  // What ran, and what was asked for: "ring" and "auto" when auto chose the ring.
  std::string ran, requested;
  // The algo column: "auto:ring" for auto's rows, so that they never pass for (or, in
  // the crossover report and the plot, overwrite) the fixed algorithm's own rows.
  std::string algo() const { return requested == "auto" && ran != "auto" ? "auto:" + ran : ran; }
  double timeUs = 0, algbw = 0, busbw = 0, wrong = 0, bytesPerRank = 0, ratio = 0;
};

double maxOverRanks(Communicator& comm, double v) {
  double out = 0;
  comm.allreduce(&v, &out, 1, DataType::Float64, ReduceOp::Max, {Algorithm::Ring, std::nullopt});
  return out;
}

class Runner {
 public:
  Runner(Communicator& comm, const BenchConfig& c) : comm_(comm), c_(c) {}

  Row run(uint64_t sizeBytes, Algorithm algo) {
    const int n = comm_.size(), r = comm_.rank();
    const size_t elem = dataTypeSize(c_.dtype);
    // Every rank allocates the root's buffers (the largest), sized by the table.
    auto inOf = [&](size_t count) {
      return c_.sendrecv ? count : algo::inputElems(c_.coll, count, n, c_.root, c_.root);
    };
    auto outOf = [&](size_t count) {
      return c_.sendrecv ? count : algo::outputElems(c_.coll, count, n, c_.root, c_.root);
    };
    // size = the larger buffer, of `blocks` blocks of count elements (N for the N-block
    // collectives, 1 for the others, 0 for the barrier).
    uneven_ = !c_.sendrecv && algo::spec(c_.coll).uneven;
    size_t blocks = std::max(inOf(1), outOf(1));
    if (uneven_) blocks = static_cast<size_t>(c_.skew + n - 1);  // units in the N blocks
    const size_t total = std::max<size_t>(blocks, sizeBytes / elem);
    count_ = blocks == 0 ? 0 : std::max<size_t>(1, total / blocks);
    if (uneven_) plan_ = planUneven(c_.coll, n, r, c_.root, count_, c_.skew);
    const size_t inElems = uneven_ ? plan_.inElems : inOf(count_);
    const size_t outElems = uneven_ ? plan_.outElems : outOf(count_);
    placeBuffers(inElems * elem, outElems * elem);
    opts_ = {algo, std::nullopt};
    Row row;
    row.count = uneven_ ? blocks * count_ : std::max(inElems, outElems);
    row.size = row.count * elem;

    // Correctness: every element checked against its closed form (prepareData).
    double wrong = 0;
    std::string ran = std::string(toString(algo));
    if (c_.check) {
      prepareData();
      call();
      wrong = countWrong();
    } else {
      call();
    }
    // In place, every call reduces the last one's result: zeros keep repeated sums and
    // products finite (and the timed calls' data the same from call to call).
    if (c_.inPlace) std::fill(in_.begin(), in_.end(), uint8_t{0});
    ran = lastAlgo_;
    sent_ = lastSent_;
    for (int i = 0; i < c_.warmup; ++i) call();
    // Iterations: given, or rank 0's pick for a ~0.2 s budget, the same on every rank.
    int iters = c_.iters;
    if (iters == 0) {
      comm_.barrier();
      const auto t0 = Clock::now();
      call();
      double one = std::chrono::duration<double>(Clock::now() - t0).count();
      int64_t pick = static_cast<int64_t>(std::clamp(0.2 / std::max(one, 1e-7), 5.0, 2000.0));
      comm_.broadcast(&pick, 1, DataType::Int64, 0);
      iters = static_cast<int>(pick);
    }
    comm_.barrier();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) call();
    const double sec =
        maxOverRanks(comm_, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
    row.ran = ran;
    row.requested = toString(algo);
    row.timeUs = sec * 1e6;
    row.algbw = static_cast<double>(row.size) / sec / 1e9;
    row.busbw = row.algbw * busFactor(c_, n);
    row.wrong = sumWrongOverRanks(wrong);
    row.bytesPerRank = maxOverRanks(comm_, sent_);
    const double bound = boundBytes(row.size, n);
    row.ratio = bound > 0 ? row.bytesPerRank / bound : 0;
    (void)r;
    return row;
  }

 private:
  // Out of place: an input and an output vector. In place: one vector of the larger
  // size, and the two views of it the collective's rule gives (checked with the table's
  // own classify, so that a layout the library would not take as in place fails here).
  void placeBuffers(size_t inBytes, size_t outBytes) {
    inBytes_ = inBytes;
    outBytes_ = outBytes;
    if (!c_.inPlace) {
      in_.assign(inBytes, 0);
      out_.assign(outBytes, 0);
      inP_ = in_.data();
      outP_ = out_.data();
      return;
    }
    in_.assign(std::max(inBytes, outBytes), 0);
    out_.clear();
    inP_ = outP_ = in_.data();
    const int n = comm_.size(), r = comm_.rank();
    const size_t elem = dataTypeSize(c_.dtype);
    const size_t mine = static_cast<size_t>(r) * count_ * elem;
    switch (algo::spec(c_.coll).inPlace) {
      case algo::InPlaceRule::InIsOutBlock:
        inP_ += mine;
        break;
      case algo::InPlaceRule::OutIsInBlock:
        outP_ += mine;
        break;
      default:
        break;
    }
    if (algo::classify(c_.coll, inP_, outP_, count_, elem, n, r, c_.root) !=
        algo::Placement::InPlace)
      throwError(ErrorKind::InvalidArgument, "tccl bench: the in-place layout was not in place");
  }

  // The bandwidth-optimal payload a rank must send, for the ratio column.
  // The bus-bandwidth factor of the larger buffer: 2(n-1)/n V for all-reduce, (n-1)/n of
  // the N blocks for reduce-scatter, all-gather, all-to-all (gather, scatter: the root's
  // share), V once for broadcast, reduce and sendrecv.
  double boundBytes(uint64_t size, int n) const {
    if (n <= 1) return 0;
    return busFactor(c_, n) * static_cast<double>(size);
  }

  // Inputs that depend on rank and index (tools/pattern.hpp): reductions get the
  // reduction pattern at their global index (reduce-scatter: block p of rank r's input
  // holds indices p*count..), data that is only moved is tagged with its source and
  // destination. Outputs start as -1 (255 in uint8), which no expected value is (but a
  // uint8 sum of 255), so that an element never written is counted wrong.
  void prepareData() {
    const int n = comm_.size(), r = comm_.rank();
    const size_t elem = dataTypeSize(c_.dtype);
    // The output first: in place, the input is a part of it (or all of it).
    for (size_t k = 0; k < outBytes_ / elem; ++k) pattern::store(outP_, k, c_.dtype, -1);
    if (uneven_) {
      fillUneven(c_.coll, plan_, n, r, c_.root, inP_, c_.dtype, c_.op);
      return;
    }
    const size_t B = count_ * elem;
    const DataType dt = c_.dtype;
    const size_t inElems = inBytes_ / elem;
    if (c_.sendrecv) {
      pattern::fillMoved(inP_, inElems, dt, r, (r + 1) % n, 0);
    } else {
      switch (c_.coll) {
        case Collective::AllReduce:
        case Collective::Reduce:
        case Collective::ReduceScatter:
          pattern::fillReduce(inP_, inElems, dt, c_.op, r, n, 0);
          break;
        case Collective::AllToAll:
          for (int q = 0; q < n; ++q)
            pattern::fillMoved(inP_ + static_cast<size_t>(q) * B, count_, dt, r, q, 0);
          break;
        case Collective::Scatter:
          for (int q = 0; q < n && r == c_.root; ++q)
            pattern::fillMoved(inP_ + static_cast<size_t>(q) * B, count_, dt, r, q, 0);
          break;
        default:  // broadcast, all-gather, gather: rank r's data
          pattern::fillMoved(inP_, inElems, dt, r, 0, 0);
          break;
      }
    }
  }

  // The wrong elements of this rank's output, each compared with its closed form.
  double countWrong() const {
    const int n = comm_.size(), r = comm_.rank();
    const size_t elem = dataTypeSize(c_.dtype);
    const size_t B = count_ * elem;
    const DataType dt = c_.dtype;
    auto movedFrom = [&](int src, int dst, const uint8_t* p) {
      return static_cast<double>(pattern::checkMoved(p, count_, dt, src, dst, 0).count);
    };
    if (c_.sendrecv) return n > 1 ? movedFrom((r + n - 1) % n, r, outP_) : 0;
    if (uneven_) return wrongUneven(c_.coll, plan_, n, r, c_.root, outP_, dt, c_.op);
    switch (c_.coll) {
      case Collective::AllReduce:
        return static_cast<double>(pattern::checkReduce(outP_, count_, dt, c_.op, n, 0).count);
      case Collective::ReduceScatter:
        return static_cast<double>(
            pattern::checkReduce(outP_, count_, dt, c_.op, n, static_cast<size_t>(r) * count_)
                .count);
      case Collective::Reduce:
        return r == c_.root
                   ? static_cast<double>(pattern::checkReduce(outP_, count_, dt, c_.op, n, 0).count)
                   : 0;
      case Collective::AllGather:
      case Collective::AllToAll:
      case Collective::Gather: {
        if (c_.coll == Collective::Gather && r != c_.root) return 0;
        const bool a2a = c_.coll == Collective::AllToAll;
        double w = 0;
        for (int p = 0; p < n; ++p)
          w += movedFrom(p, a2a ? r : 0, outP_ + static_cast<size_t>(p) * B);
        return w;
      }
      case Collective::Scatter:
        return movedFrom(c_.root, r, outP_);
      case Collective::Broadcast:
        return movedFrom(c_.root, 0, outP_);
      default:  // barrier; the uneven collectives are checked above
        return 0;
    }
  }

  // The sum of every rank's count of wrong elements, for rank 0's report. Through the
  // store, not a collective: a broken collective must not be what reports its own
  // verdict. Every rank's count stays under its own key.
  double sumWrongOverRanks(double wrong) {
    const int n = comm_.size(), r = comm_.rank();
    const std::string prefix = "bench/wrong/" + std::to_string(rowSerial_++) + "/";
    auto store = comm_.store();
    store->setString(prefix + std::to_string(r), std::to_string(static_cast<uint64_t>(wrong)));
    if (r != 0) return wrong;
    std::vector<std::string> keys;
    for (int p = 0; p < n; ++p) keys.push_back(prefix + std::to_string(p));
    store->wait(keys, std::chrono::milliseconds(c_.timeoutMs));
    double total = 0;
    for (const auto& k : keys) total += static_cast<double>(std::stoull(store->getString(k)));
    return total;
  }

  // Runs one call and records what it ran and sent (lastAlgo_, lastSent_).
  void call() {
    const int n = comm_.size(), r = comm_.rank();
    const DataType dt = c_.dtype;
    if (c_.sendrecv) {
      // A ring shift: send to r+1, receive from r-1 (asynchronously, so no order matters).
      lastAlgo_ = "p2p";
      lastSent_ = 0;
      if (n == 1) {
        std::copy(inP_, inP_ + inBytes_, outP_);
        return;
      }
      WorkPtr s = comm_.sendAsync(inP_, count_, dt, (r + 1) % n, opts_);
      WorkPtr q = comm_.recvAsync(outP_, count_, dt, (r + n - 1) % n, opts_);
      s->wait();
      q->wait();
      lastSent_ = static_cast<double>(s->stats().traffic.total().payloadSent);
      return;
    }
    switch (c_.coll) {
      case Collective::AllReduce:
        comm_.allreduce(inP_, outP_, count_, dt, c_.op, opts_);
        break;
      case Collective::ReduceScatter:
        comm_.reduceScatter(inP_, outP_, count_, dt, c_.op, opts_);
        break;
      case Collective::AllGather:
        comm_.allGather(inP_, outP_, count_, dt, opts_);
        break;
      case Collective::Broadcast:
        comm_.broadcast(inP_, outP_, count_, dt, c_.root, opts_);
        break;
      case Collective::Reduce:
        comm_.reduce(inP_, outP_, count_, dt, c_.op, c_.root, opts_);
        break;
      case Collective::AllToAll:
        comm_.allToAll(inP_, outP_, count_, dt, opts_);
        break;
      case Collective::Gather:
        comm_.gather(inP_, outP_, count_, dt, c_.root, opts_);
        break;
      case Collective::Scatter:
        comm_.scatter(inP_, outP_, count_, dt, c_.root, opts_);
        break;
      case Collective::Barrier:
        comm_.barrier(opts_);
        break;
      default:
        callUneven(comm_, c_.coll, plan_, inP_, outP_, dt, c_.op, c_.root, opts_);
        break;
    }
    lastAlgo_ = comm_.lastCall().algorithm;
    lastSent_ = static_cast<double>(comm_.lastCall().traffic.total().payloadSent);
  }

  Communicator& comm_;
  const BenchConfig& c_;
  size_t count_ = 0;
  bool uneven_ = false;
  UnevenPlan plan_;                // uneven collectives: this rank's counts
  std::vector<uint8_t> in_, out_;  // in place: in_ alone
  uint8_t* inP_ = nullptr;         // the call's input and output (in place: views of in_)
  uint8_t* outP_ = nullptr;
  size_t inBytes_ = 0, outBytes_ = 0;
  CollectiveOptions opts_;
  double sent_ = 0;
  std::string lastAlgo_;
  double lastSent_ = 0;
  uint64_t rowSerial_ = 0;
};

std::string rowJson(const Row& row, const BenchConfig& c) {
  std::ostringstream js;
  js << "{\"size\": " << row.size << ", \"count\": " << row.count << ", \"type\": \""
     << toString(c.dtype) << "\", \"redop\": \"" << toString(c.op) << "\", \"root\": " << c.root
     << ", \"algo\": \"" << row.algo() << "\", \"requested\": \"" << row.requested
     << "\", \"ran\": \"" << row.ran << "\", \"time_us\": " << row.timeUs
     << ", \"algbw_gbps\": " << row.algbw << ", \"busbw_gbps\": " << row.busbw
     << ", \"wrong\": " << row.wrong << ", \"bytes_per_rank\": " << row.bytesPerRank
     << ", \"ratio_to_bound\": " << row.ratio << "}";
  return js.str();
}

// Log-log plot of time and busbw against size, one line per algorithm.
void writePlot(const std::string& path, const std::string& title, const std::vector<Row>& rows) {
  std::map<std::string, std::vector<const Row*>> byAlgo;
  for (const Row& r : rows) byAlgo[r.requested].push_back(&r);  // auto: one line
  const char* colors[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b",
                          "#b07aa1", "#76b7b2", "#9c755f"};
  const int W = 900, H = 420, left = 70, top = 50, pw = 340, ph = 300, gap = 110;
  Svg svg(W, H);
  svg.text(W / 2.0, 22, title, 15, "middle");
  double xmin = 1e300, xmax = 0;
  for (const Row& r : rows) {
    xmin = std::min(xmin, static_cast<double>(r.size));
    xmax = std::max(xmax, static_cast<double>(r.size));
  }
  auto panel = [&](int x0, const char* ylabel, auto value) {
    double ymin = 1e300, ymax = 0;
    for (const Row& r : rows) {
      const double v = value(r);
      if (v > 0) {
        ymin = std::min(ymin, v);
        ymax = std::max(ymax, v);
      }
    }
    if (ymax <= 0) return;
    const double lx0 = std::log10(xmin), lx1 = std::log10(std::max(xmax, xmin * 10));
    const double ly0 = std::floor(std::log10(ymin)), ly1 = std::ceil(std::log10(ymax) + 1e-9);
    auto X = [&](double v) { return x0 + pw * (std::log10(v) - lx0) / (lx1 - lx0); };
    auto Y = [&](double v) {
      return top + ph - ph * (std::log10(v) - ly0) / std::max(1e-9, ly1 - ly0);
    };
    svg.line(x0, top + ph, x0 + pw, top + ph, "#333");
    svg.line(x0, top, x0, top + ph, "#333");
    for (double e = ly0; e <= ly1 + 1e-9; e += 1) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", std::pow(10.0, e));
      svg.text(x0 - 6, Y(std::pow(10.0, e)) + 4, buf, 10, "end");
      svg.line(x0, Y(std::pow(10.0, e)), x0 + pw, Y(std::pow(10.0, e)), "#eee");
    }
    // Sizes are powers of two: ticks at 2^e, every `step` octaves, at most eight.
    const double o0 = std::log2(xmin), o1 = std::log2(std::max(xmax, xmin * 10));
    const int step = std::max(1, static_cast<int>(std::ceil((o1 - o0) / 7.0)));
    for (int e = static_cast<int>(std::ceil(o0 / step)) * step; e <= o1 + 1e-9; e += step) {
      svg.text(X(std::exp2(e)), top + ph + 16, formatBytes(std::exp2(e)), 10, "middle");
      svg.line(X(std::exp2(e)), top + ph, X(std::exp2(e)), top + ph + 4, "#333");
    }
    svg.text(x0 + pw / 2.0, top + ph + 34, "message size (bytes per rank)", 11, "middle");
    svg.text(x0 - 52, top + ph / 2.0, ylabel, 11, "middle", -90);
    size_t ci = 0;
    for (const auto& [name, pts] : byAlgo) {
      std::vector<std::pair<double, double>> line;
      for (const Row* r : pts) {
        if (value(*r) > 0) line.emplace_back(X(static_cast<double>(r->size)), Y(value(*r)));
      }
      const char* color = colors[ci++ % 7];
      svg.polyline(line, color);
      for (const auto& [px, py] : line) svg.circle(px, py, 2.5, color);
    }
  };
  panel(left, "time (us)", [](const Row& r) { return r.timeUs; });
  panel(left + pw + gap, "busbw (GB/s)", [](const Row& r) { return r.busbw; });
  size_t ci = 0;
  for (const auto& [name, pts] : byAlgo) {
    svg.rect(left + 10 + 90.0 * static_cast<double>(ci), H - 26, 12, 12, colors[ci % 7]);
    svg.text(left + 26 + 90.0 * static_cast<double>(ci), H - 16, name, 12);
    ++ci;
  }
  const auto dot = path.rfind('.');
  if (path.substr(dot) == ".svg") {
    svg.save(path);
    return;
  }
  // PNG: render the SVG with rsvg-convert (Debian's librsvg2-bin) when it is there. No
  // shell: the file names go to it as they are.
  const std::string tmp = path + ".tmp.svg";
  svg.save(tmp);
  int status = 0;
  try {
    status = runProgram({"rsvg-convert", "-f", "png", "-o", pathArgument(path), pathArgument(tmp)});
  } catch (const UsageError& e) {
    std::remove(tmp.c_str());
    throw UsageError{
        "--plot FILE.png needs rsvg-convert (apt-get install librsvg2-bin), or use "
        "FILE.svg: " +
        e.message};
  }
  std::remove(tmp.c_str());
  if (status != 0)
    throw UsageError{"--plot: rsvg-convert failed (" + describeWaitStatus(status) + ") making " +
                     path + "; FILE.svg needs no converter"};
}

int runWorker(const BenchConfig& c) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(c.timeoutMs);
  opts.segmentBytes = static_cast<size_t>(c.segmentBytes);
  Communicator comm = Communicator::fromEnv(opts);
  const int n = comm.size();
  if (!c.sendrecv && algo::spec(c.coll).rooted && (c.root < 0 || c.root >= n)) {
    throw UsageError{"--root " + std::to_string(c.root) + " is not a rank of a world of " +
                     std::to_string(n)};
  }
  const std::vector<Algorithm> algos = algorithmsFor(c);
  const bool lead = comm.rank() == 0;
  const bool table = !c.json && !c.csv;
  if (lead && table) {
    std::printf(
        "# tccl bench: %s, world %d, dtype %s, redop %s, root %d, %s iterations, %d warm-up, %s\n",
        c.collName.c_str(), n, std::string(toString(c.dtype)).c_str(),
        std::string(toString(c.op)).c_str(), c.root,
        c.iters ? std::to_string(c.iters).c_str() : "adaptive", c.warmup,
        c.inPlace ? "in place" : "out of place");
    std::printf("# %12s %12s %8s %6s %5s %10s %12s %11s %11s %7s %14s %7s\n", "size", "count",
                "type", "redop", "root", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
                "bytes/rank", "/bound");
  }
  if (lead && c.csv)
    std::printf(
        "size,count,type,redop,root,algo,time_us,algbw_gbps,busbw_gbps,wrong,bytes_per_rank,"
        "ratio\n");
  // Settle the processes first (connections, page faults, the scheduler's placement of
  // the ranks on cores): without this the first row measured runs measurably slower.
  {
    double x = 0;
    const auto until = Clock::now() + std::chrono::milliseconds(300);
    int64_t go = 1;
    while (go != 0) {
      comm.allreduce(&x, 1, DataType::Float64, ReduceOp::Sum, {Algorithm::Ring, std::nullopt});
      go = Clock::now() < until ? 1 : 0;
      comm.broadcast(&go, 1, DataType::Int64, 0);  // rank 0 decides, so all stop together
    }
  }
  Runner runner(comm, c);
  std::vector<Row> rows;
  const auto started = Clock::now();
  const size_t total = c.sizes.size() * algos.size();
  const bool bar = lead && (c.progress || isatty(STDERR_FILENO));
  for (uint64_t size : c.sizes) {
    for (Algorithm a : algos) {
      Row row = runner.run(size, a);
      rows.push_back(row);
      if (lead && table) {
        std::printf("  %12llu %12llu %8s %6s %5d %10s %12.2f %11.3f %11.3f %7.0f %14.0f %7.3f\n",
                    static_cast<unsigned long long>(row.size),
                    static_cast<unsigned long long>(row.count),
                    std::string(toString(c.dtype)).c_str(), std::string(toString(c.op)).c_str(),
                    c.root, row.algo().c_str(), row.timeUs, row.algbw, row.busbw, row.wrong,
                    row.bytesPerRank, row.ratio);
        std::fflush(stdout);
      } else if (lead && c.csv) {
        std::printf("%llu,%llu,%s,%s,%d,%s,%.3f,%.6f,%.6f,%.0f,%.0f,%.6f\n",
                    static_cast<unsigned long long>(row.size),
                    static_cast<unsigned long long>(row.count),
                    std::string(toString(c.dtype)).c_str(), std::string(toString(c.op)).c_str(),
                    c.root, row.algo().c_str(), row.timeUs, row.algbw, row.busbw, row.wrong,
                    row.bytesPerRank, row.ratio);
      }
      // A progress bar for sweeps that take more than a few seconds.
      const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
      if (bar && elapsed > 3) {
        const size_t done = rows.size();
        const int width = 30, fill = static_cast<int>(width * done / total);
        std::fprintf(
            stderr, "\r[%s%s] %zu/%zu  %.0f s", std::string(static_cast<size_t>(fill), '#').c_str(),
            std::string(static_cast<size_t>(width - fill), '.').c_str(), done, total, elapsed);
        if (done == total) std::fprintf(stderr, "\n");
      }
    }
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double peakMiB = maxOverRanks(comm, static_cast<double>(ru.ru_maxrss) / 1024.0);
  if (!lead) return 0;
  double wrongTotal = 0;
  for (const Row& r : rows) wrongTotal += r.wrong;

  // The crossover report: where the ring starts beating the tree, measured and predicted.
  std::string crossover;
  if (c.crossover) {
    std::map<uint64_t, std::map<std::string, double>> t;
    for (const Row& r : rows) t[r.size][r.algo()] = r.timeUs;
    std::string measured = "none in the sweep";
    for (const auto& [size, byAlgo] : t) {
      if (byAlgo.count("ring") && byAlgo.count("tree") && byAlgo.at("ring") < byAlgo.at("tree")) {
        measured = formatBytes(static_cast<double>(size));
        break;
      }
    }
    // What auto itself picks at each size: the communicator's own choice (its model as
    // rank 0 shared it, tuned or not, and the job's hosts), not a model rebuilt here.
    std::string predicted = "none in the sweep", picks;
    Algorithm last = Algorithm::Auto;
    for (const auto& [size, byAlgo] : t) {
      const Algorithm pick = comm.chooseAllreduceAlgorithm(size);
      if (pick == Algorithm::Ring && predicted == "none in the sweep")
        predicted = formatBytes(static_cast<double>(size));
      if (pick != last) {
        picks += std::string(picks.empty() ? "" : ", ") + std::string(toString(pick)) + " from " +
                 formatBytes(static_cast<double>(size));
        last = pick;
      }
    }
    crossover = "crossover (smallest size where ring beats tree): measured " + measured +
                ", auto's cost model picks ring from " + predicted + " (auto picks: " + picks + ")";
  }

  if (c.json) {
    std::cout << "{\"collective\": \"" << c.collName << "\", \"world\": " << n << ", \"dtype\": \""
              << toString(c.dtype) << "\", \"redop\": \"" << toString(c.op)
              << "\", \"in_place\": " << (c.inPlace ? "true" : "false") << ", \"results\": [";
    for (size_t i = 0; i < rows.size(); ++i) std::cout << (i ? ", " : "") << rowJson(rows[i], c);
    std::cout << "], \"peak_rss_mib_per_rank\": " << peakMiB;
    if (c.crossover) std::cout << ", \"crossover\": \"" << crossover << "\"";
    std::cout << "}" << std::endl;
  } else if (table) {
    std::printf("# peak RSS per rank (max over ranks): %.1f MiB\n", peakMiB);
    std::printf("# out of bounds values : %.0f %s\n", wrongTotal,
                wrongTotal == 0 ? "OK" : "FAILED");
    if (c.crossover) std::printf("# %s\n", crossover.c_str());
  }
  if (!c.plot.empty()) {
    writePlot(c.plot,
              "tccl bench: " + c.collName + ", world " + std::to_string(n) + ", " +
                  std::string(toString(c.dtype)),
              rows);
    if (table) std::printf("# plot: %s\n", c.plot.c_str());
  }
  return wrongTotal == 0 ? 0 : 1;
}

std::vector<std::string> expandShortOptions(int argc, char** argv, int first) {
  std::vector<std::string> out;
  for (int i = first; i < argc; ++i) {
    auto it = kShort.find(argv[i]);
    out.push_back(it == kShort.end() ? argv[i] : it->second);
  }
  return out;
}

Args argsFrom(const std::vector<std::string>& words) {
  std::vector<char*> ptrs;
  for (const auto& w : words) ptrs.push_back(const_cast<char*>(w.c_str()));
  return Args(static_cast<int>(ptrs.size()), ptrs.data(), 0, kValueOptions, kFlags);
}

// --scaling: ring and naive bytes per rank as multiples of V for each world size.
int runScaling(const BenchConfig& c, const std::vector<std::string>& words) {
  const uint64_t V = c.sizes.back();
  std::printf(
      "# tccl bench --scaling: all-reduce of V = %s per rank, payload bytes sent per rank / V\n",
      formatBytes(static_cast<double>(V)).c_str());
  std::printf("# %6s %12s %12s %14s %14s\n", "world", "ring", "naive", "2(N-1)/N", "N-1");
  std::vector<std::pair<int, std::pair<double, double>>> points;
  for (int w : c.scaling) {
    std::vector<std::string> args = {"--world",
                                     std::to_string(w),
                                     "--sizes",
                                     std::to_string(V),
                                     "--algo",
                                     "ring,naive",
                                     "--iters",
                                     "1",
                                     "--warmup",
                                     "0",
                                     "--json",
                                     "--dtype",
                                     std::string(toString(c.dtype))};
    // Workers print JSON on rank 0's stdout; read it back through a pipe (no shell).
    std::vector<std::string> argv = {proc::selfExe(), "bench"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::string outText;
    const int status = runProgram(argv, &outText);
    if (status != 0) {
      std::fprintf(stderr, "tccl bench --scaling: world %d failed (%s)\n", w,
                   describeWaitStatus(status).c_str());
      return 1;
    }
    auto grab = [&](const std::string& algo) {
      const auto at = outText.find("\"algo\": \"" + algo + "\"");
      if (at == std::string::npos) return -1.0;
      const auto b = outText.find("\"bytes_per_rank\": ", at);
      if (b == std::string::npos) return -1.0;
      return std::atof(outText.c_str() + b + 18);
    };
    const double ring = grab("ring") / static_cast<double>(V),
                 naive = grab("naive") / static_cast<double>(V);
    points.push_back({w, {ring, naive}});
    std::printf("  %6d %12.3f %12.3f %14.3f %14.3f\n", w, ring, naive,
                w > 1 ? 2.0 * (w - 1) / w : 0.0, static_cast<double>(w - 1));
    std::fflush(stdout);
  }
  if (!c.plot.empty()) {
    const int W = 640, H = 400, left = 70, top = 50, pw = 500, ph = 280;
    Svg svg(W, H);
    svg.text(W / 2.0, 24, "payload bytes sent per rank / V, all-reduce", 15, "middle");
    double ymax = 1;
    int wmax = 2;
    for (const auto& [w, v] : points) {
      ymax = std::max({ymax, v.first, v.second});
      wmax = std::max(wmax, w);
    }
    auto X = [&](double w) { return left + pw * (w - 1) / std::max(1, wmax - 1); };
    auto Y = [&](double v) { return top + ph - ph * v / ymax; };
    svg.line(left, top + ph, left + pw, top + ph, "#333");
    svg.line(left, top, left, top + ph, "#333");
    std::vector<std::pair<double, double>> ring, naive;
    for (const auto& [w, v] : points) {
      ring.emplace_back(X(w), Y(v.first));
      naive.emplace_back(X(w), Y(v.second));
      svg.text(X(w), top + ph + 16, std::to_string(w), 11, "middle");
    }
    for (int k = 0; k <= 4; ++k) {
      char b[16];
      std::snprintf(b, sizeof b, "%.1f", ymax * k / 4);
      svg.text(left - 6, Y(ymax * k / 4) + 4, b, 10, "end");
    }
    svg.polyline(ring, "#4e79a7");
    svg.polyline(naive, "#e15759");
    svg.text(left + pw - 4, Y(points.back().second.first) - 8, "ring (-> 2V)", 12, "end");
    svg.text(left + pw - 4, Y(points.back().second.second) + 16, "naive ((N-1) V)", 12, "end");
    svg.text(left + pw / 2.0, top + ph + 36, "world size N", 12, "middle");
    svg.save(c.plot);
    std::printf("# plot: %s\n", c.plot.c_str());
  }
  (void)words;
  return 0;
}

// Every rank allocates an input and an output buffer of at most the largest size (the
// N-block collectives' small sizes: N elements); in place, one.
uint64_t bytesPerRank(const BenchConfig& c, int world) {
  const uint64_t largest = *std::max_element(c.sizes.begin(), c.sizes.end());
  const uint64_t floor = saturatingMul(static_cast<uint64_t>(world), dataTypeSize(c.dtype));
  return saturatingMul(std::max(largest, floor), c.inPlace ? 1 : 2);
}

// The ranks of this machine when a launcher started them (its local world size).
int localRanksFromEnv() {
  for (const char* name : {"TCCL_LOCAL_WORLD_SIZE", "LOCAL_WORLD_SIZE"}) {
    const char* v = std::getenv(name);
    if (v == nullptr) continue;
    try {
      return static_cast<int>(parseInt(v, name, 1, 1 << 20));
    } catch (const UsageError&) {
      // Not ours to judge here: the communicator reads the launcher's variables.
    }
  }
  return 1;
}

}  // namespace

int benchMain(int argc, char** argv, int first) {
  const std::vector<std::string> words = expandShortOptions(argc, argv, first);
  Args a = argsFrom(words);
  BenchConfig c = parseBench(a);
  (void)algorithmsFor(c);  // a bad --algo is a usage error here, not in every worker
  const std::string sizeText =
      formatBytes(static_cast<double>(*std::max_element(c.sizes.begin(), c.sizes.end())));
  if (!c.scaling.empty()) {
    const int widest = *std::max_element(c.scaling.begin(), c.scaling.end());
    checkMemory("--scaling up to world " + std::to_string(widest) + " at " + sizeText,
                bytesPerRank(c, widest), widest, "input and output buffers");
    return runScaling(c, words);
  }
  const bool underLauncher =
      c.world == 0 && (std::getenv("TCCL_RANK") != nullptr || std::getenv("RANK") != nullptr);
  if (underLauncher) {
    // The other ranks of this machine check the same at the same time: against physical
    // memory, which their allocations do not change.
    const int local = localRanksFromEnv();
    checkMemory("a sweep up to " + sizeText, bytesPerRank(c, local), local,
                "input and output buffers", /*onlyPhysical=*/true);
    try {
      return runWorker(c);
    } catch (const Error& e) {
      std::cerr << "tccl bench: " << e.what() << std::endl;
      return 1;
    }
  }
  std::vector<std::string> args = words;
  if (c.world == 0) {
    c.world = 2;
    args.push_back("--world");
    args.push_back(std::to_string(c.world));
  }
  if (!c.sendrecv && algo::spec(c.coll).rooted && c.root >= c.world) {
    throw UsageError{"--root " + std::to_string(c.root) + " is not a rank of a world of " +
                     std::to_string(c.world)};
  }
  checkMemory("--world " + std::to_string(c.world) + " up to " + sizeText, bytesPerRank(c, c.world),
              c.world, "input and output buffers");
  LocalRun run = runLocalRanks(c.world, "_bench-worker", args,
                               Deadline::after(std::chrono::milliseconds(c.timeoutMs * 4)),
                               std::chrono::milliseconds(2000));
  throwIfRanksRefused(run.children);
  int rc = 0;
  for (const auto& r : run.children) {
    if (!r.ok()) {
      std::cerr << "tccl bench: rank " << r.index << " " << r.describe() << "\n";
      rc = r.exitCode > 0 ? r.exitCode : 1;
    }
  }
  return rc;
}

int benchWorkerMain(int argc, char** argv, int first) {
  Args a = argsFrom(expandShortOptions(argc, argv, first));
  BenchConfig c = parseBench(a);
  try {
    return runWorker(c);
  } catch (const Error& e) {
    std::cerr << "tccl bench worker: " << e.what() << std::endl;
    return 1;
  } catch (const UsageError& e) {
    std::cerr << "tccl bench: " << e.message << std::endl;
    return 2;
  }
}

}  // namespace tccl::cli
