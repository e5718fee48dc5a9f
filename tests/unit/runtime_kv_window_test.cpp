// Which layers keep only their window, and the window pool's size: the
// sliding-window layers of a spec, each sequence's window, margin and pass
// chunk in whole pages, and no pool where it would not be smaller.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/presets.h"
#include "runtime/kv_window.h"

namespace nt {
namespace {

ModelSpec gemma3_27b() { return find_model_preset("gemma3-27b")->config; }

TEST(KvWindow, SlidingLayersTakeTheWindowPoolInTheirOwnOrder) {
  const ModelSpec spec = gemma3_27b();
  const int64_t sliding = std::count_if(spec.layers.begin(), spec.layers.end(),
                                        [](const LayerSpec& l) { return l.attention.window > 0; });
  ASSERT_GT(sliding, 0);
  const int64_t page = 64, chunk = 512, sequences = 2, full_pages = sequences * 32768 / page;
  const KvWindowPlan plan = plan_kv_window(spec, full_pages, sequences, chunk, page, false);
  EXPECT_EQ(plan.window, spec.layers[0].attention.window);
  EXPECT_EQ(plan.window_layers, sliding);
  EXPECT_EQ(plan.full_layers, spec.n_layers - sliding);
  EXPECT_EQ(plan.pages, sequences * KvPages::window_pages(plan.window, kWindowStepBack, chunk, page));
  // Each pool's layers are numbered 0, 1, ... in layer order.
  int32_t next[2] = {0, 0};
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    EXPECT_EQ(plan.windowed[l], spec.layers[l].attention.window > 0) << "layer " << l;
    EXPECT_EQ(plan.index[l], next[plan.windowed[l] ? 1 : 0]++) << "layer " << l;
  }
  const auto books = plan.books(page, 32768, sequences);
  ASSERT_TRUE(books);
  EXPECT_EQ(books->window(), plan.window);
  EXPECT_EQ(books->page_count(), plan.pages);
}

TEST(KvWindow, NoPoolWhenKeptWholeOrNoSmaller) {
  const ModelSpec spec = gemma3_27b();
  for (const KvWindowPlan& plan : {plan_kv_window(spec, 512, 1, 512, 64, true),   // --swa-full
                                   plan_kv_window(spec, 16, 1, 512, 64, false)}) { // a context shorter than the window pool
    EXPECT_EQ(plan.window, 0);
    EXPECT_EQ(plan.window_layers, 0);
    EXPECT_EQ(plan.full_layers, spec.n_layers);
    EXPECT_FALSE(plan.books(64, 1024, 1));
  }
  const ModelSpec llama = find_model_preset("llama3-8b")->config;
  EXPECT_EQ(plan_kv_window(llama, 512, 1, 512, 64, false).window, 0);
}

}  // namespace
}  // namespace nt
