#include "core/launch_env.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "net/socket.hpp"
#include "tccl/error.hpp"

extern char** environ;

namespace tccl::launch {
namespace {

// One launcher's names for the four fields. localSize may be null: SLURM spells it
// as a per-node list (see slurmLocalWorldSize).
struct Source {
  Launcher launcher;
  const char* rank;
  const char* size;
  const char* localRank;
  const char* localSize;
};

// The order is the precedence: an inner launcher before the ones it may run under.
constexpr Source kLaunchers[] = {
    {Launcher::Torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {Launcher::Mpich, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr},
};
constexpr Source kTccl = {Launcher::Tccl, "TCCL_RANK", "TCCL_WORLD_SIZE", "TCCL_LOCAL_RANK",
                          "TCCL_LOCAL_WORLD_SIZE"};

constexpr const char* kStartHint =
    "set TCCL_RANK and TCCL_WORLD_SIZE, or start the program under tccl launch, torchrun, "
    "mpirun or srun";

[[noreturn]] void invalid(const std::string& msg) { throwError(ErrorKind::InvalidArgument, msg); }

std::optional<std::string> lookup(const EnvMap& env, const char* name) {
  if (name == nullptr) return std::nullopt;
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return std::nullopt;
  return it->second;
}

std::optional<int> intVar(const EnvMap& env, const char* name, int lo, int hi) {
  auto v = lookup(env, name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || x < lo || x > hi) {
    invalid(std::string(name) + "='" + *v + "' is not an integer in [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]");
  }
  return static_cast<int>(x);
}

constexpr int kMaxWorld = 1 << 30;

// SLURM_STEP_TASKS_PER_NODE (srun's step; SLURM_TASKS_PER_NODE for the allocation) lists
// tasks per node as "2(x3),1". Which entry is this node's is not reliably known from
// the environment (SLURM_NODEID counts the allocation's nodes, not the step's), so the
// local world size is only given when every node runs the same number of tasks.
int slurmLocalWorldSize(const EnvMap& env, const char** name) {
  *name = "SLURM_STEP_TASKS_PER_NODE";
  auto v = lookup(env, *name);
  if (!v) {
    *name = "SLURM_TASKS_PER_NODE";
    v = lookup(env, *name);
  }
  if (!v) return -1;
  int common = -1;
  const char* p = v->c_str();
  while (*p != '\0') {
    char* end = nullptr;
    long n = std::strtol(p, &end, 10);
    if (end == p || n < 1 || n > kMaxWorld) return -1;
    p = end;
    if (*p == '(') {  // "(xK)": repeated K times; the count does not matter here
      const char* close = std::strchr(p, ')');
      if (close == nullptr || p[1] != 'x') return -1;
      p = close + 1;
    }
    if (common != -1 && common != n) return -1;
    common = static_cast<int>(n);
    if (*p == ',') {
      ++p;
    } else if (*p != '\0') {
      return -1;
    }
  }
  return common;
}

}  // namespace

std::string_view toString(Launcher l) {
  switch (l) {
    case Launcher::Tccl:
      return "tccl";
    case Launcher::Torchrun:
      return "torchrun";
    case Launcher::OpenMpi:
      return "Open MPI";
    case Launcher::Mpich:
      return "MPICH/PMI";
    case Launcher::Slurm:
      return "SLURM";
  }
  return "?";
}

std::string LaunchEnv::describe() const {
  std::string s = "rank " + std::to_string(rank) + " of " + std::to_string(worldSize);
  if (localRank >= 0) {
    s += " (local " + std::to_string(localRank);
    if (localWorldSize > 0) s += " of " + std::to_string(localWorldSize);
    s += ")";
  }
  s += " from " + std::string(toString(launcher)) + " (" + rankVariables + ")";
  if (hasStore) {
    s += "; store " + net::joinHostPort(storeHost, storePort) + " from " + storeVariables;
    s += hostsStore ? ", hosted by this rank" : ", hosted elsewhere";
  }
  return s;
}

namespace {

// Rank and world size: TCCL_ variables win field by field over the first launcher that
// sets either. Sets *outerOut to that launcher (null: none) and *sizeNameOut to the
// variable the world size came from.
LaunchEnv resolveRank(const EnvMap& env, const Source** outerOut, std::string* sizeNameOut) {
  // The launcher that gives what TCCL_ variables do not: the first whose rank or world
  // size is set.
  const Source* outer = nullptr;
  for (const Source& s : kLaunchers) {
    if (lookup(env, s.rank) || lookup(env, s.size)) {
      outer = &s;
      break;
    }
  }
  auto tcclRank = intVar(env, kTccl.rank, 0, kMaxWorld);
  auto tcclSize = intVar(env, kTccl.size, 1, kMaxWorld);
  std::optional<int> rank = tcclRank;
  std::optional<int> size = tcclSize;
  if (outer != nullptr) {
    if (!rank) rank = intVar(env, outer->rank, 0, kMaxWorld);
    if (!size) size = intVar(env, outer->size, 1, kMaxWorld);
  }
  if (!rank || !size) {
    if (outer == nullptr && !tcclRank && !tcclSize) {
      invalid("cannot tell this process's rank and world size: " + std::string(kStartHint));
    }
    // Half of a set: name what is there and what is missing.
    const Source& s = outer != nullptr ? *outer : kTccl;
    const char* have = rank ? (tcclRank ? kTccl.rank : s.rank) : (tcclSize ? kTccl.size : s.size);
    const char* missing = rank ? s.size : s.rank;
    std::string msg = std::string(have) + " is set but " + missing;
    if (&s != &kTccl) msg += std::string(" (or ") + (rank ? kTccl.size : kTccl.rank) + ")";
    msg += " is not: a partial " + std::string(toString(s.launcher)) + " environment; set both";
    invalid(msg);
  }

  LaunchEnv out;
  out.rank = *rank;
  out.worldSize = *size;
  const bool rankFromTccl = tcclRank.has_value();
  out.launcher = rankFromTccl ? Launcher::Tccl : outer->launcher;
  out.rankVariables = std::string(rankFromTccl ? kTccl.rank : outer->rank) + "/" +
                      (tcclSize ? kTccl.size : outer->size);
  const std::string sizeName = tcclSize ? kTccl.size : outer->size;
  const std::string rankName = rankFromTccl ? kTccl.rank : outer->rank;
  if (out.rank >= out.worldSize) {
    invalid(rankName + "=" + std::to_string(out.rank) + " is not below " + sizeName + "=" +
            std::to_string(out.worldSize));
  }
  *outerOut = outer;
  *sizeNameOut = sizeName;
  return out;
}

// Local rank and size: optional, from the same precedence.
void resolveLocal(const EnvMap& env, const Source* outer, const std::string& sizeName,
                  LaunchEnv& out) {
  const char* localRankName = nullptr;
  if (auto v = intVar(env, kTccl.localRank, 0, kMaxWorld)) {
    out.localRank = *v;
    localRankName = kTccl.localRank;
  } else if (outer != nullptr) {
    if (auto w = intVar(env, outer->localRank, 0, kMaxWorld)) {
      out.localRank = *w;
      localRankName = outer->localRank;
    }
  }
  const char* localSizeName = nullptr;
  if (auto v = intVar(env, kTccl.localSize, 1, kMaxWorld)) {
    out.localWorldSize = *v;
    localSizeName = kTccl.localSize;
  } else if (outer != nullptr && outer->localSize != nullptr) {
    if (auto w = intVar(env, outer->localSize, 1, kMaxWorld)) {
      out.localWorldSize = *w;
      localSizeName = outer->localSize;
    }
  } else if (outer != nullptr && outer->launcher == Launcher::Slurm) {
    out.localWorldSize = slurmLocalWorldSize(env, &localSizeName);
  }
  if (out.localWorldSize > out.worldSize) {
    invalid(std::string(localSizeName) + "=" + std::to_string(out.localWorldSize) +
            " is more than the world size " + sizeName + "=" + std::to_string(out.worldSize));
  }
  if (out.localRank >= 0 && out.localWorldSize > 0 && out.localRank >= out.localWorldSize) {
    invalid(std::string(localRankName) + "=" + std::to_string(out.localRank) + " is not below " +
            (localSizeName != nullptr ? localSizeName : "the local world size") + "=" +
            std::to_string(out.localWorldSize));
  }
  if (out.localRank >= out.worldSize) {
    invalid(std::string(localRankName) + "=" + std::to_string(out.localRank) +
            " is not below the world size " + sizeName + "=" + std::to_string(out.worldSize));
  }
}

// The store: TCCL_STORE, else MASTER_ADDR/MASTER_PORT (rank 0 hosts it).
void resolveStore(const EnvMap& env, bool requireStore, LaunchEnv& out) {
  if (auto addr = lookup(env, "TCCL_STORE")) {
    std::pair<std::string, uint16_t> hp;
    try {
      hp = net::splitHostPort(*addr);
    } catch (const Error&) {
      invalid("TCCL_STORE='" + *addr + "' is not host:port (or [v6]:port)");
    }
    if (hp.first.empty() || hp.second == 0) {
      invalid("TCCL_STORE='" + *addr + "' needs a host and a port other than 0");
    }
    out.hasStore = true;
    out.storeHost = hp.first;
    out.storePort = hp.second;
    out.storeVariables = "TCCL_STORE";
    return;
  }
  auto host = lookup(env, "MASTER_ADDR");
  auto port = intVar(env, "MASTER_PORT", 1, 65535);
  if (host && port) {
    out.hasStore = true;
    out.storeHost = *host;
    out.storePort = static_cast<uint16_t>(*port);
    out.storeVariables = "MASTER_ADDR/MASTER_PORT";
    out.hostsStore = out.rank == 0;
    if (lookup(env, "TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True") {
      // torchrun's agent already serves its own (torch-protocol) store on MASTER_PORT.
      if (*port == 65535) {
        invalid(
            "MASTER_PORT=65535 under torchrun's agent store: tccl's store goes on "
            "MASTER_PORT + 1; choose a lower --master_port or set TCCL_STORE");
      }
      out.storePort = static_cast<uint16_t>(*port + 1);
      out.storeVariables = "MASTER_ADDR/MASTER_PORT+1 (torchrun agent store on MASTER_PORT)";
    }
    return;
  }
  if (host || port) {
    invalid(std::string(host ? "MASTER_ADDR" : "MASTER_PORT") + " is set but " +
            (host ? "MASTER_PORT" : "MASTER_ADDR") + " is not; set both (rank 0 hosts the store " +
            "there) or TCCL_STORE=host:port");
  }
  if (requireStore) {
    std::string msg = "rank " + std::to_string(out.rank) + " of " + std::to_string(out.worldSize) +
                      " (from " + std::string(toString(out.launcher)) + ", " + out.rankVariables +
                      ") has no store address: set TCCL_STORE=host:port of a running "
                      "TcpStoreServer, or MASTER_ADDR and MASTER_PORT (rank 0 then hosts the "
                      "store there)";
    if (out.launcher == Launcher::OpenMpi) {
      msg += ", e.g. mpirun -x MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500";
    } else if (out.launcher == Launcher::Slurm) {
      msg +=
          ", e.g. export MASTER_ADDR=<first node of $SLURM_JOB_NODELIST> MASTER_PORT=29500 "
          "before srun";
    } else if (out.launcher == Launcher::Mpich) {
      msg += ", e.g. mpiexec -genv MASTER_ADDR <rank 0's host> -genv MASTER_PORT 29500";
    }
    invalid(msg);
  }
}

}  // namespace

LaunchEnv resolveLaunchEnv(const EnvMap& env, bool requireStore) {
  const Source* outer = nullptr;
  std::string sizeName;
  LaunchEnv out = resolveRank(env, &outer, &sizeName);
  resolveLocal(env, outer, sizeName, out);
  resolveStore(env, requireStore, out);
  return out;
}

EnvMap processEnvironment() {
  EnvMap m;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) m.emplace(std::string(*e, static_cast<size_t>(eq - *e)), eq + 1);
  }
  return m;
}

LaunchEnv resolveLaunchEnv(bool requireStore) {
  return resolveLaunchEnv(processEnvironment(), requireStore);
}

}  // namespace tccl::launch
