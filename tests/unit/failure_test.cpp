// The pure parts of failure handling: the records ranks exchange through the store,
// the culprit rules, and the TCCL_FAULT parser.
#include "core/failure.hpp"

#include <gtest/gtest.h>

#include "exec/executor.hpp"

namespace tccl::failure {
namespace {

Heartbeat hb(int64_t beat, int64_t entered, uint32_t fp = 7, std::string sig = "allreduce") {
  Heartbeat h;
  h.beat = beat;
  h.entered = entered;
  h.completed = entered - 1;
  h.fingerprint = fp;
  h.signature = std::move(sig);
  return h;
}

TEST(Failure, HeartbeatRoundTrips) {
  Heartbeat h = hb(42, 9, 0xDEADBEEF, "allreduce #9 float32 x1024 sum ring");
  auto d = decodeHeartbeat(encodeHeartbeat(h));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, h);
  h.signature = "with\nnewline and \\ backslash";
  d = decodeHeartbeat(encodeHeartbeat(h));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, h);
  Heartbeat empty;
  d = decodeHeartbeat(encodeHeartbeat(empty));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, empty);
}

// The keys are the protocol's (docs/errors.md): every rank of every version must spell
// them alike.
TEST(Failure, KeysAreSpelledAsTheProtocolSays) {
  EXPECT_EQ(keys::heartbeat(3), "hb/3");
  EXPECT_EQ(keys::signature(12, 5), "sig/12/5");
  EXPECT_EQ(keys::lastSignature(7), "sigmax/7");
  EXPECT_STREQ(keys::kClaim, "abort/claim");
  EXPECT_STREQ(keys::kCause, "abort/cause");
  EXPECT_EQ(keys::shrinkAlive(1, 4), "shrink/1/alive/4");
  EXPECT_EQ(keys::shrinkCount(0), "shrink/0/count");
  EXPECT_EQ(keys::shrinkMembers(2), "shrink/2/members");
}

TEST(Failure, SignatureLastSeqAndMembersRoundTrip) {
  const Signature sig{4000000000u, "allreduce #4 float32 x1024 sum ring"};
  EXPECT_EQ(encodeSignature(sig), "4000000000 allreduce #4 float32 x1024 sum ring");
  EXPECT_EQ(decodeSignature(encodeSignature(sig)), sig);
  EXPECT_EQ(decodeSignature("17"), (Signature{17, ""}));
  for (const char* bad : {"", "x sig", "-1 sig", "99999999999 sig"})
    EXPECT_FALSE(decodeSignature(bad)) << bad;
  for (int64_t q : {int64_t{-1}, int64_t{0}, int64_t{1} << 40})
    EXPECT_EQ(decodeLastSeq(encodeLastSeq(q)), q);
  EXPECT_FALSE(decodeLastSeq("3x"));
  const std::vector<int> members{0, 1, 3};
  EXPECT_EQ(encodeMembers(members), "0 1 3");
  EXPECT_EQ(decodeMembers(encodeMembers(members)), members);
  EXPECT_TRUE(decodeMembers("").empty());
}

TEST(Failure, HeartbeatRejectsGarbage) {
  for (const char* s :
       {"", "x", "1 2 3", "1 2 3 x sig", "1 a 3 4 s", "99999999999999999999 1 2 3 s"})
    EXPECT_FALSE(decodeHeartbeat(s)) << s;
}

TEST(Failure, CauseRoundTripsEveryField) {
  ErrorInfo i;
  i.kind = ErrorKind::Mismatch;
  i.message = "rank 2 called x=1\nsecond line";
  i.rank = 1;
  i.peer = 2;
  i.peerAddress = "127.0.0.1:4000";
  i.collective = "allreduce";
  i.seq = 12;
  i.algorithm = "ring";
  i.phase = "reduce-scatter";
  i.step = 3;
  i.steps = 7;
  i.bytesMoved = 10;
  i.bytesExpected = 20;
  i.elapsedMs = 5;
  i.timeoutMs = 1000;
  i.culprit = 2;
  i.culpritAddress = "[::1]:5";
  i.detectedBy = 3;
  i.localSignature = "allreduce #12 float32 x4 sum ring";
  i.remoteSignature = "allreduce #12 float32 x5 sum ring";
  auto d = decodeCause(encodeCause(i));
  ASSERT_TRUE(d);
  EXPECT_EQ(Error::format(*d), Error::format(i));
  EXPECT_EQ(d->culprit, 2);
  EXPECT_EQ(d->detectedBy, 3);
  EXPECT_EQ(d->message, i.message);
  EXPECT_EQ(d->remoteSignature, i.remoteSignature);
}

