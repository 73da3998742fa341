// Who am I, and where is the store: the rank environment of every launcher tccl starts
// under (tccl launch, torchrun, Open MPI's mpirun, MPICH's mpiexec, SLURM's srun), read
// by one pure function so that the precedence is written down once and unit-tested.
//
// Precedence (docs/launch.md has the table):
//  - Each TCCL_ variable, when set, gives its field: TCCL_RANK, TCCL_WORLD_SIZE,
//    TCCL_LOCAL_RANK, TCCL_LOCAL_WORLD_SIZE.
//  - The fields no TCCL_ variable gives come from the first launcher, in the order
//    torchrun > Open MPI > MPICH/PMI > SLURM, whose rank or world-size variable is set.
//    Launchers nest (torchrun under srun, mpirun inside a SLURM allocation): the inner
//    one is listed first and wins; the outer one's variables are ignored, not compared.
//  - The store: TCCL_STORE=host:port (every rank is a client), else MASTER_ADDR and
//    MASTER_PORT (rank 0 hosts the store there), else an error saying what to set.
//    Under torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE=True) MASTER_PORT is
//    torch's own store, which speaks torch's protocol: rank 0 hosts tccl's on
//    MASTER_PORT + 1.
// Empty values count as unset. Set-but-malformed values, a launcher's rank without its
// world size (or the reverse), and values that contradict each other (rank >= world
// size, local rank >= local world size) throw InvalidArgumentError naming the variables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace tccl::launch {

using EnvMap = std::map<std::string, std::string>;

enum class Launcher { Tccl, Torchrun, OpenMpi, Mpich, Slurm };
// "tccl", "torchrun", "Open MPI", "MPICH/PMI", "SLURM".
std::string_view toString(Launcher l);

struct LaunchEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = -1;                  // -1: no launcher said
  int localWorldSize = -1;             // -1: no launcher said
  Launcher launcher = Launcher::Tccl;  // where the rank came from
  std::string rankVariables;           // "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE"

  bool hasStore = false;
  std::string storeHost;
  uint16_t storePort = 0;
  std::string storeVariables;  // "TCCL_STORE" or "MASTER_ADDR/MASTER_PORT"
  bool hostsStore = false;     // this rank starts the TcpStoreServer on storeHost:storePort

  // "rank 2 of 4 (local 2 of 4) from Open MPI (OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE);
  //  store 127.0.0.1:29500 from MASTER_ADDR/MASTER_PORT, hosted by rank 0"
  std::string describe() const;
};

// The pure resolver. With requireStore, a missing store address is an error; without,
// hasStore says whether there is one.
LaunchEnv resolveLaunchEnv(const EnvMap& env, bool requireStore = true);

// This process's environment as a map, and the resolver applied to it.
EnvMap processEnvironment();
LaunchEnv resolveLaunchEnv(bool requireStore = true);

}  // namespace tccl::launch
