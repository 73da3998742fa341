#include "tccl/bucketer.hpp"

#include <cstring>
#include <utility>

namespace tccl {

struct Bucketer::Open {
  DataType dtype = DataType::Float32;
  std::shared_ptr<std::vector<uint8_t>> flat;
  std::vector<std::pair<uint8_t*, size_t>> members;  // (tensor, bytes) in packing order
};

Bucketer::Bucketer(Communicator& comm, BucketOptions options) : comm_(comm), options_(options) {
  if (options_.capBytes == 0) {
    throwError(ErrorKind::InvalidArgument, "Bucketer: capBytes must be positive", comm.rank());
  }
  if (options_.firstCapBytes == 0) options_.firstCapBytes = options_.capBytes;
}

Bucketer::~Bucketer() {
  // Never leave a collective writing into buffers that are about to be freed.
  for (const BucketInfo& b : launched_) {
    try {
      if (b.work) b.work->wait();
    } catch (const Error&) {
    }
  }
}

void Bucketer::add(void* data, size_t count, DataType dtype) {
  if (finished_) {
    launched_.clear();
    buffers_.clear();
    finished_ = false;
  }
  const size_t bytes = count * dataTypeSize(dtype);
  if (bytes == 0) return;
  if (data == nullptr)
    throwError(ErrorKind::InvalidArgument, "Bucketer::add: null tensor", comm_.rank());
  AllreduceOptions ao;
  ao.algorithm = options_.algorithm;
  if (bytes >= options_.capBytes) {
    // Large enough to be a bucket on its own: reduce it where it is, no copies.
    BucketInfo info;
    info.dtype = dtype;
    info.bytes = bytes;
    info.tensors = 1;
    info.inPlace = true;
    info.work = comm_.allreduceAsync(data, count, dtype, options_.op, ao);
    launched_.push_back(std::move(info));
    return;
  }
  auto& slot = open_[dtype];
  if (!slot) {
    slot = std::make_unique<Open>();
    slot->dtype = dtype;
  }
  Open& b = *slot;
  const size_t cap = launched_.empty() ? options_.firstCapBytes : options_.capBytes;
  if (!b.flat) b.flat = takeBuffer(std::max(cap, options_.capBytes));
  if (!b.flat->empty() && b.flat->size() + bytes > cap) {
    launch(b);
    b.flat = takeBuffer(options_.capBytes);
  }
  auto* p = static_cast<uint8_t*>(data);
  b.flat->insert(b.flat->end(), p, p + bytes);
  b.members.emplace_back(p, bytes);
  const size_t capNow = launched_.empty() ? options_.firstCapBytes : options_.capBytes;
  if (b.flat->size() >= capNow) launch(b);
}

std::shared_ptr<std::vector<uint8_t>> Bucketer::takeBuffer(size_t capacity) {
  std::shared_ptr<std::vector<uint8_t>> buf;
  if (!pool_.empty()) {
    buf = std::move(pool_.back());
    pool_.pop_back();
    buf->clear();
  } else {
    buf = std::make_shared<std::vector<uint8_t>>();
  }
  buf->reserve(capacity);
  return buf;
}

void Bucketer::launch(Open& b) {
  if (!b.flat || b.flat->empty()) return;
  std::shared_ptr<std::vector<uint8_t>> flat = std::move(b.flat);
  auto members = std::make_shared<std::vector<std::pair<uint8_t*, size_t>>>(std::move(b.members));
  b.flat = nullptr;
  b.members.clear();
  AllreduceOptions ao;
  ao.algorithm = options_.algorithm;
  BucketInfo info;
  info.dtype = b.dtype;
  info.bytes = flat->size();
  info.tensors = members->size();
  info.work = comm_.allreduceAsync(flat->data(), flat->size() / dataTypeSize(b.dtype), b.dtype,
                                   options_.op, ao);
  // Unpack as soon as the bucket is reduced, on the progress thread.
  info.work->onComplete([flat, members](const Error* err) {
    if (err != nullptr) return;
    size_t off = 0;
    for (const auto& [ptr, n] : *members) {
      std::memcpy(ptr, flat->data() + off, n);
      off += n;
    }
  });
  buffers_.push_back(std::move(flat));
  launched_.push_back(std::move(info));
}

void Bucketer::finish() {
  for (auto& [dtype, bucket] : open_) launch(*bucket);
  open_.clear();
  std::exception_ptr first;
  for (const BucketInfo& b : launched_) {
    try {
      b.work->wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  finished_ = true;
  for (auto& buf : buffers_) pool_.push_back(std::move(buf));
  buffers_.clear();
  if (first) std::rethrow_exception(first);
}

}  // namespace tccl