TEST(Failure, CauseRejectsMalformed) {
  EXPECT_FALSE(decodeCause(""));                 // no kind
  EXPECT_FALSE(decodeCause("kind=Nonsense\n"));  // unknown kind
  EXPECT_FALSE(decodeCause("kind=Timeout\nrank=x\n"));
  EXPECT_FALSE(decodeCause("kind=Timeout\nnoequals\n"));
  auto d = decodeCause("kind=PeerClosed\nfuture=ignored\nculprit=4\n");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->kind, ErrorKind::PeerClosed);
  EXPECT_EQ(d->culprit, 4);
}

TEST(Failure, MajorityOutlier) {
  EXPECT_EQ(majorityOutlier({}), -1);
  EXPECT_EQ(majorityOutlier({{0, 1}, {1, 1}, {2, 1}}), -1);
  EXPECT_EQ(majorityOutlier({{0, 1}, {1, 1}, {2, 9}, {3, 1}}), 2);
  EXPECT_EQ(majorityOutlier({{0, 9}, {1, 1}, {2, 1}}), 0);
  // Two ranks disagree: the group holding the lowest rank wins.
  EXPECT_EQ(majorityOutlier({{0, 1}, {1, 2}}), 1);
  // Three groups: the largest wins; the lowest rank outside it is named.
  EXPECT_EQ(majorityOutlier({{0, 5}, {1, 1}, {2, 1}, {3, 6}}), 0);
  // With the world size: a tie among some of the ranks is no verdict...
  EXPECT_EQ(majorityOutlier({{0, 9}, {2, 1}}, 3), -1);
  // ...a majority of the world is, and so is a tie among all of them.
  EXPECT_EQ(majorityOutlier({{0, 9}, {1, 1}, {2, 1}}, 3), 0);
  EXPECT_EQ(majorityOutlier({{1, 1}, {2, 1}, {3, 1}, {4, 3}}, 5), 4);
  EXPECT_EQ(majorityOutlier({{0, 1}, {1, 2}}, 2), 1);
}

TEST(Failure, TimeoutBlamesTheStoppedRank) {
  std::map<int, Heartbeat> a{{0, hb(5, 3)}, {2, hb(5, 3)}, {3, hb(9, 3)}};
  std::map<int, Heartbeat> b{{0, hb(7, 3)}, {2, hb(5, 3)}, {3, hb(11, 3)}};
  Verdict v = judgeTimeout(1, 4, 3, 7, a, b, 0);
  EXPECT_EQ(v.culprit, 2);
  EXPECT_EQ(v.kind, ErrorKind::Timeout);
  EXPECT_NE(v.reason.find("heartbeat stopped"), std::string::npos);
}

TEST(Failure, TimeoutBlamesARankWithoutHeartbeat) {
  std::map<int, Heartbeat> a{{0, hb(5, 3)}, {2, hb(5, 3)}};
  std::map<int, Heartbeat> b{{0, hb(6, 3)}, {2, hb(6, 3)}};
  EXPECT_EQ(judgeTimeout(1, 4, 3, 7, a, b, 0).culprit, 3);
}

TEST(Failure, TimeoutBlamesTheRankFurthestBehind) {
  // Everyone beats; rank 3 is still in #1 (stuck in compute), rank 0 in #2.
  std::map<int, Heartbeat> a{{0, hb(5, 2)}, {2, hb(5, 3)}, {3, hb(5, 1)}};
  std::map<int, Heartbeat> b{{0, hb(6, 2)}, {2, hb(6, 3)}, {3, hb(6, 1)}};
  Verdict v = judgeTimeout(1, 4, 3, 7, a, b, 2);
  EXPECT_EQ(v.culprit, 3);
  EXPECT_NE(v.reason.find("has not entered collective #3"), std::string::npos);
}

TEST(Failure, TimeoutFindsADifferentSignature) {
  std::map<int, Heartbeat> a{{0, hb(5, 3)}, {2, hb(5, 3, 8, "other")}, {3, hb(5, 3)}};
  std::map<int, Heartbeat> b{{0, hb(6, 3)}, {2, hb(6, 3, 8, "other")}, {3, hb(6, 3)}};
  Verdict v = judgeTimeout(1, 4, 3, 7, a, b, 0);
  EXPECT_EQ(v.culprit, 2);
  EXPECT_EQ(v.kind, ErrorKind::Mismatch);
  EXPECT_NE(v.reason.find("other"), std::string::npos);
}

