// Bootstrap: what a rank decides and publishes before it can talk to its peers (core/).
//
// Store keys (under the communicator's namespace) written here:
//   jobid      the job record rank 0 writes (encodeJobRecord): the job id, which ties
//              every connection to this job, and rank 0's link model, so that Auto picks
//              the same algorithm on every rank whatever each host's tune file says
//   hostid/0   rank 0's HostIdentity, for the loopback rule of the listen address
//   exited     counter: ranks that have left (the store's host waits for all of them)
// (and, by the transport and the topology: addr/<rank>, host/<rank>).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "algorithms/select.hpp"
#include "tccl/store.hpp"
#include "transport/transport.hpp"

namespace tccl::bootstrap {

inline constexpr const char* kJobRecordKey = "jobid";
inline constexpr const char* kHostIdKey = "hostid/0";
inline constexpr const char* kExitedKey = "exited";

// The Communicator's whole decision for one rank: an explicit address (CommOptions::
// listenAddress) wins; else TCCL_SOCKET_IFNAME / TCCL_SOCKET_FAMILY / the route; then
// the loopback rule (rank 0 publishes its HostIdentity under "hostid/0" in `store`, the
// namespaced store, and a rank about to listen on loopback reads it). Logs the choice
// and why at INFO; throws InvalidArgumentError on no match or a refused loopback.
std::string decideListenAddress(const std::string& explicitAddress, const std::string& routeAddress,
                                Store& store, int rank, int worldSize,
                                std::chrono::milliseconds timeout);

// What rank 0 publishes for every rank to read: "<job id> <algo::encodeLinkModel>", every
// field of the model (so that ranks with different tune files still choose alike).
struct JobRecord {
  uint64_t jobId = 0;
  algo::LinkModel model;
};
std::string encodeJobRecord(const JobRecord& record);
std::optional<JobRecord> decodeJobRecord(const std::string& s);

// Rank 0 draws the job id (the hash of TCCL_JOB_ID, else random), sets model.cores to its
// cores (TCCL_CORES, else its affinity mask's) and publishes the record; every other rank
// waits for it (up to `timeout`) and returns it. Throws Store on a malformed record.
JobRecord joinJob(Store& store, int rank, const algo::LinkModel& model,
                  std::chrono::milliseconds timeout);

// The sockets' buffer sizes (TCCL_SOCKET_BUFFER, or the default for same-host links:
// config::socketBufferBytes) into `tc`.
void configureBuffers(TransportConfig& tc);

// Several sockets per peer (docs/nsocks.md): TCCL_NSOCKS, and from which payload size
// the collectives' links stripe, TCCL_STRIPE_BYTES or else the cost model's choice
// (algo::chooseStriping over the job's link model and segment size), into `tc`; `why`
// (optional) gets the decision in words, for the INFO log.
void configureStriping(TransportConfig& tc, const algo::LinkModel& model, size_t segmentBytes,
                       std::string* why = nullptr);

// The cores this process may run on (its affinity mask), at least 1.
int onlineCores();

}  // namespace tccl::bootstrap
