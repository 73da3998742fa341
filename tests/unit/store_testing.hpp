// The store tests' shared parts: one factory per Store implementation (make(): the
// store under test; another(): a second handle onto the same data, as a different rank
// would hold it) and the typed conformance fixture every implementation runs.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "tccl/store.hpp"

namespace tccl::storetest {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kShortTimeout = 150ms;
constexpr auto kLongTimeout = 10s;

inline Bytes bytesOf(const std::string& s) { return Bytes(s.begin(), s.end()); }

inline int64_t msSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tccl_store_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// ---- one factory per implementation ------------------------------------------------
// make(): the store under test. another(): a second handle onto the same data, as a
// different rank would hold it (the same object where the store is in-process).

struct HashStoreFactory {
  static constexpr const char* kName = "HashStore";
  std::shared_ptr<HashStore> store = std::make_shared<HashStore>();
  std::shared_ptr<Store> make() { return store; }
  std::shared_ptr<Store> another() { return store; }
};

struct FileStoreFactory {
  static constexpr const char* kName = "FileStore";
  TempDir dir;
  std::string path = dir.path() + "/store";
  std::shared_ptr<Store> make() { return std::make_shared<FileStore>(path); }
  std::shared_ptr<Store> another() { return std::make_shared<FileStore>(path); }
};

struct TcpStoreFactory {
  static constexpr const char* kName = "TcpStore";
  std::unique_ptr<TcpStoreServer> server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  std::shared_ptr<Store> make() {
    return std::make_shared<TcpStore>("127.0.0.1", server->port(), 5s);
  }
  std::shared_ptr<Store> another() { return make(); }
};

struct PrefixStoreFactory {
  static constexpr const char* kName = "PrefixStore";
  std::shared_ptr<HashStore> base = std::make_shared<HashStore>();
  std::shared_ptr<Store> make() { return std::make_shared<PrefixStore>("job7", base); }
  std::shared_ptr<Store> another() { return make(); }
};

template <typename Factory>
class StoreConformance : public ::testing::Test {
 protected:
  void SetUp() override { store = factory.make(); }
  Factory factory;
  std::shared_ptr<Store> store;
};

struct FactoryName {
  template <typename T>
  static std::string GetName(int) {
    return T::kName;
  }
};

using Factories =
    ::testing::Types<HashStoreFactory, FileStoreFactory, TcpStoreFactory, PrefixStoreFactory>;

}  // namespace tccl::storetest