TEST(Failure, TimeoutWithEveryoneHealthyBlamesTheLink) {
  std::map<int, Heartbeat> a{{0, hb(5, 3)}, {2, hb(5, 3)}};
  std::map<int, Heartbeat> b{{0, hb(6, 3)}, {2, hb(6, 3)}};
  Verdict v = judgeTimeout(1, 3, 3, 7, a, b, 2);
  EXPECT_EQ(v.culprit, 2);
  EXPECT_EQ(v.kind, ErrorKind::Timeout);
}

// ---- the event log and the stuck comparison (docs/errors.md, "Heartbeats") ----------

TEST(Failure, EventKeysAndRecordsAreSpelledAsTheProtocolSays) {
  EXPECT_EQ(keys::stuck(0), "stuck/0");
  EXPECT_EQ(keys::stuck(int64_t{1} << 40), "stuck/1099511627776");
  EXPECT_EQ(keys::event(1), "ev/1");
  EXPECT_STREQ(keys::kEventCount, "ev/count");
  Event e{Event::Kind::Census, 18446744073709551615ull, -1, "default"};
  EXPECT_EQ(encodeEvent(e), "census 18446744073709551615 -1 default");
  e = {Event::Kind::Cause, 7, -1, "default.split0.c1"};
  EXPECT_EQ(encodeEvent(e), "cause 7 -1 default.split0.c1");
}

TEST(Failure, EventsRoundTrip) {
  for (auto kind : {Event::Kind::Census, Event::Kind::Cause}) {
    for (int target : {-1, 0, 1023}) {
      for (const char* comm : {"default", "a b = c", "x.shrink0.group.t"}) {
        const Event e{kind, 0x1234567890abcdefull, target, comm};
        auto d = decodeEvent(encodeEvent(e));
        ASSERT_TRUE(d) << encodeEvent(e);
        EXPECT_EQ(*d, e);
      }
    }
  }
}

TEST(Failure, EventRejectsGarbage) {
  for (const char* bad :
       {"", "census", "census 1", "census 1 -1", "census 1 -1 ", "hello 1 -1 x", "census x -1 c",
        "census 1 -2 c", "census -1 -1 c", "census 1 z c", "Census 1 -1 c", "census  1 -1 c"})
    EXPECT_FALSE(decodeEvent(bad)) << bad;
}

TEST(Failure, AnEventConcernsItsCommunicatorsRanksOfItsJobOnly) {
  const Event all{Event::Kind::Census, 5, -1, "c"};
  const Event one{Event::Kind::Census, 5, 2, "c"};
  const Event cause{Event::Kind::Cause, 5, 2, "c"};
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(all.concerns(5, "c", r));
    EXPECT_EQ(one.concerns(5, "c", r), r == 2) << r;
    EXPECT_TRUE(cause.concerns(5, "c", r)) << r;  // a cause is the whole communicator's
    for (const Event* e : {&all, &one, &cause}) {
      EXPECT_FALSE(e->concerns(6, "c", r));   // another job reusing the namespace
      EXPECT_FALSE(e->concerns(5, "c2", r));  // another communicator of the family
      EXPECT_FALSE(e->concerns(5, "", r));
    }
  }
}

TEST(Failure, FingerprintAtReadsTheCurrentOrARecentCollective) {
  Heartbeat h = hb(3, 9, 0xAA);
  h.recent = {{6, 0x66, "s6"}, {7, 0, "no fp"}, {8, 0x88, "s8"}, {9, 0xAA, "s9"}};
  EXPECT_EQ(fingerprintAt(h, 9), 0xAAu);
  EXPECT_EQ(fingerprintAt(h, 8), 0x88u);
  EXPECT_EQ(fingerprintAt(h, 6), 0x66u);
  EXPECT_FALSE(fingerprintAt(h, 7));   // no fingerprint recorded
  EXPECT_FALSE(fingerprintAt(h, 5));   // too old
  EXPECT_FALSE(fingerprintAt(h, 10));  // not entered yet
  EXPECT_FALSE(fingerprintAt(h, -1));
  EXPECT_FALSE(fingerprintAt(Heartbeat{}, -1));  // a record of a rank that entered none
}

// The counts at which the rank that counts in compares: few per collective (so the
// reads stay O(N) in all), always including "everyone is in".
TEST(Failure, CompareAtAMajorityAllButOneAndAll) {
  for (int n = 0; n <= 70; ++n) {
    int times = 0;
    for (int64_t a = -1; a <= n + 2; ++a) {
      const bool c = compareAt(a, n);
      times += c ? 1 : 0;
      if (a == n && n >= 2) {
        EXPECT_TRUE(c) << a << "/" << n;
      }
      if (a < 2 || a > n) {
        EXPECT_FALSE(c) << a << "/" << n;
      }
      if (c) {
        EXPECT_TRUE(a == n || a == n - 1 || a == n / 2 + 1) << a << "/" << n;
      }
    }
    EXPECT_LE(times, 3) << n;
    if (n >= 2) {
      EXPECT_GE(times, 1) << n;
    }
  }
  EXPECT_TRUE(compareAt(3, 4));   // a majority of 4 and all but one
  EXPECT_TRUE(compareAt(6, 10));  // a majority of 10
  EXPECT_FALSE(compareAt(7, 10));
  EXPECT_TRUE(compareAt(9, 10));
  EXPECT_FALSE(compareAt(2, 3) && compareAt(1, 3));
}

