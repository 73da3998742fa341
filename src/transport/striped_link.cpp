#include "transport/striped_link.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tccl {
namespace {

// The most iovecs one transfer here builds: the caller's (TxFrame / RxFrame pass two)
// and the link's own header copy.
constexpr int kMaxIov = 8;

// A window into the caller's iovecs: the logical bytes [skip, skip + len) of them.
int slice(const iovec* iov, int iovcnt, size_t skip, size_t len, iovec* out, int room) {
  int n = 0;
  for (int i = 0; i < iovcnt && len > 0 && n < room; ++i) {
    if (skip >= iov[i].iov_len) {
      skip -= iov[i].iov_len;
      continue;
    }
    const size_t take = std::min(iov[i].iov_len - skip, len);
    out[n++] = {static_cast<uint8_t*>(iov[i].iov_base) + skip, take};
    len -= take;
    skip = 0;
  }
  return n;
}

size_t totalLength(const iovec* iov, int iovcnt) {
  size_t n = 0;
  for (int i = 0; i < iovcnt; ++i) n += iov[i].iov_len;
  return n;
}

// Copies `n` bytes into the caller's iovecs at logical offset `skip`.
void scatter(const iovec* iov, int iovcnt, size_t skip, const uint8_t* src, size_t n) {
  iovec parts[kMaxIov];
  const int k = slice(iov, iovcnt, skip, n, parts, kMaxIov);
  for (int i = 0; i < k; ++i) {
    std::memcpy(parts[i].iov_base, src, parts[i].iov_len);
    src += parts[i].iov_len;
  }
}

}  // namespace

uint64_t StripePlan::bytesOn(int s) const {
  if (length == 0 || chunk == 0) return 0;
  const uint64_t chunks = (length + chunk - 1) / chunk;
  const uint64_t k = static_cast<uint64_t>(stripes);
  const uint64_t su = static_cast<uint64_t>(s);
  if (su >= chunks) return 0;
  const uint64_t mine = (chunks - 1 - su) / k + 1;  // chunks s, s + k, ... below `chunks`
  const bool hasLast = (chunks - 1) % k == su;
  const uint64_t lastLen = length - (chunks - 1) * chunk;
  return hasLast ? (mine - 1) * chunk + lastLen : mine * chunk;
}

StripePlan planStripes(uint64_t length, int stripes) {
  StripePlan p;
  p.length = length;
  p.stripes = std::max(1, stripes);
  const uint64_t k = static_cast<uint64_t>(p.stripes);
  p.chunk = std::min((length + k - 1) / k, kStripeChunkMax);
  return p;
}

bool stripesMessage(const wire::MessageHeader& h, int stripes, uint64_t minBytes) {
  return stripes > 1 && h.kind == wire::MsgKind::Data && h.length >= kStripeFloorBytes &&
         h.length >= minBytes;
}

int StripedLink::Cursor::stripe() const {
  if (pos < wire::kHeaderSize || !striped) return 0;
  return plan.stripeAt(pos - wire::kHeaderSize);
}

uint64_t StripedLink::Cursor::run() const {
  if (pos < wire::kHeaderSize) {
    // The header's rest, and then what follows it on stripe 0.
    const uint64_t first = striped ? std::min(plan.chunk, length) : length;
    return wire::kHeaderSize - pos + first;
  }
  const uint64_t off = pos - wire::kHeaderSize;
  return (striped ? plan.chunkEnd(off) : length) - off;
}

StripedLink::StripedLink(int peer, Lane lane, std::string address,
                         std::vector<std::unique_ptr<Link>> stripes, uint64_t stripeMinBytes)
    : Link(peer, lane, std::move(address)),
      stripes_(std::move(stripes)),
      minBytes_(stripeMinBytes) {}

