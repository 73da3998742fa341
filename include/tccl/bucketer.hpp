// Gradient bucketing: fuse many small tensors into flat buckets and all-reduce each
// bucket asynchronously as soon as it is full, the way DistributedDataParallel's
// buckets and Horovod's tensor fusion hide communication behind the backward pass.
//
//   tccl::Bucketer b(comm, {.capBytes = 25 << 20, .op = tccl::ReduceOp::Avg});
//   for (layer in reverse) { compute grad; b.add(grad.data(), grad.size(), dtype); }
//   b.finish();   // every gradient now holds the all-reduced value
//
// Rules:
// - Tensors are packed (copied) into the open bucket of their dtype in the order they
//   are added; one dtype per bucket, so mixed dtypes keep one open bucket each.
// - A bucket is launched when adding a tensor would take it past its cap (the open
//   bucket goes first, the tensor starts the next one) or when it reaches the cap.
//   The first bucket's cap is firstCapBytes (small, so that communication starts
//   early, as DDP does); the rest use capBytes.
// - A tensor of at least capBytes is not copied: it is all-reduced in place, alone.
// - On completion each bucket's results are copied back into its tensors on the
//   progress thread, overlapping with whatever the caller computes meanwhile.
// - finish() launches what is left, waits for everything, rethrows the first error,
//   and resets the bucketer for the next step. Tensors must stay valid and untouched
//   between add() and finish().
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "tccl/communicator.hpp"

namespace tccl {

struct BucketOptions {
  size_t capBytes = size_t{25} << 20;
  size_t firstCapBytes = size_t{1} << 20;
  ReduceOp op = ReduceOp::Sum;
  Algorithm algorithm = Algorithm::Auto;
};

// What one launched bucket held, for reports and tests.
struct BucketInfo {
  DataType dtype = DataType::Float32;
  size_t bytes = 0;
  size_t tensors = 0;
  bool inPlace = false;  // a single large tensor reduced without packing
  WorkPtr work;
};

class Bucketer {
 public:
  Bucketer(Communicator& comm, BucketOptions options = {});
  ~Bucketer();
  Bucketer(const Bucketer&) = delete;
  Bucketer& operator=(const Bucketer&) = delete;

  void add(void* data, size_t count, DataType dtype);
  template <typename T>
  void add(std::span<T> t) {
    add(t.data(), t.size(), dataTypeOf<T>());
  }
  // Launches the partial buckets, waits for all, rethrows the first error.
  void finish();
  // The buckets launched since the last finish() (or all of the last step, after it).
  const std::vector<BucketInfo>& buckets() const { return launched_; }

 private:
  struct Open;
  void launch(Open& bucket);

  Communicator& comm_;
  BucketOptions options_;
  std::map<DataType, std::unique_ptr<Open>> open_;
  std::vector<BucketInfo> launched_;
  std::shared_ptr<std::vector<uint8_t>> takeBuffer(size_t capacity);

  std::vector<std::shared_ptr<std::vector<uint8_t>>> buffers_;  // in flight until finish
  // Flat buffers of earlier steps, reused: a fresh allocation per bucket per step costs
  // page faults and reallocating copies on every step.
  std::vector<std::shared_ptr<std::vector<uint8_t>>> pool_;
  bool finished_ = true;
};

}  // namespace tccl
