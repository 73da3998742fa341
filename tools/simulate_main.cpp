// tccl-simulate: the program behind `tccl simulate`, which execs it with its own
// arguments ("simulate" first). It alone links SimGrid; see execSimulate in main.cpp.
#include <cstring>
#include <iostream>

#include "cli.hpp"
#include "subcommands.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "simulate") != 0) {
    std::cerr << "tccl-simulate: the program behind `tccl simulate`; run that (tccl --help)\n";
    return 2;
  }
  return tccl::cli::runReported("simulate", [&] { return tccl::cli::simulateMain(argc, argv, 2); });
}