TEST(Failure, StuckOutlierComparesTheRecordsOfTheCollective) {
  // Rank 0 (self) and ranks 1..3 inside #4; rank 2 runs something else.
  std::map<int, Heartbeat> others{{1, hb(1, 4, 7)}, {2, hb(1, 4, 8)}, {3, hb(1, 4, 7)}};
  EXPECT_EQ(stuckOutlier(0, 4, 4, 7, others), 2);
  // This rank is the odd one.
  EXPECT_EQ(stuckOutlier(0, 4, 4, 9, {{1, hb(1, 4, 7)}, {2, hb(1, 4, 7)}, {3, hb(1, 4, 7)}}), 0);
  // Rank 3 has moved on to #5, but its recent #4 still votes (and disagrees).
  Heartbeat moved = hb(2, 5, 7);
  moved.recent = {{4, 8, "other"}, {5, 7, "allreduce"}};
  EXPECT_EQ(stuckOutlier(0, 4, 4, 7, {{1, hb(1, 4, 7)}, {2, hb(1, 4, 7)}, {3, moved}}), 3);
  // A stale record (entered #2) knows nothing of #4: 2 of 4 votes, no majority.
  EXPECT_EQ(stuckOutlier(0, 4, 4, 7, {{1, hb(1, 4, 8)}, {2, hb(0, 2, 7)}, {3, hb(0, 2, 7)}}), -1);
  // Three of five agree, one differs, one is elsewhere: a majority names it.
  EXPECT_EQ(stuckOutlier(0, 5, 4, 7,
                         {{1, hb(1, 4, 7)}, {2, hb(1, 4, 7)}, {3, hb(1, 4, 9)}, {4, hb(0, 1, 7)}}),
            3);
  // All agree; a record of a rank outside the world is ignored.
  EXPECT_EQ(stuckOutlier(1, 3, 0, 7, {{0, hb(1, 0, 7)}, {2, hb(1, 0, 7)}, {9, hb(1, 0, 8)}}), -1);
  // World 2: the two disagree; the tie goes to the group of the lowest rank.
  EXPECT_EQ(stuckOutlier(1, 2, 0, 5, {{0, hb(1, 0, 7)}}), 1);
}

}  // namespace
}  // namespace tccl::failure

namespace tccl {
namespace {

TEST(FaultSpec, Parses) {
  std::string err;
  auto f = FaultSpec::parse("exit@reduce-scatter:3", &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->action, FaultSpec::Action::Exit);
  EXPECT_EQ(f->phase, "reduce-scatter");
  EXPECT_EQ(f->step, 3);
  EXPECT_EQ(f->seq, -1);
  f = FaultSpec::parse("stop@reduce (tree 0):2#5", &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->action, FaultSpec::Action::Stop);
  EXPECT_EQ(f->phase, "reduce (tree 0)");
  EXPECT_EQ(f->step, 2);
  EXPECT_EQ(f->seq, 5);
  f = FaultSpec::parse("hang@start#0", &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->phase, "start");
  EXPECT_EQ(f->seq, 0);
  f = FaultSpec::parse("slow600@broadcast:2#1", &err);
  ASSERT_TRUE(f) << err;
  EXPECT_EQ(f->action, FaultSpec::Action::Slow);
  EXPECT_EQ(f->slowMs, 600);
  EXPECT_EQ(f->phase, "broadcast");
  EXPECT_EQ(f->step, 2);
  EXPECT_EQ(f->seq, 1);
}

TEST(FaultSpec, RejectsMalformed) {
  for (const char* s : {"", "exit", "boom@ring:1", "exit@ring", "exit@ring:0", "exit@ring:x",
                        "exit@:1", "exit@ring:1#", "exit@ring:1#-2", "exit@ring:1#3x",
                        "slow@ring:1", "slowx@ring:1", "slow5x@ring:1", "slow-5@ring:1"}) {
    std::string err;
    EXPECT_FALSE(FaultSpec::parse(s, &err)) << s;
    EXPECT_NE(err.find("TCCL_FAULT"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace tccl
