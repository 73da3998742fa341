// FileStore: one append-only file of records (layout in docs/store.md):
//
//   file   := header record*
//   header := "TCCLFS01"                                   8 bytes
//   record := 'S' u32 keyLen key u32 valueLen value        set (u32 little-endian)
//           | 'E' u32 keyLen key                           erase tombstone
//
// Each instance folds the file into a map incrementally: it remembers how many bytes it
// has replayed and reads only what was appended since. Readers replay under LOCK_SH;
// writers hold LOCK_EX across "replay the tail, decide, append", so add() is one atomic
// read-modify-append across processes. A record cut short by a writer that died
// mid-append is ignored by readers and cut off by the next writer before it appends.
//
// flock(2) locks belong to the open file description, so threads sharing this
// instance's descriptor do not exclude each other through it: a mutex does that. (For
// the same reason a child process must open its own FileStore, not use one inherited
// across fork.)
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "net/socket.hpp"
#include "store/store_protocol.hpp"
#include "tccl/error.hpp"
#include "tccl/store.hpp"

namespace tccl {
namespace {

constexpr char kFileMagic[] = "TCCLFS01";
constexpr size_t kFileHeaderBytes = 8;
constexpr uint8_t kSetRecord = 'S';
constexpr uint8_t kEraseRecord = 'E';

// Polling interval of get()/wait(): starts short so a key that lands soon is seen
// soon, and backs off so hundreds of waiting ranks do not hammer a shared filesystem.
constexpr std::chrono::milliseconds kFirstPoll{1};
constexpr std::chrono::milliseconds kMaxPoll{20};

[[noreturn]] void throwSystem(const std::string& path, const std::string& what, int err) {
  throwError(ErrorKind::System, "FileStore '" + path + "': " + what + ": " + net::errnoString(err));
}

void putU32(Bytes* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint32_t getU32(const uint8_t* p) {
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>(p[i]) << (8 * i);
  return r;
}

Bytes setRecord(const std::string& key, const Bytes& value) {
  Bytes r;
  r.reserve(9 + key.size() + value.size());
  r.push_back(kSetRecord);
  putU32(&r, static_cast<uint32_t>(key.size()));
  r.insert(r.end(), key.begin(), key.end());
  putU32(&r, static_cast<uint32_t>(value.size()));
  r.insert(r.end(), value.begin(), value.end());
  return r;
}

Bytes eraseRecord(const std::string& key) {
  Bytes r;
  r.push_back(kEraseRecord);
  putU32(&r, static_cast<uint32_t>(key.size()));
  r.insert(r.end(), key.begin(), key.end());
  return r;
}

enum class Parse { Complete, Torn, Corrupt };

// Parses the record at p[0, n). Complete: *used is its size and *key / *value (for a
// set; *isSet says which) are filled. Torn: the bytes end inside the record.
Parse parseRecord(const uint8_t* p, size_t n, size_t* used, bool* isSet, std::string* key,
                  Bytes* value, std::string* why) {
  if (n < 1) return Parse::Torn;
  if (p[0] != kSetRecord && p[0] != kEraseRecord) {
    *why = "unknown record type " + std::to_string(p[0]);
    return Parse::Corrupt;
  }
  *isSet = p[0] == kSetRecord;
  size_t pos = 1;
  if (n - pos < 4) return Parse::Torn;
  const uint32_t keyLen = getU32(p + pos);
  pos += 4;
  if (keyLen > storeproto::kMaxKeyBytes) {
    *why = "key length " + std::to_string(keyLen) + " exceeds the limit";
    return Parse::Corrupt;
  }
  if (n - pos < keyLen) return Parse::Torn;
  key->assign(reinterpret_cast<const char*>(p + pos), keyLen);
  pos += keyLen;
  if (*isSet) {
    if (n - pos < 4) return Parse::Torn;
    const uint32_t valueLen = getU32(p + pos);
    pos += 4;
    if (valueLen > storeproto::kMaxValueBytes) {
      *why = "value length " + std::to_string(valueLen) + " exceeds the limit";
      return Parse::Corrupt;
    }
    if (n - pos < valueLen) return Parse::Torn;
    value->assign(p + pos, p + pos + valueLen);
    pos += valueLen;
  }
  *used = pos;
  return Parse::Complete;
}

class FileLock {
 public:
  FileLock(int fd, int op, const std::string& path) : fd_(fd) {
    while (::flock(fd, op) != 0) {
      if (errno == EINTR) continue;
      throwSystem(path, op == LOCK_EX ? "flock(LOCK_EX)" : "flock(LOCK_SH)", errno);
    }
  }
  ~FileLock() { ::flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

struct FileStore::Impl {
  std::string path;
  net::Fd fd;
  std::mutex mu;  // see the top of the file: flock does not exclude threads
  std::unordered_map<std::string, Bytes> data;
  uint64_t replayed = 0;  // bytes of the file folded into data (0: not even the header)

  void reset() {
    data.clear();
    replayed = 0;
  }

  // Folds everything appended since the last call into data. A writer (holding
  // LOCK_EX) also cuts off a torn tail so that its append starts on a record boundary.
  void refresh(bool writer) {
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) throwSystem(path, "fstat", errno);
    const auto size = static_cast<uint64_t>(st.st_size);
    if (size < replayed) reset();  // truncated under us by someone else: start over
    if (replayed == 0) {
      if (size < kFileHeaderBytes) {
        // Empty, or a header torn by a writer that died: nothing stored yet.
        if (writer && size > 0) truncateTo(0);
        return;
      }
      uint8_t header[kFileHeaderBytes];
      if (readAt(header, sizeof header, 0) != sizeof header ||
          std::memcmp(header, kFileMagic, kFileHeaderBytes) != 0) {
        throwError(ErrorKind::Store, "FileStore '" + path +
                                         "' is not a tccl store file (bad header); "
                                         "remove it or choose another path");
      }
      replayed = kFileHeaderBytes;
    }
    if (size == replayed) return;
    Bytes buf(size - replayed);
    buf.resize(readAt(buf.data(), buf.size(), replayed));
    size_t pos = 0;
    bool torn = false;
    while (pos < buf.size()) {
      size_t used = 0;
      bool isSet = false;
      std::string key;
      Bytes value;
      std::string why;
      Parse p = parseRecord(buf.data() + pos, buf.size() - pos, &used, &isSet, &key, &value, &why);
      if (p == Parse::Torn) {
        torn = true;
        break;
      }
      if (p == Parse::Corrupt) {
        const uint64_t at = replayed + pos;
        reset();
        throwError(ErrorKind::Store, "FileStore '" + path + "' is corrupt at byte " +
                                         std::to_string(at) + ": " + why);
      }
      apply(isSet, std::move(key), std::move(value));
      pos += used;
    }
    replayed += pos;
    if (torn && writer) truncateTo(replayed);
  }

  void apply(bool isSet, std::string key, Bytes value) {
    if (isSet) {
      data[std::move(key)] = std::move(value);
    } else {
      data.erase(key);
    }
  }

  size_t readAt(uint8_t* buf, size_t n, uint64_t offset) {
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::pread(fd.get(), buf + got, n - got, static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throwSystem(path, "pread", errno);
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

  void truncateTo(uint64_t size) {
    if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) throwSystem(path, "ftruncate", errno);
  }

  // Appends one record (after the file header if the file is empty) and folds it in.
  // Caller holds mu and LOCK_EX and has just refreshed (appendRaw too).
  void append(const Bytes& record, bool isSet, const std::string& key, const Bytes& value) {
    appendRaw(record);
    apply(isSet, key, value);
  }

  // Appends whole records; the caller folds them into data.
  void appendRaw(const Bytes& record) {
    Bytes out;
    const bool needHeader = replayed == 0;
    if (needHeader) out.assign(kFileMagic, kFileMagic + kFileHeaderBytes);
    out.insert(out.end(), record.begin(), record.end());
    size_t done = 0;
    while (done < out.size()) {
      // O_APPEND: each write lands at the current end, which is ours under LOCK_EX.
      ssize_t w = ::write(fd.get(), out.data() + done, out.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) throwSystem(path, "write", errno);  // the torn tail is cut by the next writer
      done += static_cast<size_t>(w);
    }
    replayed += out.size();
  }

  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      if (data.find(k) == data.end()) out.push_back(k);
    }
    return out;
  }

  // Polls until every key exists, then runs onReady with the lock held.
  template <typename F>
  void waitFor(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
               std::string_view op, F onReady) {
    const auto start = Deadline::Clock::now();
    const Deadline deadline = storeproto::deadlineAfter(timeout);
    auto pause = kFirstPoll;
    for (;;) {
      std::vector<std::string> stillMissing;
      {
        std::lock_guard<std::mutex> lock(mu);
        FileLock flock(fd.get(), LOCK_SH, path);
        refresh(/*writer=*/false);
        stillMissing = missing(keys);
        if (stillMissing.empty()) {
          onReady();
          return;
        }
      }
      if (deadline.expired()) {
        storeproto::throwStoreTimeout(
            op, stillMissing, timeout,
            std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start));
      }
      auto sleepFor = pause;
      if (!deadline.isNever()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at() -
                                                                          Deadline::Clock::now());
        sleepFor =
            std::clamp(left + std::chrono::milliseconds(1), std::chrono::milliseconds(0), pause);
      }
      std::this_thread::sleep_for(sleepFor);
      pause = std::min(pause * 2, kMaxPoll);
    }
  }
};

FileStore::FileStore(std::string path) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  int fd = ::open(impl_->path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throwSystem(impl_->path, "open", errno);
  impl_->fd.reset(fd);
}

FileStore::~FileStore() = default;

const std::string& FileStore::path() const { return impl_->path; }

void FileStore::set(const std::string& key, const Bytes& value) {
  storeproto::checkKey(key);
  storeproto::checkValue(value);
  Bytes record = setRecord(key, value);
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileLock flock(impl_->fd.get(), LOCK_EX, impl_->path);
  impl_->refresh(/*writer=*/true);
  impl_->append(record, true, key, value);
}

Bytes FileStore::get(const std::string& key) {
  storeproto::checkKey(key);
  Bytes value;
  impl_->waitFor({key}, timeout(), "get", [&] { value = impl_->data.at(key); });
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  storeproto::checkKey(key);
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileLock flock(impl_->fd.get(), LOCK_EX, impl_->path);
  impl_->refresh(/*writer=*/true);
  auto it = impl_->data.find(key);
  std::string error;
  std::optional<int64_t> r =
      storeproto::applyAdd(key, it == impl_->data.end() ? nullptr : &it->second, delta, &error);
  if (!r) throwError(ErrorKind::InvalidArgument, error);
  Bytes value = storeproto::formatDecimal(*r);
  impl_->append(setRecord(key, value), true, key, value);
  return *r;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  storeproto::checkKeys(keys);
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileLock flock(impl_->fd.get(), LOCK_SH, impl_->path);
  impl_->refresh(/*writer=*/false);
  return impl_->missing(keys).empty();
}

void FileStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  storeproto::checkKeys(keys);
  impl_->waitFor(keys, timeout, "wait", [] {});
}