bool StripedLink::beginMessage(Cursor& c, bool writing) {
  wire::MessageHeader h;
  if (wire::decodeHeader(c.header, &h) != wire::DecodeStatus::Ok) return false;
  c.length = wire::carriesPayload(h.kind) ? h.length : 0;
  const int k = stripeCount();
  if (writing) {
    c.striped = stripesMessage(h, k, minBytes_);
    c.header[3] = static_cast<uint8_t>(c.striped ? c.header[3] | wire::kFlagStriped
                                                 : c.header[3] & ~wire::kFlagStriped);
  } else {
    c.striped = (h.flags & wire::kFlagStriped) != 0;
    // A sender follows stripesMessage() with some threshold: anything else is not ours.
    if (c.striped && !stripesMessage(h, k, 0)) return false;
  }
  if (c.striped) c.plan = planStripes(c.length, k);
  return true;
}

LinkIo StripedLink::fail(size_t moved, LinkIo io, int stripe) {
  errStripe_ = stripe;
  // Bytes already moved in this call are reported; the failure shows at the next one.
  if (moved > 0) return {LinkStatus::Progress, moved};
  return io;
}

LinkIo StripedLink::failText(size_t moved, std::string text) {
  errStripe_ = -1;
  errText_ = std::move(text);
  if (moved > 0) return {LinkStatus::Progress, moved};
  return {LinkStatus::Error, 0};
}

LinkIo StripedLink::writev(const iovec* iov, int iovcnt) {
  size_t left = totalLength(iov, iovcnt);
  size_t done = 0;  // logical bytes handed to sockets in this call
  while (left > 0) {
    Cursor& c = w_;
    if (c.pos == 0) {
      if (left < wire::kHeaderSize) {
        return failText(done, "a striped link was handed part of a message header");
      }
      iovec hdr[kMaxIov];
      const int k = slice(iov, iovcnt, done, wire::kHeaderSize, hdr, kMaxIov);
      uint8_t* at = c.header;
      for (int i = 0; i < k; ++i) {
        std::memcpy(at, hdr[i].iov_base, hdr[i].iov_len);
        at += hdr[i].iov_len;
      }
      if (!beginMessage(c, true)) {
        return failText(done, "a striped link was handed an undecodable message header");
      }
    }
    const int s = c.stripe();
    iovec parts[kMaxIov];
    int n = 0;
    size_t want = std::min<uint64_t>(c.run(), left);
    size_t skip = done;
    if (c.pos < wire::kHeaderSize) {
      // Our copy of the header (it may carry the striped flag), then the caller's bytes
      // after theirs.
      const size_t hdrPart = std::min(wire::kHeaderSize - c.pos, want);
      parts[n++] = {c.header + c.pos, hdrPart};
      skip += hdrPart;
      n += slice(iov, iovcnt, skip, want - hdrPart, parts + n, kMaxIov - n);
    } else {
      n = slice(iov, iovcnt, skip, want, parts, kMaxIov);
    }
    want = totalLength(parts, n);
    writeStripe_ = s;
    const LinkIo io = stripes_[static_cast<size_t>(s)]->writev(parts, n);
    if (io.status != LinkStatus::Progress) return fail(done, io, s);
    c.pos += io.bytes;
    done += io.bytes;
    left -= io.bytes;
    if (c.pos == c.total()) c = Cursor{};
    writeStripe_ = c.stripe();
    if (io.bytes < want) break;  // that socket is full: so is the stream, for now
  }
  return {LinkStatus::Progress, done};
}

