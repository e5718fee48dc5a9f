// What rank 0 of a tensor split tells the ranks in other processes: every
// message comes back from its bytes as it was sent, a message cut short or
// altered is refused naming what is wrong, the books a pass carries mirror
// rank 0's, and the in-process channels hand every message to every other
// rank in order.
#include <gtest/gtest.h>

#include <thread>

#include "error_text.h"
#include "runtime/rank_channel.h"
#include "runtime/rank_messages.h"

namespace nt {
namespace {

RankMessage round_trip(const RankMessage& m) { return decode_rank_message(encode_rank_message(m)); }

TEST(RankMessages, SetupComesBackAsSent) {
  const RankSetup sent{4242,
                       "host-a",
                       {30, 576, 49152, 123456789012ull},
                       {{0, 1, 0, 768}, {1, 2, 768, 768}},
                       {{Tier::Vram, Tier::Ram}, {Tier::Ram, Tier::Vram}},
                       4096,
                       512,
                       8,
                       65536};
  const auto got = std::get<RankSetup>(round_trip(sent));
  EXPECT_EQ(got.leader_pid, 4242);
  EXPECT_EQ(got.leader_space, "host-a");
  EXPECT_EQ(got.model, sent.model);
  ASSERT_EQ(got.shards.size(), 2u);
  EXPECT_EQ(got.shards[1].first_kv_head, 1);
  EXPECT_EQ(got.shards[1].kv_heads, 2);
  EXPECT_EQ(got.shards[1].first_ffn_column, 768);
  EXPECT_EQ(got.shards[1].ffn_columns, 768);
  EXPECT_EQ(got.tiers, sent.tiers);
  EXPECT_EQ(got.context, 4096);
  EXPECT_EQ(got.max_batch, 512);
  EXPECT_EQ(got.max_sequences, 8);
  EXPECT_EQ(got.kv_pool, 65536);
}

// A decode step, a stepwise run and a token tree, with every output kind.
RankPass sample_pass() {
  RankPass p;
  p.batch.top_k = 40;
  p.batch.add(11, 7, 0, Output::Argmax);
  p.batch.add(12, 3, 2, Output::Top, true);
  p.batch.add(13, 4, 2, Output::Logits, true);
  p.batch.add(14, 9, 5, Output::None);
  p.batch.add(15, 10, 5, Output::Argmax, false, 0);
  p.batch.add(16, 10, 5, Output::Argmax, false, 0);  // a sibling of the entry before: a tree
  p.layers = {0, 1, 3, 29};
  p.books = {{0, 8, {4}}, {2, 5, {1}}, {5, 12, {2}}};
  return p;
}

TEST(RankMessages, PassComesBackAsSent) {
  const RankPass sent = sample_pass();
  const auto got = std::get<RankPass>(round_trip(sent));
  EXPECT_EQ(got.batch.top_k, 40);
  ASSERT_EQ(got.batch.size(), sent.batch.size());
  for (size_t i = 0; i < sent.batch.size(); ++i) {
    const BatchEntry &a = sent.batch.entries[i], &b = got.batch.entries[i];
    EXPECT_EQ(b.token, a.token);
    EXPECT_EQ(b.pos, a.pos);
    EXPECT_EQ(b.seq, a.seq);
    EXPECT_EQ(b.output, a.output);
    EXPECT_EQ(b.stepwise, a.stepwise);
    EXPECT_EQ(b.parent, a.parent);
  }
  EXPECT_EQ(got.layers, sent.layers);
  ASSERT_EQ(got.books.size(), 3u);
  EXPECT_EQ(got.books[2].seq, 5);
  EXPECT_EQ(got.books[2].length, 12);
  EXPECT_EQ(got.books[2].pages, std::vector<int32_t>{2});
  // The follower's runs are the leader's.
  const auto runs = sequence_runs(got.batch);
  ASSERT_EQ(runs.size(), 3u);
  EXPECT_TRUE(runs[1].stepwise);
  EXPECT_TRUE(runs[2].tree);
}

TEST(RankMessages, CopiesMovesAndStopComeBackAsSent) {
  const auto copies = std::get<RankPageCopies>(round_trip(RankPageCopies{{{3, 9}, {4, 10}}}));
  ASSERT_EQ(copies.copies.size(), 2u);
  EXPECT_EQ(copies.copies[1].from, 4);
  EXPECT_EQ(copies.copies[1].to, 10);
  const auto moves = std::get<RankRowMoves>(round_trip(RankRowMoves{{{100, 64}, {131, 65}}}));
  ASSERT_EQ(moves.moves.size(), 2u);
  EXPECT_EQ(moves.moves[1].from, 131);
  EXPECT_EQ(moves.moves[1].to, 65);
  EXPECT_TRUE(std::holds_alternative<RankStop>(round_trip(RankStop{})));
}

TEST(RankMessages, EveryCutOfAPassIsRefused) {
  const std::vector<uint8_t> whole = encode_rank_message(sample_pass());
  for (size_t n = 0; n < whole.size(); ++n) {
    const std::string error = test::error_of([&] { decode_rank_message(std::span(whole).first(n)); });
    EXPECT_FALSE(error.empty()) << "cut at " << n << " of " << whole.size();
    if (n >= 12) {
      EXPECT_NE(error.find("pass message"), std::string::npos) << error;
    }
  }
  std::vector<uint8_t> longer = whole;
  longer.push_back(0);
  EXPECT_NE(test::error_of([&] { decode_rank_message(longer); }).find("1 bytes past its end"), std::string::npos);
}

TEST(RankMessages, AlteredMessagesNameWhatIsWrong) {
  std::vector<uint8_t> bytes = encode_rank_message(RankStop{});
  bytes[0] ^= 1;
  EXPECT_NE(test::error_of([&] { decode_rank_message(bytes); }).find("not a tensor-split message"), std::string::npos);
  bytes = encode_rank_message(RankStop{});
  bytes[4] = 9;  // the version
  EXPECT_NE(test::error_of([&] { decode_rank_message(bytes); }).find("same build on every rank"), std::string::npos);
  bytes = encode_rank_message(RankStop{});
  bytes[8] = 77;  // the kind
  EXPECT_NE(test::error_of([&] { decode_rank_message(bytes); }).find("unknown kind 77"), std::string::npos);
  // An entry's output kind past Top: the first entry's starts after the
  // header (12), top-k (8), the count (8), token, position and sequence (16).
  bytes = encode_rank_message(sample_pass());
  bytes[12 + 8 + 8 + 16] = 4;
  EXPECT_NE(test::error_of([&] { decode_rank_message(bytes); }).find("output kind 4"), std::string::npos);
  // A tier past Disk: the first rank's first tier follows the header (12),
  // rank 0's process (8) and host (8 + 1), the model (32), the shard count
  // (8), two shards (64) and the tier count (8).
  bytes = encode_rank_message(RankSetup{1, "h", {}, {{}, {}}, {{Tier::Vram}, {Tier::Ram}}, 1, 1, 1, 0});
  bytes[12 + 8 + 9 + 32 + 8 + 64 + 8] = 7;
  EXPECT_NE(test::error_of([&] { decode_rank_message(bytes); }).find("tier 7"), std::string::npos);
  // A count that claims more items than the bytes left hold.
  bytes = encode_rank_message(RankPageCopies{{{1, 2}}});
  bytes[12] = 200;
  EXPECT_NE(test::error_of([&] { decode_rank_message(bytes); }).find("claims 200 items"), std::string::npos);
}

TEST(RankMessages, BooksOfAPassMirrorRankZeros) {
  KvPages leader(16, 4, 64, 4), follower(16, 4, 64, 4);
  const SeqId a = leader.allocate(), b = leader.allocate();
  leader.write(a, 0, 10);
  leader.copy_prefix(a, b, 6);  // b shares a's first two pages
  leader.write(b, 6, 9);        // and copies the second before writing it
  Batch batch;
  batch.add(1, 10, a);
  batch.add(2, 9, b);
  for (const SequenceBooks& books : books_of(leader, sequence_runs(batch))) follower.mirror(books.seq, books.length, books.pages);
  for (const SeqId s : {a, b}) {
    EXPECT_EQ(follower.length(s), leader.length(s));
    EXPECT_TRUE(std::ranges::equal(follower.pages(s), leader.pages(s))) << "sequence " << s;
    for (int64_t p = 0; p < leader.length(s); ++p) EXPECT_EQ(follower.shared(s, p), leader.shared(s, p)) << s << " at " << p;
  }
  EXPECT_EQ(follower.free_pages(), leader.free_pages());
  // A sequence shortened and moved on: its dropped pages come free again.
  leader.truncate(a, 3);
  leader.write(a, 3, 5);
  follower.mirror(a, leader.length(a), leader.pages(a));
  EXPECT_EQ(follower.free_pages(), leader.free_pages());
}

TEST(RankMessages, BooksThatDoNotFitThePoolAreRefused) {
  KvPages pages(4, 8, 32, 2);
  const std::vector<int32_t> one{1}, outside{9}, two{1, 2};
  EXPECT_NE(test::error_of([&] { pages.mirror(0, 8, outside); }).find("page 9 of a pool of 4"), std::string::npos);
  EXPECT_NE(test::error_of([&] { pages.mirror(0, 9, one); }).find("do not fit"), std::string::npos);
  EXPECT_NE(test::error_of([&] { pages.mirror(0, 40, two); }).find("do not fit"), std::string::npos);
  EXPECT_NE(test::error_of([&] { pages.mirror(2, 8, one); }).find("sequence 2"), std::string::npos);
  EXPECT_EQ(pages.free_pages(), 4);
}

TEST(RankChannels, EveryFollowerGetsEveryMessageInOrder) {
  auto channels = local_rank_channels(3);
  std::vector<std::vector<uint8_t>> got[3];
  std::thread followers[2];
  for (int r = 1; r < 3; ++r) {
    followers[r - 1] = std::thread([&, r] {
      for (int i = 0; i < 3; ++i) got[r].push_back(channels[size_t(r)]->receive());
    });
  }
  for (uint8_t i = 0; i < 3; ++i) channels[0]->send(std::vector<uint8_t>(i + 1u, i));
  for (auto& t : followers) t.join();
  for (int r = 1; r < 3; ++r) {
    ASSERT_EQ(got[r].size(), 3u);
    for (uint8_t i = 0; i < 3; ++i) EXPECT_EQ(got[r][i], std::vector<uint8_t>(i + 1u, i)) << "rank " << r;
  }
  EXPECT_FALSE(test::error_of([&] { channels[1]->send({}); }).empty());
  EXPECT_FALSE(test::error_of([&] { channels[0]->receive(); }).empty());
}

TEST(RankChannels, EveryRankLearnsHowManyFailed) {
  auto channels = local_rank_channels(3);
  int counts[3][2] = {};
  std::thread ranks[3];
  for (int r = 0; r < 3; ++r) {
    ranks[r] = std::thread([&, r] {
      counts[r][0] = channels[size_t(r)]->count_failed(r == 2);
      counts[r][1] = channels[size_t(r)]->count_failed(false);  // the next round starts from none
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(counts[r][0], 1) << "rank " << r;
    EXPECT_EQ(counts[r][1], 0) << "rank " << r;
  }
}

}  // namespace
}  // namespace nt
