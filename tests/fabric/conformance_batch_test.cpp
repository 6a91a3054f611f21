// Doorbell batching (Endpoint::hold_posts / release_posts, PostBatch): held
// posts still complete one by one, in posting order, with their own wr_id,
// however the provider hands them to the device (verbs: one doorbell per
// batch, only the last request signalled).
#include "conformance_fixture.hpp"

namespace catena::fabric::test {
namespace {

constexpr std::uint32_t kBatchRecord = 64;

// Completions of `ep`'s send queue until `want` arrived, taken `per_poll`
// at a time (fewer than a batch holds, so one signalled completion must be
// handed out over several polls).
std::vector<Completion> take_send(Endpoint& ep, int want, int per_poll) {
  std::vector<Completion> got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (static_cast<int>(got.size()) < want && std::chrono::steady_clock::now() < deadline) {
    Completion c[8];
    const int n = ep.poll_send(c, std::min(per_poll, 8));
    got.insert(got.end(), c, c + n);
  }
  return got;
}

TEST_F(Conformance, HeldPostsCompleteOneByOneInPostingOrder) {
  // More than one doorbell's worth (verbs holds 32), fewer than the queue.
  const int count = static_cast<int>(std::min<std::uint32_t>(100, client().caps().send_queue_depth - 2));
  ASSERT_GT(count, 1);
  auto src = alloc(static_cast<std::size_t>(count) * kBatchRecord, kLocalWrite);
  auto dst = alloc(static_cast<std::size_t>(count) * kBatchRecord, kLocalWrite | kRemoteWrite);
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && dst && rbuf);
  const RemoteRegion key = grant(*dst);
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(server().post_recv(round, {rbuf.get(), 0, 64}), Errc::ok);
    const auto seed = static_cast<std::uint8_t>(round * 31 + 1);
    fill(*src, 0, src->size(), seed);
    {
      PostBatch batch(client());
      for (int i = 0; i + 1 < count; ++i) {
        const std::uint32_t at = static_cast<std::uint32_t>(i) * kBatchRecord;
        ASSERT_EQ(client().post_write(1000 * round + i, {src.get(), at, kBatchRecord}, {key, at}), Errc::ok);
      }
      const std::uint32_t last = static_cast<std::uint32_t>(count - 1) * kBatchRecord;
      ASSERT_EQ(client().post_write_imm(1000 * round + count - 1, {src.get(), last, kBatchRecord},
                                        {key, last}, static_cast<std::uint32_t>(round)),
                Errc::ok);
    }
    const Completion r = wait_recv(server());
    ASSERT_EQ(r.status, WcStatus::success);
    ASSERT_TRUE(r.has_imm);
    EXPECT_EQ(r.imm, static_cast<std::uint32_t>(round));
    EXPECT_TRUE(check(*dst, 0, dst->size(), seed)) << "round " << round;

    const std::vector<Completion> got = take_send(client(), count, 3);
    ASSERT_EQ(static_cast<int>(got.size()), count) << "round " << round;
    for (int i = 0; i < count; ++i) {
      EXPECT_EQ(got[i].wr_id, static_cast<std::uint64_t>(1000 * round + i)) << "round " << round;
      EXPECT_EQ(got[i].status, WcStatus::success);
      EXPECT_EQ(got[i].opcode, i + 1 < count ? Opcode::write : Opcode::write_imm);
    }
    Completion extra[4];
    EXPECT_EQ(client().poll_send(extra, 4), 0) << "a request completed twice";
  }
}

TEST_F(Conformance, PollingReleasesHeldPosts) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  auto rbuf = alloc(64, kLocalWrite);
  ASSERT_TRUE(src && dst && rbuf);
  fill(*src, 0, 256, 9);
  ASSERT_EQ(server().post_recv(1, {rbuf.get(), 0, 64}), Errc::ok);
  client().hold_posts();
  ASSERT_EQ(client().post_write_imm(77, {src.get(), 0, 256}, {grant(*dst), 0}, 5), Errc::ok);
  // Never released: the poll hands it to the device.
  const Completion c = wait_send(client());
  EXPECT_EQ(c.wr_id, 77u);
  EXPECT_EQ(c.status, WcStatus::success);
  const Completion r = wait_recv(server());
  ASSERT_EQ(r.status, WcStatus::success);
  EXPECT_EQ(r.imm, 5u);
  EXPECT_TRUE(check(*dst, 0, 256, 9));
  client().release_posts();
}

TEST_F(Conformance, HeldPostsOfADisconnectedEndpointEachCompleteOnce) {
  auto src = alloc(4096, kLocalWrite);
  auto dst = alloc(4096, kLocalWrite | kRemoteWrite);
  ASSERT_TRUE(src && dst);
  const RemoteRegion key = grant(*dst);
  constexpr int kCount = 10;
  client().hold_posts();
  for (int i = 0; i < kCount; ++i) {
    const std::uint32_t at = static_cast<std::uint32_t>(i) * kBatchRecord;
    ASSERT_EQ(client().post_write(i, {src.get(), at, kBatchRecord}, {key, at}), Errc::ok);
  }
  client().disconnect();
  client().release_posts();
  // A post after the disconnect is refused, or flushed after the others.
  const bool later = client().post_write(kCount, {src.get(), 0, kBatchRecord}, {key, 0}) == Errc::ok;
  const int want = kCount + (later ? 1 : 0);
  const std::vector<Completion> got = take_send(client(), want, 4);
  ASSERT_EQ(static_cast<int>(got.size()), want);
  bool failing = false;
  for (int i = 0; i < want; ++i) {
    EXPECT_EQ(got[i].wr_id, static_cast<std::uint64_t>(i));
    if (got[i].status != WcStatus::success) failing = true;
    EXPECT_TRUE(!failing || got[i].status != WcStatus::success)
        << "request " << i << " succeeded after a failure";
  }
  if (later) {
    EXPECT_EQ(got[kCount].status, WcStatus::flushed);
  }
  Completion extra[4];
  EXPECT_EQ(client().poll_send(extra, 4), 0) << "a request completed twice";
}

}  // namespace
}  // namespace catena::fabric::test
