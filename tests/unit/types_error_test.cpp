// Public value types (names, parsers, Deadline) and typed errors (the rendered message
// and the subclass throwError picks).
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <string>
#include <thread>
#include <typeinfo>

#include "tccl/error.hpp"
#include "tccl/types.hpp"

namespace tccl {
namespace {

using namespace std::chrono_literals;

// ---- types ------------------------------------------------------------------------

TEST(Types, WireValuesAreFixed) {
  // These numbers are part of the wire fingerprint.
  EXPECT_EQ(static_cast<int>(DataType::Float32), 0);
  EXPECT_EQ(static_cast<int>(DataType::Float64), 1);
  EXPECT_EQ(static_cast<int>(DataType::Int32), 2);
  EXPECT_EQ(static_cast<int>(DataType::Int64), 3);
  EXPECT_EQ(static_cast<int>(DataType::Float16), 4);
  EXPECT_EQ(static_cast<int>(DataType::BFloat16), 5);
  EXPECT_EQ(static_cast<int>(DataType::Int8), 6);
  EXPECT_EQ(static_cast<int>(DataType::UInt8), 7);
  EXPECT_EQ(static_cast<int>(ReduceOp::Sum), 0);
  EXPECT_EQ(static_cast<int>(ReduceOp::Prod), 1);
  EXPECT_EQ(static_cast<int>(ReduceOp::Min), 2);
  EXPECT_EQ(static_cast<int>(ReduceOp::Max), 3);
  EXPECT_EQ(static_cast<int>(ReduceOp::Avg), 4);
  EXPECT_EQ(static_cast<int>(Algorithm::Auto), 0);
  EXPECT_EQ(static_cast<int>(Algorithm::Ring), 1);
  EXPECT_EQ(static_cast<int>(Algorithm::Naive), 2);
}

TEST(Types, DataTypeSizes) {
  EXPECT_EQ(dataTypeSize(DataType::Float32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::Float64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::Int32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::Int64), 8u);
  EXPECT_EQ(dataTypeSize(DataType::Float16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::BFloat16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::Int8), 1u);
  EXPECT_EQ(dataTypeSize(DataType::UInt8), 1u);
}

const DataType kAllDataTypes[] = {DataType::Float32, DataType::Float64, DataType::Int32,
                                  DataType::Int64,   DataType::Float16, DataType::BFloat16,
                                  DataType::Int8,    DataType::UInt8};

TEST(Types, ValidityCoversExactlyTheEnum) {
  for (DataType t : kAllDataTypes) {
    EXPECT_TRUE(isValid(t)) << toString(t);
    EXPECT_GT(dataTypeSize(t), 0u) << toString(t);
  }
  for (int v : {8, 9, 100, 255}) {
    const auto t = static_cast<DataType>(v);
    EXPECT_FALSE(isValid(t)) << v;
    EXPECT_EQ(dataTypeSize(t), 0u) << v;
    EXPECT_EQ(toString(t), "?") << v;
  }
  EXPECT_TRUE(isValid(ReduceOp::Avg));
  EXPECT_TRUE(isValid(ReduceOp::BAnd));
  EXPECT_TRUE(isValid(ReduceOp::BXor));  // the last one (wire value 7)
  EXPECT_FALSE(isValid(static_cast<ReduceOp>(8)));
  EXPECT_FALSE(isValid(static_cast<ReduceOp>(255)));
}

TEST(Types, Names) {
  EXPECT_EQ(toString(DataType::Float32), "float32");
  EXPECT_EQ(toString(DataType::Float64), "float64");
  EXPECT_EQ(toString(DataType::Int32), "int32");
  EXPECT_EQ(toString(DataType::Int64), "int64");
  EXPECT_EQ(toString(DataType::Float16), "float16");
  EXPECT_EQ(toString(DataType::BFloat16), "bfloat16");
  EXPECT_EQ(toString(DataType::Int8), "int8");
  EXPECT_EQ(toString(DataType::UInt8), "uint8");
  EXPECT_EQ(toString(ReduceOp::Sum), "sum");
  EXPECT_EQ(toString(ReduceOp::Prod), "prod");
  EXPECT_EQ(toString(ReduceOp::Min), "min");
  EXPECT_EQ(toString(ReduceOp::Max), "max");
  EXPECT_EQ(toString(ReduceOp::Avg), "avg");
  EXPECT_EQ(toString(Algorithm::Auto), "auto");
  EXPECT_EQ(toString(Algorithm::Ring), "ring");
  EXPECT_EQ(toString(Algorithm::Naive), "naive");
}

TEST(Types, ToStringRoundTrips) {
  for (DataType t : kAllDataTypes) {
    EXPECT_EQ(parseDataType(toString(t)), t) << toString(t);
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max, ReduceOp::Avg}) {
    EXPECT_EQ(parseReduceOp(toString(op)), op) << toString(op);
  }
  for (Algorithm a : {Algorithm::Auto, Algorithm::Ring, Algorithm::Naive}) {
    EXPECT_EQ(parseAlgorithm(toString(a)), a) << toString(a);
  }
}

TEST(Types, ParseAliases) {
  for (const char* s : {"float", "fp32", "f32", "FLOAT32", "Float"}) {
    EXPECT_EQ(parseDataType(s), DataType::Float32) << s;
  }
  for (const char* s : {"double", "fp64", "f64", "FP64"}) {
    EXPECT_EQ(parseDataType(s), DataType::Float64) << s;
  }
  for (const char* s : {"int", "i32", "INT32"}) EXPECT_EQ(parseDataType(s), DataType::Int32) << s;
  for (const char* s : {"long", "i64", "Int64"}) EXPECT_EQ(parseDataType(s), DataType::Int64) << s;
  for (const char* s : {"float16", "half", "fp16", "f16", "HALF", "FP16", "Float16"}) {
    EXPECT_EQ(parseDataType(s), DataType::Float16) << s;
  }
  for (const char* s : {"bfloat16", "bf16", "BF16", "BFloat16"}) {
    EXPECT_EQ(parseDataType(s), DataType::BFloat16) << s;
  }
  for (const char* s : {"int8", "i8", "INT8"}) EXPECT_EQ(parseDataType(s), DataType::Int8) << s;
  for (const char* s : {"uint8", "u8", "byte", "UInt8", "BYTE"}) {
    EXPECT_EQ(parseDataType(s), DataType::UInt8) << s;
  }
  EXPECT_EQ(parseReduceOp("product"), ReduceOp::Prod);
  EXPECT_EQ(parseReduceOp("mean"), ReduceOp::Avg);
  EXPECT_EQ(parseReduceOp("SUM"), ReduceOp::Sum);
  EXPECT_EQ(parseAlgorithm("Naive"), Algorithm::Naive);
}

TEST(Types, ParseRejectsOthers) {
  for (const char* s : {"", "float8", "fp8", "bf", "bfloat", "half ", "int16", "uint16", "uint32",
                        "int4", "uint", "char", "bytes", "float ", " int", "f", "int32x"}) {
    EXPECT_EQ(parseDataType(s), std::nullopt) << "'" << s << "'";
  }
  for (const char* s : {"", "add", "sum ", "average", "mi"}) {
    EXPECT_EQ(parseReduceOp(s), std::nullopt) << "'" << s << "'";
  }
  for (const char* s : {"", "bush", "rings", "allreduce:ring"}) {
    EXPECT_EQ(parseAlgorithm(s), std::nullopt) << "'" << s << "'";
  }
  // A view that is not NUL-terminated is compared by its length only.
  const std::string longer = "ringbuffer";
  EXPECT_EQ(parseAlgorithm(std::string_view(longer).substr(0, 4)), Algorithm::Ring);
}

TEST(Deadline, Never) {
  const Deadline d = Deadline::never();
  EXPECT_TRUE(d.isNever());
  EXPECT_FALSE(d.expired());
  EXPECT_EQ(d.pollTimeoutMs(), -1);
  // A negative timeout means no timeout.
  EXPECT_TRUE(Deadline::after(-1ms).isNever());
  EXPECT_TRUE(Deadline::after(-100000ms).isNever());
}

TEST(Deadline, ZeroExpiresAtOnce) {
  const Deadline d = Deadline::after(0ms);
  EXPECT_FALSE(d.isNever());
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.pollTimeoutMs(), 0);
}

