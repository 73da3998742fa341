// tccl: the command-line tool. One file per subcommand.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <string>

#include "cli.hpp"
#include "subcommands.hpp"
#include "tccl/version.hpp"

namespace {

const char* kUsage =
    "usage: tccl <command> [options]\n"
    "\n"
    "commands:\n"
    "  demo    N worker processes run ring and naive all-reduce and report bytes vs the bound\n"
    "          --world N (8) --size V elements (80000, at most 2^40)\n"
    "          --dtype float64|float32|float16|bfloat16|int64|int32|int8|uint8\n"
    "          --op sum|prod|min|max|avg --iters K (5) --timeout-ms T (60000) --json\n"
    "  bench   nccl-tests-style sweep of any collective: time, algbw, busbw, #wrong, bytes/rank\n"
    "          --world N (2) -b 8 -e 64M -f 2 (or --sizes 8,1K,64M) --op "
    "allreduce|reduce_scatter|\n"
    "          allgather|broadcast|reduce|alltoall|gather|scatter|sendrecv|allgatherv|\n"
    "          reduce_scatter_v|alltoallv|gatherv|scatterv --dtype D --redop sum\n"
    "          --root R --algo ring|tree|hd|rd|naive|auto|all -n iters (adaptive) -w warmup (5)\n"
    "          --csv --json --plot F.svg|F.png --crossover --scaling 2,4,8,16 --no-check\n"
    "          --skew K (uneven ops: rank 0's blocks are K times the others')\n"
    "          --inplace (one buffer, the collective's in-place layout; not for alltoall,\n"
    "          barrier, sendrecv and the uneven ops)\n"
    "  p2pbench  point to point between 2 ranks, osu_latency / osu_bw / osu_bibw style:\n"
    "          --mode latency|latency_async|bw|bibw|all (all) --sizes 8,64K,4M,64M\n"
    "          --iters N (by size) --warmup N (iters/10) --window W (64) --reps R (5)\n"
    "          --json FILE --timeout-ms T (120000) --inject-error   (exit 1 on #wrong)\n"
    "  overlap a simulated training step: how much all-reduce time async and bucketed\n"
    "          communication hide behind the backward pass\n"
    "          --world N (4) --preset resnet50|gpt2-small | --file F --scale S (1, up to 1e6)\n"
    "          --compute-ms T|auto --caps 1M,5M,25M,100M --steps K (3) --plot F.svg --json\n"
    "  tune    measure the cost model's alpha (per message) and beta (bandwidth) between\n"
    "          ranks 0 and 1 and save them: --world N (2) --file F --iters K --bytes B (<= 4G)\n"
    "  launch  start a job's local ranks, torchrun-style; node 0 hosts the store\n"
    "          --nproc-per-node N [--nnodes M --node-rank K --master-addr A --master-port P]\n"
    "          [--no-tag-output] [--timeout S] [--grace S] [--rdzv-timeout S]\n"
    "          [--auth-key-file F] -- CMD ARGS   (docs/launch.md)\n"
    "  faults  failure scenarios: N ranks, one fault, what every rank reported and how fast\n"
    "          --kill R [--at PHASE:STEP[#SEQ]] | --stop R [--at ...] | --stuck R | --skip R |\n"
    "          --reorder R | --count-mismatch R | --shrink [--kill R] | --all [--rank R]\n"
    "          --world N (4) --algo ring|tree|hd|rd|naive --timeout-ms T (3000) --count N\n"
    "          --iters K (10, shrink) --json   (exit 0: detection right; docs/faults.md)\n"
    "  simulate  predicted nccl-tests tables on a SimGrid platform, from the real schedules\n"
    "          --world N | --hosts H --ranks-per-host L (1) --gbps G (25) --latency-us U (5)\n"
    "          --loopback-gbps G (64) --loopback-latency-us U (1) --cores C (L) --reduce-gbps R\n"
    "          (20) --overhead-us U (0) --copy-gbps C (0) --fat-tree 'levels;down;up;count' | "
    "--platform F.xml\n"
    "          -b 1M -e 64M -f 4 (or --sizes) --op allreduce|... --algo ring,tree,...|auto|all\n"
    "          --segment-bytes B (1M) --simgrid-cfg key:value,... --csv --no-replay-auto\n"
    "          (each replay in a child process, from simulated time 0; docs/simulate.md)\n"
    "  version print the version\n"
    "\n"
    "limits: demo, bench, overlap and tune run every rank here: --world 1..256 (tune 2..256,\n"
    "  faults 2..64); --iters up to 1000000; --timeout-ms up to a day (faults 6 h); lists up\n"
    "  to 64 items; sizes take K, M, G and must fit in 64 bits; a run whose ranks would need\n"
    "  more memory than this machine has available is refused, saying how much. Bad values,\n"
    "  repeated options and empty values are one line on stderr and exit status 2.\n";

// tccl simulate runs in its own program, tccl-simulate beside this one: only it loads
// SimGrid (with ns-3 and boost, about 50 ms of CPU per process start), so that the
// other commands, and every rank process that demo, bench, faults and tune start, do not.
int execSimulate(char** argv) {
#ifndef TCCL_SIMULATE_HELPER
  (void)argv;
  throw tccl::cli::UsageError{
      "this tccl was built without SimGrid (install libsimgrid-dev and reconfigure; "
      "docs/simulate.md)"};
#else
  const std::string self = tccl::proc::selfExe();
  const std::string helper = self.substr(0, self.rfind('/') + 1) + TCCL_SIMULATE_HELPER;
  argv[0] = const_cast<char*>(helper.c_str());  // argv[1] stays "simulate"
  ::execv(helper.c_str(), argv);
  const int err = errno;
  throw tccl::cli::UsageError{
      "runs in " + tccl::cli::quoted(helper) + ", which " +
      (err == ENOENT ? std::string("is missing (install it beside tccl; docs/simulate.md)")
                     : std::string("cannot be started: ") + std::strerror(err))};
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") ||
      !std::strcmp(argv[1], "help")) {
    std::cout << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  return tccl::cli::runReported(cmd, [&]() -> int {
    if (cmd == "demo") return tccl::cli::demoMain(argc, argv, 2);
    if (cmd == "_demo-worker") return tccl::cli::demoWorkerMain(argc, argv, 2);
    if (cmd == "bench") return tccl::cli::benchMain(argc, argv, 2);
    if (cmd == "_bench-worker") return tccl::cli::benchWorkerMain(argc, argv, 2);
    if (cmd == "p2pbench") return tccl::cli::p2pbenchMain(argc, argv, 2);
    if (cmd == "_p2pbench-worker") return tccl::cli::p2pbenchWorkerMain(argc, argv, 2);
    if (cmd == "overlap") return tccl::cli::overlapMain(argc, argv, 2);
    if (cmd == "tune") return tccl::cli::tuneMain(argc, argv, 2);
    if (cmd == "_tune-worker") return tccl::cli::tuneWorkerMain(argc, argv, 2);
    if (cmd == "_overlap-worker") return tccl::cli::overlapWorkerMain(argc, argv, 2);
    if (cmd == "launch") return tccl::cli::launchMain(argc, argv, 2);
    if (cmd == "faults") return tccl::cli::faultsMain(argc, argv, 2);
    if (cmd == "_faults-worker") return tccl::cli::faultsWorkerMain(argc, argv, 2);
    if (cmd == "simulate") return execSimulate(argv);
    if (cmd == "version" || cmd == "--version") {
      std::cout << "tccl " << tccl::kVersion << "\n";
      return 0;
    }
    std::cerr << "tccl: unknown command " << tccl::cli::quoted(cmd) << " (try tccl --help)\n";
    return 2;
  });
}
