#pragma once

namespace tccl::cli {
// Each returns the process exit status; argv[first..] are the subcommand's options.
int demoMain(int argc, char** argv, int first);
int demoWorkerMain(int argc, char** argv, int first);
int benchMain(int argc, char** argv, int first);
int benchWorkerMain(int argc, char** argv, int first);
int p2pbenchMain(int argc, char** argv, int first);
int p2pbenchWorkerMain(int argc, char** argv, int first);
int overlapMain(int argc, char** argv, int first);
int overlapWorkerMain(int argc, char** argv, int first);
int tuneMain(int argc, char** argv, int first);
int tuneWorkerMain(int argc, char** argv, int first);
int launchMain(int argc, char** argv, int first);
int faultsMain(int argc, char** argv, int first);
int faultsWorkerMain(int argc, char** argv, int first);
int simulateMain(int argc, char** argv, int first);
}  // namespace tccl::cli