TEST(Deadline, PastIsExpired) {
  const Deadline d(Deadline::Clock::now() - 1s);
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.pollTimeoutMs(), 0);
}

TEST(Deadline, FutureCountsDown) {
  const auto before = Deadline::Clock::now();
  const Deadline d = Deadline::after(60s);
  const auto after = Deadline::Clock::now();
  EXPECT_FALSE(d.isNever());
  EXPECT_FALSE(d.expired());
  EXPECT_GE(d.at(), before + 60s);
  EXPECT_LE(d.at(), after + 60s);
  // Rounded up: never 0 while time is left, never more than the timeout + 1.
  const int ms = d.pollTimeoutMs();
  EXPECT_GT(ms, 59000);
  EXPECT_LE(ms, 60001);
}

TEST(Deadline, SubMillisecondLeftRoundsUp) {
  const Deadline d(Deadline::Clock::now() + 500us);
  const int ms = d.pollTimeoutMs();
  // Either the 500 us are still ahead (rounded up to 1) or they passed (0).
  EXPECT_TRUE(ms == 1 || (ms == 0 && d.expired())) << ms;
}

TEST(Deadline, ShortTimeoutExpires) {
  const Deadline d = Deadline::after(2ms);
  std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.pollTimeoutMs(), 0);
}