bool FileStore::erase(const std::string& key) {
  storeproto::checkKey(key);
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileLock flock(impl_->fd.get(), LOCK_EX, impl_->path);
  impl_->refresh(/*writer=*/true);
  if (impl_->data.find(key) == impl_->data.end()) return false;
  impl_->append(eraseRecord(key), false, key, {});
  return true;
}

std::vector<Bytes> FileStore::multiGet(const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
  storeproto::checkKeys(keys);
  std::vector<Bytes> out;
  impl_->waitFor(keys, timeout, "multiGet", [&] {
    out.reserve(keys.size());
    for (const std::string& k : keys) out.push_back(impl_->data.at(k));
  });
  return out;
}

void FileStore::multiSet(const std::vector<std::string>& keys, const std::vector<Bytes>& values) {
  storeproto::checkPairs(keys, values);
  Bytes records;
  for (size_t i = 0; i < keys.size(); ++i) {
    const Bytes r = setRecord(keys[i], values[i]);
    records.insert(records.end(), r.begin(), r.end());
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileLock flock(impl_->fd.get(), LOCK_EX, impl_->path);
  impl_->refresh(/*writer=*/true);
  // One append of every record: readers replay whole records, so they see the pairs of
  // one multiSet together or (torn by a crash) a prefix of them.
  impl_->appendRaw(records);
  for (size_t i = 0; i < keys.size(); ++i) impl_->apply(true, keys[i], values[i]);
}

Bytes FileStore::compareSet(const std::string& key, const Bytes& expected, const Bytes& desired) {
  storeproto::checkKey(key);
  storeproto::checkValue(expected);
  storeproto::checkValue(desired);
  std::lock_guard<std::mutex> lock(impl_->mu);
  FileLock flock(impl_->fd.get(), LOCK_EX, impl_->path);
  impl_->refresh(/*writer=*/true);
  auto it = impl_->data.find(key);
  const bool present = it != impl_->data.end();
  if (!storeproto::compareSetMatches(present ? &it->second : nullptr, expected)) {
    return present ? it->second : Bytes();
  }
  impl_->append(setRecord(key, desired), true, key, desired);
  return desired;
}

}  // namespace tccl
