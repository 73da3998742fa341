// Bitwise reductions (ReduceOp::BAnd / BOr / BXor, MPI_BAND/BOR/BXOR): the kernels on
// every integer dtype against a bit-by-bit reference, with every aliasing form and the
// counts around the vector block; all-reduce and reduce over ranks as threads with
// exact rank- and index-dependent data; floating dtypes refused as InvalidArgument; the
// names parse and print.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "reduce/reduce.hpp"
#include "tccl/tccl.hpp"

namespace tccl {
namespace {

// The reference: one bit at a time, with arithmetic (and = both set, or = either set,
// xor = an odd number set), not with the operators under test.
template <typename T>
T referenceBits(T a, T b, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  const U ua = static_cast<U>(a), ub = static_cast<U>(b);
  U out = 0;
  for (unsigned bit = 0; bit < sizeof(T) * 8; ++bit) {
    const unsigned x = (ua >> bit) % 2, y = (ub >> bit) % 2;
    const unsigned r = op == ReduceOp::BAnd  ? x * y
                       : op == ReduceOp::BOr ? (x + y + 1) / 2
                                             : (x + y) % 2;
    out = static_cast<U>(out + (static_cast<U>(r) << bit));
  }
  return static_cast<T>(out);
}

// Values with every bit pattern class: 0, all ones, the sign bit, alternating bits.
template <typename T>
T patternValue(size_t i, unsigned salt) {
  using U = std::make_unsigned_t<T>;
  const uint64_t mixed = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{salt} * 0xD1B54A32D192ED03ull);
  switch (i % 5) {
    case 0:
      return T(0);
    case 1:
      return static_cast<T>(static_cast<U>(~U{0}));
    case 2:
      return static_cast<T>(static_cast<U>(U{1} << (sizeof(T) * 8 - 1)));
    default:
      return static_cast<T>(static_cast<U>(mixed >> (salt % 7)));
  }
}

template <typename T>
void checkKernel(DataType dtype) {
  for (ReduceOp op : {ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{63}, size_t{64}, size_t{65},
                     size_t{129}, size_t{1000}}) {
      std::vector<T> a(n), b(n), want(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = patternValue<T>(i, 1);
        b[i] = patternValue<T>(i * 3 + 1, 2);
        want[i] = referenceBits(a[i], b[i], op);
      }
      std::vector<T> dst(n, T(42));
      reduce::apply(dst.data(), a.data(), b.data(), n, dtype, op);
      EXPECT_EQ(dst, want) << toString(op) << " n=" << n;
      std::vector<T> inA = a;  // dst == a
      reduce::apply(inA.data(), inA.data(), b.data(), n, dtype, op);
      EXPECT_EQ(inA, want) << toString(op) << " in place (a) n=" << n;
      std::vector<T> inB = b;  // dst == b
      reduce::apply(inB.data(), a.data(), inB.data(), n, dtype, op);
      EXPECT_EQ(inB, want) << toString(op) << " in place (b) n=" << n;
    }
  }
}

TEST(Bitwise, Int8Kernel) { checkKernel<int8_t>(DataType::Int8); }
TEST(Bitwise, UInt8Kernel) { checkKernel<uint8_t>(DataType::UInt8); }
TEST(Bitwise, Int32Kernel) { checkKernel<int32_t>(DataType::Int32); }
TEST(Bitwise, Int64Kernel) { checkKernel<int64_t>(DataType::Int64); }

TEST(Bitwise, NamesAndWireValues) {
  EXPECT_EQ(static_cast<int>(ReduceOp::BAnd), 5);
  EXPECT_EQ(static_cast<int>(ReduceOp::BOr), 6);
  EXPECT_EQ(static_cast<int>(ReduceOp::BXor), 7);
  for (ReduceOp op : {ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
    EXPECT_TRUE(isValid(op));
    EXPECT_EQ(parseReduceOp(toString(op)), op);
  }
  EXPECT_EQ(toString(ReduceOp::BXor), "bxor");
  EXPECT_EQ(parseReduceOp("BAND"), ReduceOp::BAnd);
  EXPECT_FALSE(isValid(static_cast<ReduceOp>(8)));
}

// Rank r's element i: a pattern that differs by rank and index.
template <typename T>
T rankValue(int r, size_t i) {
  return patternValue<T>(i * 7 + static_cast<size_t>(r), static_cast<unsigned>(r) + 3);
}

// n ranks as threads: all-reduce (every rank) and reduce (root n-1) with every bitwise op
// on every integer dtype, against the rank-order fold of the reference.
template <typename T>
std::string runRanks(Communicator& comm, size_t count) {
  const int n = comm.size(), r = comm.rank();
  for (ReduceOp op : {ReduceOp::BAnd, ReduceOp::BOr, ReduceOp::BXor}) {
    std::vector<T> buf(count), red(count, T(0));
    for (size_t i = 0; i < count; ++i) buf[i] = rankValue<T>(r, i);
    std::vector<T> mine = buf;
    comm.allreduce(std::span<T>(buf), op);
    comm.reduce(mine.data(), red.data(), count, dataTypeOf<T>(), op, n - 1);
    for (size_t i = 0; i < count; ++i) {
      T want = rankValue<T>(0, i);
      for (int q = 1; q < n; ++q) want = referenceBits(want, rankValue<T>(q, i), op);
      if (buf[i] != want)
        return std::string(toString(op)) + " allreduce index " + std::to_string(i);
      if (r == n - 1 && red[i] != want)
        return std::string(toString(op)) + " reduce index " + std::to_string(i);
    }
  }
  return "";
}

TEST(Bitwise, AllreduceAndReduceOverRanksOfEveryIntegerType) {
  for (int world : {1, 3, 4}) {
    auto store = std::make_shared<HashStore>();
    std::vector<std::string> errors(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          Communicator comm(store, r, world);
          std::string e;
          for (size_t count : {size_t{0}, size_t{1}, size_t{1001}}) {
            if (e.empty()) e = runRanks<int8_t>(comm, count);
            if (e.empty()) e = runRanks<uint8_t>(comm, count);
            if (e.empty()) e = runRanks<int32_t>(comm, count);
            if (e.empty()) e = runRanks<int64_t>(comm, count);
          }
          errors[static_cast<size_t>(r)] = e;
        } catch (const std::exception& ex) {
          errors[static_cast<size_t>(r)] = ex.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
      EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "world " << world << " rank " << r;
  }
}

TEST(Bitwise, FloatingTypesAreRefusedAndTheCommunicatorStaysUsable) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      std::string& err = errors[static_cast<size_t>(r)];
      try {
        Communicator comm(store, r, 2);
        for (DataType dt :
             {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16}) {
          std::vector<uint8_t> buf(64);
          try {
            comm.allreduce(buf.data(), 4, dt, ReduceOp::BOr);
            err = "allreduce bor on " + std::string(toString(dt)) + " was accepted";
            return;
          } catch (const InvalidArgumentError& e) {
            const std::string what = e.what();
            if (what.find("bor") == std::string::npos ||
                what.find(std::string(toString(dt))) == std::string::npos) {
              err = "message names neither op nor dtype: " + what;
              return;
            }
          }
        }
        // After the refusals the communicator still works (they never took a sequence
        // number), and bor is bor.
        std::vector<int32_t> v(5, r == 0 ? 0x0F0 : 0x00F);
        comm.allreduce(std::span<int32_t>(v), ReduceOp::BOr);
        for (int32_t x : v) {
          if (x != 0x0FF) err = "wrong value after the refusals";
        }
      } catch (const std::exception& e) {
        err = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

}  // namespace
}  // namespace tccl
