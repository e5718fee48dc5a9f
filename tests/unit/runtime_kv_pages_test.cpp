// Sequence memory books: pages taken as positions are written, shared by a
// copied prefix and copied before a shared page is written, released by
// truncate and free, and a clear error when the pool or the context runs out.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/error.h"
#include "runtime/batch.h"
#include "runtime/kv_pages.h"

namespace nt {
namespace {

TEST(KvPages, WritesTakePagesAndTruncateReleasesThem) {
  KvPages pages(4, 8, 32);
  const SeqId s = pages.allocate();
  EXPECT_TRUE(pages.write(s, 0, 9).empty());
  EXPECT_EQ(pages.length(s), 9);
  EXPECT_EQ(pages.pages(s).size(), 2u);
  EXPECT_EQ(pages.free_pages(), 2);
  // Slot = page * page_size + offset.
  EXPECT_EQ(pages.slot(s, 8), pages.pages(s)[1] * 8);
  EXPECT_EQ(pages.slot(s, 3), pages.pages(s)[0] * 8 + 3);
  pages.truncate(s, 8);
  EXPECT_EQ(pages.pages(s).size(), 1u);
  EXPECT_EQ(pages.free_pages(), 3);
  EXPECT_THROW(pages.slot(s, 8), Error);
  // A write that starts inside the sequence overwrites from there on.
  pages.write(s, 2, 4);
  EXPECT_EQ(pages.length(s), 4);
  EXPECT_THROW(pages.write(s, 6, 7), Error);  // a gap
}

TEST(KvPages, FreedSequencesReturnPagesAndIdsForReuse) {
  KvPages pages(4, 8, 32);
  const SeqId a = pages.allocate(), b = pages.allocate();
  pages.write(a, 0, 24);
  pages.write(b, 0, 8);
  EXPECT_EQ(pages.free_pages(), 0);
  pages.free(a);
  EXPECT_EQ(pages.free_pages(), 3);
  EXPECT_FALSE(pages.holds(a));
  EXPECT_THROW(pages.length(a), Error);
  const SeqId c = pages.allocate();
  EXPECT_EQ(c, a);  // the id is reused
  EXPECT_EQ(pages.length(c), 0);
  pages.write(c, 0, 24);
  std::set<int32_t> used(pages.pages(b).begin(), pages.pages(b).end());
  for (const int32_t p : pages.pages(c)) EXPECT_TRUE(used.insert(p).second) << "page " << p << " held twice";
}

TEST(KvPages, CopiedPrefixSharesPagesUntilWritten) {
  KvPages pages(6, 8, 48);
  const SeqId src = pages.allocate(), dst = pages.allocate();
  pages.write(src, 0, 20);  // pages 0, 1 full; 2 holds 4
  EXPECT_TRUE(pages.copy_prefix(src, dst, 12).empty());
  EXPECT_EQ(pages.length(dst), 12);
  ASSERT_EQ(pages.pages(dst).size(), 2u);
  EXPECT_EQ(pages.pages(dst)[0], pages.pages(src)[0]);
  EXPECT_EQ(pages.pages(dst)[1], pages.pages(src)[1]);
  EXPECT_EQ(pages.free_pages(), 3);
  // dst writes position 12, inside the shared second page: that page is copied first.
  const auto copies = pages.write(dst, 12, 13);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].from, pages.pages(src)[1]);
  EXPECT_EQ(copies[0].to, pages.pages(dst)[1]);
  EXPECT_NE(pages.pages(dst)[1], pages.pages(src)[1]);
  EXPECT_EQ(pages.pages(dst)[0], pages.pages(src)[0]);  // the full first page stays shared
  // src's own write into the first page, still shared, copies it too.
  const auto src_copies = pages.write(src, 3, 4);
  ASSERT_EQ(src_copies.size(), 1u);
  EXPECT_NE(pages.pages(dst)[0], pages.pages(src)[0]);
  // A write that starts a page copies nothing.
  const SeqId third = pages.allocate();
  pages.free(src);
  pages.copy_prefix(dst, third, 8);
  EXPECT_TRUE(pages.write(third, 8, 10).empty());
  // Freeing the sharers returns every page.
  pages.free(dst);
  pages.free(third);
  EXPECT_EQ(pages.free_pages(), 6);
}