LinkIo StripedLink::readv(const iovec* iov, int iovcnt) {
  if (broken_) return failText(0, errText_);
  size_t left = totalLength(iov, iovcnt);
  size_t done = 0;
  while (left > 0) {
    Cursor& c = r_;
    const int s = c.stripe();
    iovec parts[kMaxIov];
    int n = 0;
    size_t want = 0;
    if (c.pos < wire::kHeaderSize) {
      // The header into our copy (to learn its layout), and in the same read what is
      // sure to follow it on stripe 0 if the message is what the caller expects: the
      // whole payload below the striping floor, else the first chunk of a striped
      // message of that length. (A message of another length fails the caller's check
      // of the header anyway; the link then refuses to read on.)
      const size_t hdrWant = std::min(wire::kHeaderSize - c.pos, left);
      parts[n++] = {c.header + c.pos, hdrWant};
      const size_t offered = left - hdrWant;
      size_t follow = 0;
      if (c.pos + hdrWant == wire::kHeaderSize && offered > 0) {
        follow = offered < kStripeFloorBytes ? offered : planStripes(offered, stripeCount()).chunk;
      }
      n += slice(iov, iovcnt, done + hdrWant, follow, parts + n, kMaxIov - n);
      want = totalLength(parts, n);
    } else {
      want = std::min<uint64_t>(c.run(), left);
      n = slice(iov, iovcnt, done, want, parts, kMaxIov);
      want = totalLength(parts, n);
    }
    readStripe_ = s;
    const LinkIo io = stripes_[static_cast<size_t>(s)]->readv(parts, n);
    if (io.status != LinkStatus::Progress) return fail(done, io, s);
    size_t got = io.bytes;
    if (c.pos < wire::kHeaderSize) {
      // Hand the header bytes over (without our flag), then judge the header.
      const size_t hdrGot = std::min(got, wire::kHeaderSize - c.pos);
      uint8_t copy[wire::kHeaderSize];
      std::memcpy(copy, c.header + c.pos, hdrGot);
      if (c.pos <= 3 && c.pos + hdrGot > 3) copy[3 - c.pos] &= ~wire::kFlagStriped;
      scatter(iov, iovcnt, done, copy, hdrGot);
      c.pos += hdrGot;
      done += hdrGot;
      left -= hdrGot;
      got -= hdrGot;
      if (c.pos == wire::kHeaderSize) {
        if (!beginMessage(c, false)) {
          broken_ = true;
          return failText(done, "the peer sent a message header this striped link cannot follow");
        }
        const uint64_t first = c.striped ? std::min(c.plan.chunk, c.length) : c.length;
        if (got > first) {
          // Read past the message's part on stripe 0: its length is not the one the
          // caller offered room for, and the stream's place is lost.
          broken_ = true;
          errText_ = "a message longer or shorter than expected on a striped link";
          got = first;
        }
      }
    }
    c.pos += got;
    done += got;
    left -= got;
    const bool full = io.bytes == want;
    if (c.pos >= wire::kHeaderSize && c.pos == c.total()) c = Cursor{};
    readStripe_ = c.stripe();
    if (broken_ || !full) break;
  }
  return {LinkStatus::Progress, done};
}

LinkIo StripedLink::peek(uint8_t* buf, size_t n) {
  if (broken_) return failText(0, errText_);
  const Cursor& c = r_;
  const int s = c.stripe();
  const LinkIo io = stripes_[static_cast<size_t>(s)]->peek(buf, std::min<uint64_t>(n, c.run()));
  if (io.status != LinkStatus::Progress) {
    errStripe_ = s;
    return io;
  }
  if (c.pos <= 3 && c.pos + io.bytes > 3) buf[3 - c.pos] &= ~wire::kFlagStriped;
  return io;
}

std::string StripedLink::errorText() const {
  if (errStripe_ < 0) return errText_.empty() ? "striped link: no error" : errText_;
  return stripes_[static_cast<size_t>(errStripe_)]->errorText() + " (socket " +
         std::to_string(errStripe_) + " of " + std::to_string(stripeCount()) + ")";
}

void StripedLink::afterWake() {
  stripes_[static_cast<size_t>(readStripe_)]->afterWake();
  if (writeStripe_ != readStripe_) stripes_[static_cast<size_t>(writeStripe_)]->afterWake();
}

void StripedLink::shutdownWrite() {
  for (auto& s : stripes_) s->shutdownWrite();
}

}  // namespace tccl