TEST(Deadline, PollTimeoutClampsToIntMax) {
  // 30 days is more milliseconds than an int holds.
  const Deadline d = Deadline::after(std::chrono::hours(24 * 30));
  EXPECT_EQ(d.pollTimeoutMs(), INT_MAX);
  EXPECT_FALSE(d.expired());
  // The largest TCCL_TIMEOUT_MS accepted (2^40 ms, about 35 years) still works.
  const Deadline far = Deadline::after(std::chrono::milliseconds(int64_t{1} << 40));
  EXPECT_FALSE(far.expired());
  EXPECT_EQ(far.pollTimeoutMs(), INT_MAX);
}

// Regression: Clock::now() + timeout used to overflow (signed, UB) for timeouts beyond
// about 292 years, giving a deadline in the past. Deadline::after now saturates to never().
TEST(Deadline, HugeTimeoutSaturatesToNever) {
  for (auto timeout :
       {std::chrono::milliseconds::max(), std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::hours(24 * 365 * 300))}) {
    const Deadline d = Deadline::after(timeout);
    EXPECT_FALSE(d.expired()) << "Deadline::after(" << timeout.count() << " ms) is already expired";
    EXPECT_TRUE(d.isNever() || d.pollTimeoutMs() == INT_MAX)
        << "pollTimeoutMs() = " << d.pollTimeoutMs();
  }
}

// ---- errors -----------------------------------------------------------------------

ErrorInfo fullInfo() {
  ErrorInfo i;
  i.kind = ErrorKind::Timeout;
  i.message = "no data from the peer before the deadline";
  i.rank = 3;
  i.peer = 2;
  i.peerAddress = "10.0.0.7:41000";
  i.collective = "allreduce";
  i.seq = 12;
  i.algorithm = "ring";
  i.phase = "reduce-scatter";
  i.step = 3;  // 0-based: the fourth step
  i.steps = 7;
  i.bytesMoved = 1024;
  i.bytesExpected = 65536;
  i.elapsedMs = 30012;
  i.timeoutMs = 30000;
  return i;
}

TEST(Error, FormatCarriesEveryFact) {
  const std::string s = Error::format(fullInfo());
  EXPECT_EQ(s,
            "[rank 3] Timeout in allreduce #12 (ring reduce-scatter step 4/7) with rank 2 "
            "(10.0.0.7:41000): no data from the peer before the deadline; bytes 1024/65536; "
            "waited 30012 ms of 30000 ms allowed");
  // The facts an on-call engineer looks for, independently of the layout.
  for (const char* part :
       {"[rank 3]", "Timeout", "allreduce", "#12", "ring reduce-scatter step 4/7", "rank 2",
        "10.0.0.7:41000", "1024/65536", "30012 ms", "30000 ms"}) {
    EXPECT_NE(s.find(part), std::string::npos) << part;
  }
}

TEST(Error, FormatMinimal) {
  ErrorInfo i;
  i.kind = ErrorKind::System;
  i.message = "boom";
  EXPECT_EQ(Error::format(i), "System: boom");
  i.rank = 0;
  EXPECT_EQ(Error::format(i), "[rank 0] System: boom");
}

TEST(Error, FormatPartialFacts) {
  ErrorInfo i;
  i.kind = ErrorKind::PeerClosed;
  i.message = "connection closed";
  i.collective = "allreduce";
  i.phase = "exchange";
  i.step = 0;
  EXPECT_EQ(Error::format(i), "PeerClosed in allreduce (exchange step 1): connection closed");
  i.phase.clear();
  i.algorithm = "naive";
  i.steps = 1;
  EXPECT_EQ(Error::format(i), "PeerClosed in allreduce (naive step 1/1): connection closed");
  // An address without a rank (a stranger, or before the handshake).
  ErrorInfo h;
  h.kind = ErrorKind::Handshake;
  h.message = "refused";
  h.peerAddress = "host:1";
  EXPECT_EQ(Error::format(h), "Handshake with host:1: refused");
  // Bytes expected but none moved yet; elapsed time without a timeout.
  ErrorInfo b;
  b.kind = ErrorKind::Protocol;
  b.message = "short";
  b.peer = 5;
  b.bytesExpected = 10;
  b.elapsedMs = 7;
  EXPECT_EQ(Error::format(b), "Protocol with rank 5: short; bytes 0/10; after 7 ms");
  // A phase outside a collective is not printed (nothing to hang it on).
  ErrorInfo c;
  c.kind = ErrorKind::Store;
  c.message = "x";
  c.phase = "p";
  c.timeoutMs = 100;
  EXPECT_EQ(Error::format(c), "Store: x; waited 0 ms of 100 ms allowed");
}

