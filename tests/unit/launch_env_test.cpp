// The rank environment of every launcher, and which one wins (src/core/launch_env.hpp).
#include "core/launch_env.hpp"

#include <gtest/gtest.h>

#include "scoped_env.hpp"
#include "tccl/error.hpp"

namespace tccl::launch {
namespace {

// The message of the InvalidArgumentError that resolving env throws ("" if none).
std::string errorOf(const EnvMap& env, bool requireStore = true) {
  try {
    resolveLaunchEnv(env, requireStore);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

const EnvMap kMaster = {{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};

EnvMap with(EnvMap a, const EnvMap& b) {
  for (const auto& [k, v] : b) a[k] = v;
  return a;
}

TEST(LaunchEnv, TcclVariables) {
  const LaunchEnv e = resolveLaunchEnv({{"TCCL_RANK", "3"},
                                        {"TCCL_WORLD_SIZE", "8"},
                                        {"TCCL_LOCAL_RANK", "1"},
                                        {"TCCL_LOCAL_WORLD_SIZE", "2"},
                                        {"TCCL_STORE", "127.0.0.1:4000"}});
  EXPECT_EQ(e.launcher, Launcher::Tccl);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localWorldSize, 2);
  EXPECT_TRUE(e.hasStore);
  EXPECT_EQ(e.storeHost, "127.0.0.1");
  EXPECT_EQ(e.storePort, 4000);
  EXPECT_EQ(e.storeVariables, "TCCL_STORE");
  EXPECT_FALSE(e.hostsStore);  // TCCL_STORE: someone else serves it
  EXPECT_EQ(e.rankVariables, "TCCL_RANK/TCCL_WORLD_SIZE");
}

TEST(LaunchEnv, TcclStoreIPv6) {
  const LaunchEnv e =
      resolveLaunchEnv({{"TCCL_RANK", "0"}, {"TCCL_WORLD_SIZE", "1"}, {"TCCL_STORE", "[::1]:7"}});
  EXPECT_EQ(e.storeHost, "::1");
  EXPECT_EQ(e.storePort, 7);
  EXPECT_EQ(e.localRank, -1);  // nobody said
  EXPECT_EQ(e.localWorldSize, -1);
  EXPECT_EQ(e.describe(),
            "rank 0 of 1 from tccl (TCCL_RANK/TCCL_WORLD_SIZE); store [::1]:7 "
            "from TCCL_STORE, hosted elsewhere");
}

TEST(LaunchEnv, Torchrun) {
  const EnvMap env = with(kMaster, {{"RANK", "0"},
                                    {"WORLD_SIZE", "4"},
                                    {"LOCAL_RANK", "0"},
                                    {"LOCAL_WORLD_SIZE", "2"},
                                    {"GROUP_RANK", "0"}});
  const LaunchEnv e = resolveLaunchEnv(env);
  EXPECT_EQ(e.launcher, Launcher::Torchrun);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.worldSize, 4);
  EXPECT_EQ(e.localRank, 0);
  EXPECT_EQ(e.localWorldSize, 2);
  EXPECT_EQ(e.storeHost, "10.0.0.1");
  EXPECT_EQ(e.storePort, 29500);
  EXPECT_TRUE(e.hostsStore);  // rank 0 hosts under MASTER_ADDR/MASTER_PORT
  EXPECT_EQ(e.describe(),
            "rank 0 of 4 (local 0 of 2) from torchrun (RANK/WORLD_SIZE); store 10.0.0.1:29500 "
            "from MASTER_ADDR/MASTER_PORT, hosted by this rank");
  EXPECT_FALSE(resolveLaunchEnv(with(env, {{"RANK", "3"}, {"LOCAL_RANK", "1"}})).hostsStore);
}

TEST(LaunchEnv, TorchrunAgentStoreMovesTcclsStoreOnePortUp) {
  // torchrun's static rendezvous serves torch's own store on MASTER_PORT; tccl's goes
  // one port up, still hosted by rank 0. "False" (torchrun --standalone) changes nothing.
  EnvMap env = with(kMaster, {{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(resolveLaunchEnv(with(env, {{"TORCHELASTIC_USE_AGENT_STORE", "False"}})).storePort,
            29500);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  LaunchEnv e = resolveLaunchEnv(env);
  EXPECT_EQ(e.storePort, 29501);
  EXPECT_TRUE(e.hostsStore);
  EXPECT_FALSE(resolveLaunchEnv(with(env, {{"RANK", "1"}})).hostsStore);
  EXPECT_TRUE(contains(errorOf(with(env, {{"MASTER_PORT", "65535"}})), "MASTER_PORT + 1"));
  // TCCL_STORE wins over all of it (what tccl launch gives its ranks).
  e = resolveLaunchEnv(with(env, {{"TCCL_STORE", "127.0.0.1:5000"}}));
  EXPECT_EQ(e.storePort, 5000);
  EXPECT_FALSE(e.hostsStore);
}

TEST(LaunchEnv, OpenMpi) {
  const EnvMap env = with(kMaster, {{"OMPI_COMM_WORLD_RANK", "5"},
                                    {"OMPI_COMM_WORLD_SIZE", "6"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}});
  const LaunchEnv e = resolveLaunchEnv(env);
  EXPECT_EQ(e.launcher, Launcher::OpenMpi);
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.worldSize, 6);
  EXPECT_EQ(e.localRank, 2);
  EXPECT_EQ(e.localWorldSize, 3);
  EXPECT_FALSE(e.hostsStore);
  EXPECT_EQ(e.rankVariables, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
}

TEST(LaunchEnv, MpichPmi) {
  const LaunchEnv e = resolveLaunchEnv(with(
      kMaster,
      {{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "3"}}));
  EXPECT_EQ(e.launcher, Launcher::Mpich);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.worldSize, 3);
  EXPECT_EQ(e.localRank, 0);
  EXPECT_EQ(e.localWorldSize, 3);
  EXPECT_TRUE(e.hostsStore);
}

TEST(LaunchEnv, Slurm) {
  EnvMap env = with(kMaster, {{"SLURM_PROCID", "7"},
                              {"SLURM_NTASKS", "8"},
                              {"SLURM_LOCALID", "3"},
                              {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                              {"SLURM_TASKS_PER_NODE", "2(x4)"}});
  LaunchEnv e = resolveLaunchEnv(env);
  EXPECT_EQ(e.launcher, Launcher::Slurm);
  EXPECT_EQ(e.rank, 7);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localRank, 3);
  EXPECT_EQ(e.localWorldSize, 4);  // the step's, not the allocation's
  // Uneven nodes: which entry is ours is not known, so the local size is not given.
  env["SLURM_STEP_TASKS_PER_NODE"] = "3(x2),2";
  EXPECT_EQ(resolveLaunchEnv(env).localWorldSize, -1);
  env["SLURM_STEP_TASKS_PER_NODE"] = "4,4";
  EXPECT_EQ(resolveLaunchEnv(env).localWorldSize, 4);
  env["SLURM_STEP_TASKS_PER_NODE"] = "garbage";
  EXPECT_EQ(resolveLaunchEnv(env).localWorldSize, -1);
  env.erase("SLURM_STEP_TASKS_PER_NODE");  // outside a step: the allocation's list
  EXPECT_TRUE(contains(errorOf(env), "SLURM_LOCALID=3 is not below SLURM_TASKS_PER_NODE=2"))
      << errorOf(env);
  env["SLURM_LOCALID"] = "1";
  EXPECT_EQ(resolveLaunchEnv(env).localWorldSize, 2);
  env["SLURM_TASKS_PER_NODE"] = "16";
  EXPECT_TRUE(contains(errorOf(env), "SLURM_TASKS_PER_NODE=16 is more than the world size"))
      << errorOf(env);
}

TEST(LaunchEnv, PrecedenceTcclThenTorchrunThenOpenMpiThenMpichThenSlurm) {
  const EnvMap slurm = {{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "9"}, {"SLURM_LOCALID", "4"}};
  const EnvMap mpich = {{"PMI_RANK", "3"}, {"PMI_SIZE", "9"}, {"MPI_LOCALRANKID", "3"}};
  const EnvMap ompi = {{"OMPI_COMM_WORLD_RANK", "2"},
                       {"OMPI_COMM_WORLD_SIZE", "9"},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}};
  const EnvMap torch = {{"RANK", "1"}, {"WORLD_SIZE", "9"}, {"LOCAL_RANK", "1"}};
  const EnvMap tccl = {{"TCCL_RANK", "0"}, {"TCCL_WORLD_SIZE", "9"}, {"TCCL_LOCAL_RANK", "0"}};
  EnvMap env = kMaster;
  struct Step {
    const EnvMap* add;
    Launcher expect;
    int rank;
  };
  // Each launcher added on top of the previous ones takes over, rank and local rank.
  for (const Step& s : {Step{&slurm, Launcher::Slurm, 4}, Step{&mpich, Launcher::Mpich, 3},
                        Step{&ompi, Launcher::OpenMpi, 2}, Step{&torch, Launcher::Torchrun, 1},
                        Step{&tccl, Launcher::Tccl, 0}}) {
    env = with(env, *s.add);
    const LaunchEnv e = resolveLaunchEnv(env);
    EXPECT_EQ(e.launcher, s.expect) << toString(s.expect);
    EXPECT_EQ(e.rank, s.rank) << toString(s.expect);
    EXPECT_EQ(e.localRank, s.rank) << toString(s.expect);
    EXPECT_EQ(e.worldSize, 9);
  }
  // The outer launchers' values are not compared: srun running torchrun gives each
  // torchrun worker the node's SLURM_PROCID, which differs from its RANK.
  EXPECT_EQ(resolveLaunchEnv(with(kMaster, with(slurm, {{"RANK", "8"}, {"WORLD_SIZE", "9"}}))).rank,
            8);
}

TEST(LaunchEnv, TcclVariablesOverrideFieldByField) {
  // Today's fromEnv behaviour, kept: TCCL_RANK with torchrun's WORLD_SIZE.
  LaunchEnv e = resolveLaunchEnv(with(kMaster, {{"TCCL_RANK", "2"}, {"WORLD_SIZE", "4"}}));
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.worldSize, 4);
  EXPECT_EQ(e.launcher, Launcher::Tccl);
  EXPECT_EQ(e.rankVariables, "TCCL_RANK/WORLD_SIZE");
  // TCCL_LOCAL_RANK over Open MPI's local rank, the rest from Open MPI.
  e = resolveLaunchEnv(with(kMaster, {{"OMPI_COMM_WORLD_RANK", "1"},
                                      {"OMPI_COMM_WORLD_SIZE", "4"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                      {"TCCL_LOCAL_RANK", "0"}}));
  EXPECT_EQ(e.launcher, Launcher::OpenMpi);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.localRank, 0);
  EXPECT_EQ(e.localWorldSize, 2);
}

TEST(LaunchEnv, EmptyValuesCountAsUnset) {
  const LaunchEnv e = resolveLaunchEnv(with(kMaster, {{"TCCL_RANK", ""},
                                                      {"TCCL_WORLD_SIZE", ""},
                                                      {"TCCL_STORE", ""},
                                                      {"RANK", "1"},
                                                      {"WORLD_SIZE", "2"}}));
  EXPECT_EQ(e.launcher, Launcher::Torchrun);
  EXPECT_EQ(e.storeVariables, "MASTER_ADDR/MASTER_PORT");
}

TEST(LaunchEnv, NothingSetSaysWhatToSet) {
  const std::string err = errorOf({{"PATH", "/bin"}});
  EXPECT_TRUE(contains(err,
                       "set TCCL_RANK and TCCL_WORLD_SIZE, or start the program under tccl "
                       "launch, torchrun, mpirun or srun"))
      << err;
}

TEST(LaunchEnv, PartialSetsAreErrorsNamingBothVariables) {
  std::string err = errorOf(with(kMaster, {{"RANK", "1"}}));
  EXPECT_TRUE(contains(err,
                       "RANK is set but WORLD_SIZE (or TCCL_WORLD_SIZE) is not: a partial "
                       "torchrun environment"))
      << err;
  err = errorOf(with(kMaster, {{"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_TRUE(contains(err,
                       "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK (or TCCL_RANK) "
                       "is not: a partial Open MPI environment"))
      << err;
  err = errorOf(with(kMaster, {{"PMI_RANK", "0"}}));
  EXPECT_TRUE(contains(err, "PMI_RANK is set but PMI_SIZE")) << err;
  err = errorOf(with(kMaster, {{"SLURM_NTASKS", "2"}}));
  EXPECT_TRUE(contains(err, "SLURM_NTASKS is set but SLURM_PROCID")) << err;
  err = errorOf(with(kMaster, {{"TCCL_RANK", "0"}}));
  EXPECT_TRUE(contains(err, "TCCL_RANK is set but TCCL_WORLD_SIZE is not")) << err;
  // Either half may come from TCCL_: this is complete.
  EXPECT_EQ(errorOf(with(kMaster, {{"PMI_RANK", "0"}, {"TCCL_WORLD_SIZE", "2"}})), "");
}

TEST(LaunchEnv, InconsistentValuesAreErrors) {
  std::string err = errorOf(with(kMaster, {{"RANK", "4"}, {"WORLD_SIZE", "4"}}));
  EXPECT_TRUE(contains(err, "RANK=4 is not below WORLD_SIZE=4")) << err;
  err = errorOf(with(
      kMaster, {{"TCCL_RANK", "5"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_TRUE(contains(err, "TCCL_RANK=5 is not below OMPI_COMM_WORLD_SIZE=4")) << err;
  err = errorOf(
      with(kMaster,
           {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}}));
  EXPECT_TRUE(contains(err, "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2")) << err;
  err = errorOf(with(kMaster, {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "8"}}));
  EXPECT_TRUE(contains(err, "LOCAL_WORLD_SIZE=8 is more than the world size WORLD_SIZE=4")) << err;
  err = errorOf(with(kMaster, {{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "5"}}));
  EXPECT_TRUE(contains(err, "LOCAL_RANK=5 is not below the world size WORLD_SIZE=4")) << err;
}

TEST(LaunchEnv, MalformedValuesNameTheVariable) {
  EXPECT_TRUE(contains(errorOf({{"TCCL_RANK", "x"}, {"TCCL_WORLD_SIZE", "2"}}),
                       "TCCL_RANK='x' is not an integer"));
  EXPECT_TRUE(contains(errorOf({{"RANK", "0"}, {"WORLD_SIZE", "0"}}),
                       "WORLD_SIZE='0' is not an integer in [1,"));
  EXPECT_TRUE(contains(errorOf({{"PMI_RANK", "-1"}, {"PMI_SIZE", "2"}}), "PMI_RANK='-1'"));
  EXPECT_TRUE(
      contains(errorOf({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "1x"}}),
               "SLURM_LOCALID='1x'"));
  const EnvMap ranks = {{"TCCL_RANK", "0"}, {"TCCL_WORLD_SIZE", "1"}};
  EXPECT_TRUE(contains(errorOf(with(ranks, {{"TCCL_STORE", "nohost"}})),
                       "TCCL_STORE='nohost' is not host:port"));
  EXPECT_TRUE(contains(errorOf(with(ranks, {{"TCCL_STORE", "h:0"}})), "port other than 0"));
  EXPECT_TRUE(contains(errorOf(with(ranks, {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}})),
                       "MASTER_PORT='70000' is not an integer in [1, 65535]"));
}

TEST(LaunchEnv, StoreAddressMissingOrHalfSet) {
  const EnvMap ompi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  std::string err = errorOf(ompi);
  EXPECT_TRUE(contains(err,
                       "rank 1 of 4 (from Open MPI, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)"
                       " has no store address: set TCCL_STORE=host:port"))
      << err;
  EXPECT_TRUE(contains(err, "mpirun -x MASTER_ADDR=")) << err;
  EXPECT_TRUE(contains(errorOf({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}), "before srun"));
  err = errorOf(with(ompi, {{"MASTER_ADDR", "h"}}));
  EXPECT_TRUE(contains(err, "MASTER_ADDR is set but MASTER_PORT is not")) << err;
  err = errorOf(with(ompi, {{"MASTER_PORT", "1234"}}));
  EXPECT_TRUE(contains(err, "MASTER_PORT is set but MASTER_ADDR is not")) << err;
  // Ranks alone, when the caller does not need a store.
  const LaunchEnv e = resolveLaunchEnv(ompi, /*requireStore=*/false);
  EXPECT_FALSE(e.hasStore);
  EXPECT_EQ(e.rank, 1);
}

TEST(LaunchEnv, ReadsTheProcessEnvironment) {
  testing::ScopedEnv a("TCCL_RANK", "1");
  testing::ScopedEnv b("TCCL_WORLD_SIZE", "3");
  testing::ScopedEnv c("TCCL_STORE", "localhost:99");
  const LaunchEnv e = resolveLaunchEnv();
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.worldSize, 3);
  EXPECT_EQ(e.storeHost, "localhost");
  EXPECT_EQ(processEnvironment().at("TCCL_STORE"), "localhost:99");
}

}  // namespace
}  // namespace tccl::launch