TEST(KvPages, ExhaustionAndOverflowNameTheShortfallAndChangeNothing) {
  KvPages pages(3, 8, 24);
  const SeqId a = pages.allocate(), b = pages.allocate();
  pages.write(a, 0, 16);
  pages.write(b, 0, 4);
  try {
    pages.write(b, 4, 12);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV pool exhausted"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pages.length(b), 4);
  EXPECT_EQ(pages.pages(b).size(), 1u);
  try {
    pages.write(a, 16, 25);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pages.length(a), 16);
  // Rewriting a sequence from the start reuses its own pages, even in a full pool.
  pages.write(b, 0, 8);
  EXPECT_EQ(pages.free_pages(), 0);
  EXPECT_TRUE(pages.write(b, 0, 8).empty());
  EXPECT_TRUE(pages.write(a, 0, 16).empty());
}

TEST(KvPages, ABoundedPoolRefusesMoreLiveSequencesAndReusesFreedIds) {
  KvPages pages(8, 16, 64, 2);
  const SeqId a = pages.allocate(), b = pages.allocate();
  EXPECT_EQ(pages.sequences(), 2);
  try {
    pages.allocate();
    FAIL() << "a third sequence in a pool for two";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all 2 sequences are in use"), std::string::npos) << e.what();
  }
  pages.write(a, 0, 40);
  pages.free(a);
  EXPECT_EQ(pages.allocate(), a);  // a freed id comes back, its pages to the pool
  EXPECT_EQ(pages.free_pages(), 8);
  EXPECT_TRUE(pages.holds(b));
}

TEST(KvPages, APoolIsEveryContextOrTheSharedPositionsInWholePages) {
  EXPECT_EQ(KvPages::pool_pages(0, 4, 100, 32), 4 * 4);  // 4 contexts of 100, each in 4 pages
  EXPECT_EQ(KvPages::pool_pages(1000, 4, 100, 32), 32);  // 1000 positions shared: 31.25 pages, rounded up
  EXPECT_EQ(KvPages::pool_pages(64, 9, 4096, 32), 2);    // the sequence count no longer matters
}

TEST(Batch, SequenceRunsFollowTheBatchRules) {
  Batch batch;
  batch.add_run(std::vector<int32_t>{5, 6, 7}, 4, 2, Output::Logits);
  batch.add(9, 0, 0, Output::Argmax);
  const auto runs = sequence_runs(batch);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].seq, 2);
  EXPECT_EQ(runs[0].count, 3);
  EXPECT_EQ(runs[0].pos, 4);
  EXPECT_EQ(runs[1].first, 3);
  EXPECT_EQ(batch.entries[2].output, Output::Logits);
  EXPECT_EQ(batch.entries[1].output, Output::None);
  batch.add(10, 1, 2);  // sequence 2 again, after sequence 0
  EXPECT_THROW(sequence_runs(batch), Error);
  Batch gap;
  gap.add(1, 0, 0);
  gap.add(2, 2, 0);
  EXPECT_THROW(sequence_runs(gap), Error);
}

TEST(Batch, TreeRunsNameEarlierParentsAtTheirPositionPlusOne) {
  // The pending token at 7, two children at 8, a grandchild at 9 below the second, then a chain link.
  Batch tree;
  tree.add(1, 7, 0);
  tree.add(2, 8, 0, Output::Argmax, false, 0);
  tree.add(3, 8, 0, Output::Argmax, false, 0);
  tree.add(4, 9, 0, Output::Argmax, false, 2);
  tree.add(5, 10, 0, Output::Argmax);  // -1: below the entry before it
  tree.add(6, 0, 1);
  const auto runs = sequence_runs(tree);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_TRUE(runs[0].tree);
  EXPECT_EQ(runs[0].count, 5);
  EXPECT_FALSE(runs[1].tree);
  std::vector<int32_t> path;
  tree_path(tree, runs[0], 4, path);
  EXPECT_EQ(path, (std::vector<int32_t>{0, 2, 3, 4}));
  tree_path(tree, runs[0], 1, path);
  EXPECT_EQ(path, (std::vector<int32_t>{0, 1}));
  // Naming the entry before is a chain.
  Batch chain;
  chain.add(1, 3, 0);
  chain.add(2, 4, 0, Output::None, false, 0);
  chain.add(3, 5, 0, Output::None, false, 1);
  EXPECT_FALSE(sequence_runs(chain).at(0).tree);

  const auto refused = [](const std::vector<std::pair<int64_t, int32_t>>& pos_parent) {
    Batch b;
    for (const auto& [pos, parent] : pos_parent) b.add(1, pos, 0, Output::None, false, parent);
    EXPECT_THROW(sequence_runs(b), Error) << ::testing::PrintToString(pos_parent);
  };
  refused({{7, 0}});                     // a run's first entry follows the cache
  refused({{7, -1}, {8, 1}});            // a parent must come earlier
  refused({{7, -1}, {8, -2}});
  refused({{7, -1}, {8, 0}, {8, 1}});    // its parent's position plus one
  refused({{7, -1}, {8, 0}, {10, 0}});
}

