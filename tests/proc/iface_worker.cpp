// Worker of tests/proc/iface_test.cpp: builds a Communicator over the store named by
// argv[1] ("tcp": TCCL_STORE=host:port; "file:PATH": a FileStore), runs two all-reduces
// (ring and auto) over exact int64 data, and publishes "iface/<rank>" in that store:
//   "ok <listen address>"       every check passed (exit 0)
//   "error <kind> <message>"    a tccl::Error, e.g. from the constructor (exit 1)
// Rank and world come from TCCL_RANK and TCCL_WORLD_SIZE.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "net/socket.hpp"
#include "tccl/tccl.hpp"

using namespace tccl;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: tccl_iface_worker tcp|file:PATH\n";
    return 2;
  }
  const std::string where = argv[1];
  const int rank = std::atoi(std::getenv("TCCL_RANK") ? std::getenv("TCCL_RANK") : "0");
  const int size = std::atoi(std::getenv("TCCL_WORLD_SIZE") ? std::getenv("TCCL_WORLD_SIZE") : "1");
  std::shared_ptr<Store> store;
  try {
    if (where.rfind("file:", 0) == 0) {
      store = std::make_shared<FileStore>(where.substr(5));
    } else {
      const char* addr = std::getenv("TCCL_STORE");
      auto [host, port] = net::splitHostPort(addr ? addr : "");
      store = std::make_shared<TcpStore>(host, port, std::chrono::milliseconds(10000));
    }
  } catch (const Error& e) {
    std::cerr << "[iface worker rank " << rank << "] no store: " << e.what() << std::endl;
    return 3;
  }
  const std::string key = "iface/" + std::to_string(rank);
  try {
    CommOptions opts;
    opts.timeout = std::chrono::milliseconds(20000);
    Communicator comm(store, rank, size, opts);
    for (Algorithm algo : {Algorithm::Ring, Algorithm::Auto}) {
      std::vector<int64_t> buf(1001);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<int64_t>(i) * (rank + 1);
      comm.allreduce(std::span<int64_t>(buf), ReduceOp::Sum, {algo, std::nullopt});
      const int64_t factor = static_cast<int64_t>(size) * (size + 1) / 2;
      for (size_t i = 0; i < buf.size(); ++i) {
        if (buf[i] != static_cast<int64_t>(i) * factor) {
          store->setString(
              key, "error Check index " + std::to_string(i) + " = " + std::to_string(buf[i]));
          return 1;
        }
      }
    }
    store->setString(key, "ok " + comm.listenAddress());
  } catch (const Error& e) {
    std::cerr << "[iface worker rank " << rank << "] " << e.what() << std::endl;
    try {
      store->setString(key, "error " + std::string(toString(e.kind())) + " " + e.cause());
    } catch (const Error&) {
    }
    return 1;
  }
  return 0;
}
