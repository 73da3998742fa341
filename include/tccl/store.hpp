// Rendezvous stores: the small key-value service ranks use to find each other.
//
// Semantics shared by every implementation (tests/unit/store_test.cpp runs one
// conformance suite against all of them):
//   set(k, v)          overwrite k.
//   get(k)             wait until k exists (up to the store's timeout), return its value.
//   add(k, delta)      k holds a decimal int64 (absent = 0); add delta atomically and
//                      return the new value. The stored value is the decimal text.
//   check(keys)        true iff every key exists right now; never waits.
//   wait(keys, t)      block until every key exists or t passes; on timeout throws a
//                      TimeoutError (ErrorKind::Timeout) whose message names the keys
//                      still missing. get() times out the same way.
//   erase(k)           remove k; returns whether it existed.
//   multiGet(keys, t)  get() of every key in one request: waits until all exist or t
//                      passes (the store's timeout by default; the timeout names the
//                      missing keys), returns their values in the order asked.
//   multiSet(keys, vs) set() of every pair in one request, applied in order (atomically
//                      for HashStore, FileStore and TcpStore).
//   compareSet(k, expected, desired)
//                      atomically: if k holds `expected`, or k is absent and `expected`
//                      is empty, k becomes `desired`. Returns the value k holds after the
//                      call (empty when absent), as torch.distributed's compare_set.
// Connection failures and protocol errors of TcpStore throw StoreError.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tccl/types.hpp"

namespace tccl {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout{300000};

  virtual ~Store() = default;
  virtual void set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes get(const std::string& key) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool erase(const std::string& key) = 0;
  // Defaults: one wait() then get() per key; set() per pair. Every tccl store overrides
  // them with one request; a store of its own (a user's) gets these for free.
  virtual std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout);
  virtual void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values);
  // No default can be atomic: a store that does not override it throws InvalidArgument.
  virtual Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired);

  // wait() with the store's own timeout.
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys) {
    return multiGet(keys, timeout());
  }
  void setString(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string getString(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void setTimeout(std::chrono::milliseconds t) { timeout_ = t; }

 protected:
  std::chrono::milliseconds timeout_ = kDefaultTimeout;
};

// In-process store (threads of one process). Thread-safe.
class HashStore : public Store {
 public:
  HashStore();
  ~HashStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  using Store::multiGet;
  using Store::wait;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A store in one file, shared by processes on one host or on a shared filesystem.
// Writes are appended records under an exclusive flock(2); reads replay the file.
class FileStore : public Store {
 public:
  explicit FileStore(std::string path);
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  using Store::multiGet;
  using Store::wait;
  const std::string& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The TCP store server. Any process may host one; it serves on a background thread
// until destroyed. Port 0 picks an ephemeral port; port() tells which.
class TcpStoreServer {
 public:
  // host: address to bind ("0.0.0.0", "127.0.0.1", "::", "::1", or a name).
  explicit TcpStoreServer(const std::string& host = "127.0.0.1", uint16_t port = 0);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  uint16_t port() const;
  const std::string& host() const;
  void stop();

  // What the server has done so far (a snapshot; for benchmarks and the launcher's log).
  struct Stats {
    uint64_t requests = 0;         // requests decoded and served
    uint64_t accepted = 0;         // connections accepted
    uint64_t connections = 0;      // open now
    uint64_t peakConnections = 0;  // most open at once
    uint64_t limitHits = 0;        // times a limit refused or held back something
  };
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Client of a TcpStoreServer. Connects with retry until connectTimeout passes. One
// client serves one thread at a time (calls are serialised by an internal mutex).
class TcpStore : public Store {
 public:
  TcpStore(const std::string& host, uint16_t port,
           std::chrono::milliseconds connectTimeout = std::chrono::milliseconds(60000));
  ~TcpStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  using Store::multiGet;
  using Store::wait;
  const std::string& host() const;
  uint16_t port() const;
  // The local IP address of this client's connection to the server: the address of
  // the interface that routes to the store. Ranks publish their listener on it.
  std::string localAddress() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Namespaces every key of an underlying store under "prefix/".
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool erase(const std::string& key) override;
  std::vector<Bytes> multiGet(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) override;
  void multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) override;
  Bytes compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  using Store::multiGet;
  using Store::wait;

 private:
  std::string k(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace tccl
