// The checks both store-protocol targets run on every frame, whatever its direction.
//
// The input is a byte stream as a TcpStore connection delivers it: frames are decoded one
// after another, as the server and client do, until the bytes run out or are refused.
// For each decode the contract in store_protocol.hpp must hold:
//   Ok       consumed is the header's 12 bytes + bodyLen and fits in the input; the message
//            re-encodes to exactly those bytes and decodes back to itself; every shorter
//            prefix of the frame is NeedMore.
//   NeedMore frameBytes is 0 before the header is in, else the whole frame's size, which
//            is larger than what is there and within the limit.
//   Error    a reason is given, and no further byte can turn the input into a frame.
//   *out is written only on Ok.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.hpp"
#include "store/store_protocol.hpp"

namespace tccl::fuzz {

// Decodes every prefix shorter than the header: the statuses must be NeedMore until the
// first bad byte and Error from then on (garbage is refused as soon as it arrives, and
// nothing un-refuses it). Returns whether some prefix was refused.
template <typename Msg, typename Decode>
bool checkHeaderPrefixes(const uint8_t* p, size_t n, const Msg& sentinel, Decode decode) {
  bool refused = false;
  for (size_t k = 0; k < storeproto::kHeaderBytes && k <= n; ++k) {
    Msg out = sentinel;
    const storeproto::DecodeResult r = decode(p, k, &out);
    FUZZ_CHECK(out == sentinel, "*out is written only on Ok");
    FUZZ_CHECK(r.status != storeproto::DecodeStatus::Ok, "no frame is shorter than a header");
    if (refused) {
      FUZZ_CHECK(r.status == storeproto::DecodeStatus::Error, "a refused prefix stays refused");
    }
    refused = r.status == storeproto::DecodeStatus::Error;
  }
  return refused;
}

// Walks the frames of data[0, size); onFrame(msg, frameBytes) checks each decoded message.
template <typename Msg, typename Decode, typename Encode, typename OnFrame>
void walkFrames(const uint8_t* data, size_t size, const Msg& sentinel, Decode decode, Encode encode,
                OnFrame onFrame) {
  size_t at = 0;
  while (true) {
    const uint8_t* p = data + at;
    const size_t n = size - at;
    const bool prefixRefused = checkHeaderPrefixes(p, n, sentinel, decode);

    Msg msg = sentinel;
    const storeproto::DecodeResult r = decode(p, n, &msg);
    FUZZ_CHECK(!storeproto::toString(r.status).empty(), "every status has a name");
    FUZZ_CHECK(!prefixRefused || r.status == storeproto::DecodeStatus::Error,
               "bytes refused early stay refused");

    if (r.status == storeproto::DecodeStatus::Error) {
      FUZZ_CHECK(!r.error.empty(), "an error says why");
      FUZZ_CHECK(r.consumed == 0 && r.frameBytes == 0, "an error consumes nothing");
      FUZZ_CHECK(msg == sentinel, "*out is written only on Ok");
      for (uint8_t extra : {uint8_t{0x00}, uint8_t{0xFF}}) {
        std::vector<uint8_t> longer(p, p + n);
        longer.push_back(extra);
        Msg out = sentinel;
        FUZZ_CHECK(
            decode(longer.data(), longer.size(), &out).status == storeproto::DecodeStatus::Error,
            "no further byte turns refused bytes into a frame");
      }
      return;
    }

    if (r.status == storeproto::DecodeStatus::NeedMore) {
      FUZZ_CHECK(r.consumed == 0 && r.error.empty(), "NeedMore consumes nothing");
      FUZZ_CHECK(msg == sentinel, "*out is written only on Ok");
      if (n < storeproto::kHeaderBytes) {
        FUZZ_CHECK(r.frameBytes == 0, "the frame size is unknown before the header is in");
      } else {
        FUZZ_CHECK(r.frameBytes == storeproto::kHeaderBytes + loadU32(p + 4),
                   "the frame size is the header + bodyLen");
        FUZZ_CHECK(r.frameBytes > n, "NeedMore only while the frame is incomplete");
        FUZZ_CHECK(r.frameBytes <= storeproto::kHeaderBytes + storeproto::kMaxBodyBytes,
                   "a frame the decoder waits for is within the limit");
      }
      return;
    }

    FUZZ_CHECK(r.error.empty(), "Ok carries no error");
    FUZZ_CHECK(r.consumed >= storeproto::kHeaderBytes && r.consumed <= n,
               "an Ok frame lies within the input");
    FUZZ_CHECK(r.consumed == storeproto::kHeaderBytes + loadU32(p + 4),
               "an Ok frame is the header + bodyLen bytes");
    FUZZ_CHECK(!(msg == sentinel), "Ok writes *out");
    onFrame(msg, r.consumed);

    // The format is canonical: the message encodes back to the very bytes it came from.
    Bytes again;
    encode(msg, &again);  // throws (and so aborts the run) if a decoded message is invalid
    FUZZ_CHECK(again.size() == r.consumed && std::equal(again.begin(), again.end(), p),
               "encode(decode(b)) == b");
    Msg back = sentinel;
    const storeproto::DecodeResult r2 = decode(again.data(), again.size(), &back);
    FUZZ_CHECK(
        r2.status == storeproto::DecodeStatus::Ok && r2.consumed == again.size() && back == msg,
        "decode(encode(m)) == m");

    // A frame arriving a byte at a time is NeedMore until its last byte.
    for (size_t k = storeproto::kHeaderBytes; k < r.consumed; ++k) {
      Msg out = sentinel;
      const storeproto::DecodeResult rk = decode(p, k, &out);
      FUZZ_CHECK(rk.status == storeproto::DecodeStatus::NeedMore && rk.frameBytes == r.consumed,
                 "a strict prefix of a frame is NeedMore with the frame's size");
      FUZZ_CHECK(out == sentinel, "*out is written only on Ok");
    }

    at += r.consumed;
    if (at == size) return;
  }
}

// The keys a store message carries: within the limits, and no more bytes than the frame.
inline size_t checkKeyList(const std::vector<std::string>& keys) {
  FUZZ_CHECK(keys.size() <= storeproto::kMaxKeys, "at most kMaxKeys keys");
  size_t bytes = 0;
  for (const std::string& k : keys) {
    FUZZ_CHECK(k.size() <= storeproto::kMaxKeyBytes, "a key within kMaxKeyBytes");
    bytes += 4 + k.size();
  }
  return bytes;
}

}  // namespace tccl::fuzz