// A sliding-window book: every position a query can still see stays held
// and every page before the window goes back to the pool.
TEST(KvPages, AWindowBookHoldsWhatTheWindowSeesAndReleasesTheRest) {
  constexpr int64_t kPage = 8, kWindow = 10;
  const int64_t most = KvPages::window_pages(kWindow, 0, 1, kPage);
  KvPages pages(most, kPage, 4096, 0, kWindow);
  const SeqId s = pages.allocate();
  for (int64_t pos = 0; pos < 300; ++pos) {
    pages.write(s, pos, pos + 1);  // one decode step at a time never runs out
    ASSERT_LE(pages.held_pages(s), most);
    for (int64_t key = std::max<int64_t>(0, pos - kWindow + 1); key <= pos; ++key) {
      ASSERT_NO_THROW(pages.slot(s, key)) << "query " << pos << " sees key " << key;
    }
  }
  EXPECT_EQ(pages.length(s), 300);
  EXPECT_EQ(pages.pages(s)[0], KvPages::kReleased);
  EXPECT_THROW(pages.slot(s, 0), Error);
  // Positions can be given back within the window, not past it.
  // The last write started at 299: its window, from 290, is held.
  EXPECT_TRUE(pages.resumable(s, 298));
  EXPECT_FALSE(pages.resumable(s, 200));
  try {
    pages.write(s, 200, 201);
    ADD_FAILURE() << "resumed before the window";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding-window"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pages.length(s), 300);  // nothing changed
  pages.write(s, 298, 299);
  EXPECT_EQ(pages.length(s), 299);
  // Freeing returns every held page; an empty sequence starts anywhere from 0.
  pages.free(s);
  EXPECT_EQ(pages.free_pages(), most);
}

TEST(KvPages, AWindowBookTakesAWholeWriteAndItsWindow) {
  constexpr int64_t kPage = 8, kWindow = 10, kWrite = 20;
  KvPages pages(KvPages::window_pages(kWindow, 0, kWrite, kPage), kPage, 4096, 0, kWindow);
  const SeqId s = pages.allocate();
  for (int64_t pos = 0; pos < 200; pos += kWrite) pages.write(s, pos, pos + kWrite);
  EXPECT_EQ(pages.free_pages(), pages.page_count() - pages.held_pages(s));
  // One more position than the pool holds names the sliding-window layers.
  try {
    pages.write(s, 200, 200 + kWrite + kPage);
    ADD_FAILURE() << "a write past the pool fit";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding-window layers"), std::string::npos) << e.what();
  }
}

TEST(KvPages, AWindowBookSharesACopiedPrefixAndCopiesTheLandingPage) {
  constexpr int64_t kPage = 8, kWindow = 12;
  KvPages pages(16, kPage, 4096, 0, kWindow);
  const SeqId src = pages.allocate(), dst = pages.allocate();
  pages.write(src, 0, 40);
  pages.write(src, 40, 43);  // releases the pages before position 31
  const int64_t held = pages.held_pages(src);
  EXPECT_TRUE(pages.copy_prefix(src, dst, 43).empty());
  EXPECT_EQ(pages.held_pages(dst), held);
  EXPECT_EQ(pages.free_pages(), 16 - held);  // shared, not copied
  // dst continues inside a shared page: that page is copied, the rest stays shared.
  const auto copies = pages.write(dst, 43, 44);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].from, pages.pages(src)[5]);
  EXPECT_EQ(copies[0].to, pages.pages(dst)[5]);
  EXPECT_EQ(pages.slot(dst, 36), pages.slot(src, 36));
  EXPECT_NE(pages.slot(dst, 42), pages.slot(src, 42));
  // A copied prefix the window no longer reaches cannot be continued.
  EXPECT_TRUE(pages.copy_prefix(src, dst, 8).empty());
  EXPECT_FALSE(pages.resumable(dst, 8));
  EXPECT_THROW(pages.write(dst, 8, 9), Error);
}

TEST(KvPages, AWindowBookKeepsItsMarginToStepBackInto) {
  constexpr int64_t kPage = 8, kWindow = 10, kMargin = 20;
  KvPages pages(KvPages::window_pages(kWindow, kMargin, 1, kPage), kPage, 4096, 0, kWindow, kMargin);
  const SeqId s = pages.allocate();
  for (int64_t pos = 0; pos < 100; ++pos) pages.write(s, pos, pos + 1);
  EXPECT_TRUE(pages.resumable(s, 99 - kMargin));  // its window, from 70, is held
  EXPECT_FALSE(pages.resumable(s, 99 - kMargin - kPage));
  pages.write(s, 99 - kMargin, 100 - kMargin);
  EXPECT_EQ(pages.length(s), 100 - kMargin);
}

TEST(KvPages, AWindowOfOneSeesOnlyItsOwnPosition) {
  KvPages pages(2, 4, 64, 0, 1);
  const SeqId s = pages.allocate();
  for (int64_t pos = 0; pos < 21; ++pos) pages.write(s, pos, pos + 1);
  EXPECT_EQ(pages.pages(s)[4], KvPages::kReleased);
  pages.write(s, 17, 18);  // lands in a page the window released, but needs nothing before it
  EXPECT_EQ(pages.length(s), 18);
  EXPECT_NO_THROW(pages.slot(s, 17));
}

}  // namespace
}  // namespace nt
