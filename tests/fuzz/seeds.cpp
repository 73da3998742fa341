// Writes the seed corpora of the fuzz targets, made by the encoders so they start from
// valid traffic: tccl_fuzz_seeds <dir> creates <dir>/<target>/<seed> for every target.
// Each corpus also holds one "stream" seed: several messages back to back, as a
// connection carries them.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/failure.hpp"
#include "store/store_protocol.hpp"
#include "transport/wire.hpp"

namespace tccl::fuzz {
namespace {

namespace fs = std::filesystem;
using Seed = std::vector<uint8_t>;

class Corpus {
 public:
  Corpus(const fs::path& root, const std::string& target) : dir_(root / target) {
    fs::create_directories(dir_);
  }
  ~Corpus() { write("stream", stream_); }
  Corpus(const Corpus&) = delete;
  Corpus& operator=(const Corpus&) = delete;

  void add(const std::string& name, const Seed& bytes) {
    write(name, bytes);
    stream_.insert(stream_.end(), bytes.begin(), bytes.end());
  }

 private:
  void write(const std::string& name, const Seed& bytes) const {
    std::ofstream f(dir_ / name, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    if (!f) {
      std::fprintf(stderr, "tccl_fuzz_seeds: cannot write %s\n", (dir_ / name).c_str());
      std::exit(1);
    }
  }
  fs::path dir_;
  Seed stream_;
};

Bytes toBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

void headerSeeds(const fs::path& root) {
  Corpus c(root, "wire_header_fuzz");
  auto add = [&](const std::string& name, const wire::MessageHeader& h) {
    Seed b(wire::kHeaderSize);
    wire::encodeHeader(h, b.data());
    c.add(name, b);
  };
  wire::MessageHeader h;
  add("data-empty", h);
  h.seq = 7;
  h.fingerprint = wire::fingerprint("allreduce", 1, 2, 0, 1000, -1);
  h.step = 3;
  h.length = 4000;
  add("data-step3", h);
  h.length = wire::kMaxPayload;
  add("data-max-length", h);
  h.length = wire::kMaxPayload + 1;
  add("data-too-long", h);
  h.kind = wire::MsgKind::Abort;
  h.length = 42;
  h.flags = 1;
  add("abort", h);
}

void helloSeeds(const fs::path& root) {
  Corpus c(root, "wire_hello_fuzz");
  auto add = [&](const std::string& name, const wire::Hello& h) {
    Seed b(wire::kHelloSize);
    wire::encodeHello(h, b.data());
    c.add(name, b);
  };
  wire::Hello h;
  h.jobId = 0x1122334455667788;
  h.commId = wire::hash64("default");
  h.rank = 0;
  h.worldSize = 4;
  h.targetRank = 1;
  add("hello", h);
  h.kind = wire::HelloKind::Accept;
  h.rank = 1;
  h.targetRank = 0;
  add("accept", h);
  h.kind = wire::HelloKind::Reject;
  h.targetRank = -1;
  h.reason = wire::RejectReason::WrongJob;
  add("reject-wrong-job", h);
  h.reason = wire::RejectReason::Duplicate;
  add("reject-duplicate", h);
  h.kind = wire::HelloKind::Challenge;
  h.reason = wire::RejectReason::None;
  h.targetRank = 0;
  h.flags = wire::kHelloFlagAuth;
  for (size_t i = 0; i < h.nonce.size(); ++i) h.nonce[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t i = 0; i < h.mac.size(); ++i) h.mac[i] = static_cast<uint8_t>(255 - i);
  add("challenge", h);
  h.kind = wire::HelloKind::Proof;
  h.rank = 0;
  h.targetRank = 1;
  h.nonce = {};
  add("proof", h);
  h = wire::Hello{};
  h.version = 1;
  h.rank = 3;
  h.worldSize = 2;
  add("hello-v1-bad-rank", h);
}

void requestSeeds(const fs::path& root) {
  using namespace storeproto;
  Corpus c(root, "store_request_fuzz");
  auto add = [&](const std::string& name, const Request& q) {
    Bytes b;
    encodeRequest(q, &b);
    c.add(name, b);
  };
  Request q;
  q.command = Command::Set;
  q.key = "tccl/default/addr/3";
  q.value = toBytes("127.0.0.1:40123");
  add("set-addr", q);
  q.key = "counter";
  q.value = toBytes("-9223372036854775800");
  add("set-number", q);
  q = Request{};
  q.command = Command::Add;
  q.key = "counter";
  q.delta = -9;
  add("add", q);
  q = Request{};
  q.command = Command::Get;
  q.key = "tccl/default/jobid";
  q.timeoutMs = 30000;
  add("get", q);
  q = Request{};
  q.command = Command::Check;
  q.keys = {"a", "tccl/default/addr/0", std::string("\0\xff", 2)};
  add("check", q);
  q.command = Command::Wait;
  q.timeoutMs = -1;
  add("wait", q);
  q = Request{};
  q.command = Command::Erase;
  q.key = "a";
  add("erase", q);
  add("ping", Request{});
  q = Request{};
  q.command = Command::Hello;
  q.hasKey = true;
  for (size_t i = 0; i < q.nonce.size(); ++i) q.nonce[i] = static_cast<uint8_t>(i + 1);
  add("hello", q);
  q = Request{};
  q.command = Command::Auth;
  for (size_t i = 0; i < q.mac.size(); ++i) q.mac[i] = static_cast<uint8_t>(0xA0 ^ i);
  add("auth", q);
  q = Request{};
  q.command = Command::MultiGet;
  q.keys = {"tccl/default/host/0", "tccl/default/host/1"};
  q.timeoutMs = 30000;
  q.tag = 7;
  add("multi-get", q);
  q = Request{};
  q.command = Command::MultiSet;
  q.keys = {"a", "b"};
  q.values = {toBytes("1"), toBytes("")};
  add("multi-set", q);
  q = Request{};
  q.command = Command::CompareSet;
  q.key = "leader";
  q.expected = toBytes("");
  q.value = toBytes("rank 3");
  add("compare-set", q);
}

void responseSeeds(const fs::path& root) {
  using namespace storeproto;
  Corpus c(root, "store_response_fuzz");
  auto add = [&](const std::string& name, const Response& p) {
    Bytes b;
    encodeResponse(p, &b);
    c.add(name, b);
  };
  Response p;
  p.command = Command::Get;
  p.value = toBytes("127.0.0.1:40123");
  add("get-ok", p);
  p = Response{};
  p.command = Command::Add;
  p.number = -17;
  add("add-ok", p);
  p = Response{};
  p.command = Command::Check;
  p.flag = true;
  add("check-ok", p);
  p.command = Command::Erase;
  add("erase-ok", p);
  p = Response{};
  p.command = Command::Wait;
  p.status = Status::Timeout;
  p.keys = {"tccl/default/addr/3", std::string("bin\x01", 4)};
  add("wait-timeout", p);
  p.command = Command::Get;
  p.keys = {"k"};
  add("get-timeout", p);
  p = Response{};
  p.command = Command::Add;
  p.status = Status::Invalid;
  p.message = "store add(counter, 1): the key holds a 3-byte value that is not a decimal int64";
  add("add-invalid", p);
  p = Response{};
  p.command = Command::Set;
  add("set-ok", p);
  add("ping-ok", Response{});
  p = Response{};
  p.command = Command::Hello;
  p.hasKey = true;
  for (size_t i = 0; i < p.nonce.size(); ++i) p.nonce[i] = static_cast<uint8_t>(i + 1);
  for (size_t i = 0; i < p.mac.size(); ++i) p.mac[i] = static_cast<uint8_t>(0xA0 ^ i);
  add("hello-ok", p);
  p = Response{};
  p.command = Command::Auth;
  add("auth-ok", p);
  p.status = Status::Invalid;
  p.message = "authentication failed: the two sides' keys differ";
  add("auth-invalid", p);
  p = Response{};
  p.command = Command::MultiGet;
  p.values = {toBytes("127.0.0.1"), toBytes("")};
  p.tag = 9;
  add("multi-get-ok", p);
  p = Response{};
  p.command = Command::MultiGet;
  p.status = Status::Timeout;
  p.keys = {"tccl/default/host/5"};
  add("multi-get-timeout", p);
  p = Response{};
  p.command = Command::MultiSet;
  add("multi-set-ok", p);
  p = Response{};
  p.command = Command::CompareSet;
  p.value = toBytes("rank 3");
  add("compare-set-ok", p);
}

void failureSeeds(const fs::path& root) {
  Corpus c(root, "failure_records_fuzz");
  auto add = [&](const std::string& name, uint8_t mode, const std::string& text) {
    Seed b{mode};
    b.insert(b.end(), text.begin(), text.end());
    c.add(name, b);
  };
  failure::Heartbeat h;
  h.beat = 41;
  h.entered = 7;
  h.completed = 6;
  h.fingerprint = wire::fingerprint("allreduce", 1, 2, 0, 1000, -1);
  h.signature = "allreduce #7 f32 x1000 sum\\ring\n";
  const std::string beat = failure::encodeHeartbeat(h);
  add("heartbeat", 0, beat);
  ErrorInfo info;
  info.kind = ErrorKind::Timeout;
  info.message = "no data from rank 2 in 5000 ms\nline two";
  info.rank = 1;
  info.peer = 2;
  info.peerAddress = "127.0.0.1:4000";
  info.collective = "allreduce";
  info.seq = 7;
  info.algorithm = "ring";
  info.phase = "reduce-scatter";
  info.step = 3;
  info.steps = 7;
  info.bytesMoved = 100;
  info.bytesExpected = 4000;
  info.elapsedMs = 5001;
  info.timeoutMs = 5000;
  info.culprit = 2;
  info.detectedBy = 1;
  info.localSignature = "allreduce #7 f32 x1000 sum";
  info.remoteSignature = "allreduce #7 f32 x999 sum";
  add("cause", 1, failure::encodeCause(info));
  // World 4, self 1, waited on 2, seq 7; rank 3's beat stands still.
  failure::Heartbeat later = h;
  later.beat = 42;
  std::string judge = {4, 1, 2, 7};
  judge += beat + "||" + beat + "|" + beat + "|" + failure::encodeHeartbeat(later) + "||" +
           failure::encodeHeartbeat(later) + "|" + beat;
  add("judge", 2, judge);
}

// Key texts as users write them (auth/key_text.hpp): `openssl rand -hex 32` with its
// newline, upper case, the shortest and longest allowed, and near misses.
void keySeeds(const fs::path& root) {
  Corpus c(root, "auth_key_fuzz");
  auto add = [&](const std::string& name, const std::string& text) { c.add(name, toBytes(text)); };
  add("hex32-newline", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n");
  add("upper-padded", "  00112233445566778899AABBCCDDEEFF\r\n");
  add("shortest", std::string(32, 'a'));
  add("longest", std::string(512, 'f'));
  add("too-short", std::string(30, '0'));
  add("odd", std::string(33, '1'));
  add("not-hex", "0x00112233445566778899aabbccddeeff");
}

}  // namespace
}  // namespace tccl::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus-root>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  tccl::fuzz::headerSeeds(root);
  tccl::fuzz::helloSeeds(root);
  tccl::fuzz::requestSeeds(root);
  tccl::fuzz::responseSeeds(root);
  tccl::fuzz::failureSeeds(root);
  tccl::fuzz::keySeeds(root);
  return 0;
}