TEST(Error, WhatIsFormatAndAccessorsWork) {
  const ErrorInfo info = fullInfo();
  const Error e(info);
  EXPECT_EQ(std::string(e.what()), Error::format(info));
  EXPECT_EQ(e.kind(), ErrorKind::Timeout);
  EXPECT_EQ(e.rank(), 3);
  EXPECT_EQ(e.peer(), 2);
  EXPECT_EQ(e.cause(), "no data from the peer before the deadline");
  EXPECT_EQ(e.info().seq, 12);
  EXPECT_EQ(e.info().step, 3);
}

TEST(Error, KindNames) {
  EXPECT_EQ(toString(ErrorKind::InvalidArgument), "InvalidArgument");
  EXPECT_EQ(toString(ErrorKind::Timeout), "Timeout");
  EXPECT_EQ(toString(ErrorKind::PeerClosed), "PeerClosed");
  EXPECT_EQ(toString(ErrorKind::Protocol), "Protocol");
  EXPECT_EQ(toString(ErrorKind::Mismatch), "Mismatch");
  EXPECT_EQ(toString(ErrorKind::Handshake), "Handshake");
  EXPECT_EQ(toString(ErrorKind::Store), "Store");
  EXPECT_EQ(toString(ErrorKind::System), "System");
  EXPECT_EQ(toString(ErrorKind::Aborted), "Aborted");
}

// throwError(info) must throw exactly the subclass of the kind, so callers can catch
// TimeoutError without catching PeerClosedError.
template <typename Expected>
void expectThrowsAs(ErrorKind kind) {
  ErrorInfo info = fullInfo();
  info.kind = kind;
  SCOPED_TRACE(std::string(toString(kind)));
  try {
    throwError(info);
  } catch (const Expected& e) {
    EXPECT_EQ(e.kind(), kind);
    EXPECT_EQ(typeid(e), typeid(Expected)) << "a more derived type than expected";
    EXPECT_EQ(e.rank(), 3);
    EXPECT_EQ(std::string(e.what()), Error::format(info));
    return;
  } catch (const Error& e) {
    ADD_FAILURE() << "threw " << typeid(e).name() << " for kind " << toString(kind);
    return;
  }
  ADD_FAILURE() << "did not throw";
}

TEST(Error, ThrowErrorPicksTheSubclass) {
  expectThrowsAs<InvalidArgumentError>(ErrorKind::InvalidArgument);
  expectThrowsAs<TimeoutError>(ErrorKind::Timeout);
  expectThrowsAs<PeerClosedError>(ErrorKind::PeerClosed);
  expectThrowsAs<ProtocolError>(ErrorKind::Protocol);
  expectThrowsAs<MismatchError>(ErrorKind::Mismatch);
  expectThrowsAs<HandshakeError>(ErrorKind::Handshake);
  expectThrowsAs<StoreError>(ErrorKind::Store);
  expectThrowsAs<SystemError>(ErrorKind::System);
  expectThrowsAs<AbortedError>(ErrorKind::Aborted);
}

TEST(Error, SubclassesAreErrorsAndRuntimeErrors) {
  EXPECT_THROW(throwError(ErrorKind::Timeout, "t"), TimeoutError);
  EXPECT_THROW(throwError(ErrorKind::Timeout, "t"), Error);
  EXPECT_THROW(throwError(ErrorKind::Timeout, "t"), std::runtime_error);
  // A TimeoutError is not caught as another kind.
  bool caughtAsTimeout = false;
  try {
    try {
      throwError(ErrorKind::Timeout, "t");
    } catch (const PeerClosedError&) {
      ADD_FAILURE() << "a timeout was caught as PeerClosedError";
    }
  } catch (const TimeoutError&) {
    caughtAsTimeout = true;
  }
  EXPECT_TRUE(caughtAsTimeout);
}

TEST(Error, ShorthandFillsRankPeerAndMessage) {
  try {
    throwError(ErrorKind::Mismatch, "different collective", 1, 4);
    ADD_FAILURE() << "did not throw";
  } catch (const MismatchError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Mismatch);
    EXPECT_EQ(e.rank(), 1);
    EXPECT_EQ(e.peer(), 4);
    EXPECT_EQ(e.cause(), "different collective");
    EXPECT_EQ(std::string(e.what()), "[rank 1] Mismatch with rank 4: different collective");
  }
  try {
    throwError(ErrorKind::InvalidArgument, "count must be positive");
    ADD_FAILURE() << "did not throw";
  } catch (const InvalidArgumentError& e) {
    EXPECT_EQ(e.rank(), -1);
    EXPECT_EQ(e.peer(), -1);
    EXPECT_EQ(std::string(e.what()), "InvalidArgument: count must be positive");
  }
}

}  // namespace
}  // namespace tccl
