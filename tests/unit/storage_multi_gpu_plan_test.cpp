// The multi-GPU planner: one GPU reduces to plan_placement, the layer ranges
// cover every layer once in proportion to the budgets, the tensor shards
// cover every head and FFN column once, budgets hold, errors name the GPU,
// and the predicted times and the auto choice match an independent
// evaluation of the header's cost model over a grid of rates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/error.h"
#include "planning/multi_gpu_plan.h"
#include "planning/placement.h"

namespace nt {
namespace {

constexpr uint64_t MiB = 1ull << 20;

// Twenty equal layers of 100 MiB (110 MiB staged), the reserve of the whole model.
ModelFootprint twenty_layers() {
  ModelFootprint m;
  m.layers.assign(20, LayerFootprint{100 * MiB, 105 * MiB, 110 * MiB});
  m.output_head_bytes = 50 * MiB;
  m.small_bytes = 1 * MiB;
  m.token_embd_bytes = 200 * MiB;
  return m;
}

TensorSplitShape llama_like_shape() {
  TensorSplitShape s;
  s.n_heads = 32;
  s.n_kv_heads = 8;
  s.head_dim = 128;
  s.ffn_dim = 14336;
  s.attn_output_block = 256;
  s.ffn_down_block = 256;
  s.attention_fraction = 0.2;
  s.ffn_fraction = 0.79;
  return s;
}

MultiGpuRequest request(std::vector<uint64_t> vram, uint64_t ram) {
  MultiGpuRequest r;
  for (size_t g = 0; g < vram.size(); ++g) r.gpus.push_back({int(g), vram[g], 25.0, 2000.0});
  r.ram_budget = ram;
  r.reserve.kv_cache = 20 * 10 * MiB;  // 10 MiB a layer
  r.reserve.activations = 30 * MiB;
  r.reserve.logits = 20 * MiB;
  r.reserve.gemm_scratch = 40 * MiB;
  r.shape = llama_like_shape();
  r.disk_gbps = 3;
  r.peer_gbps = 20;
  r.hidden_bytes_per_token = 8192 * 4;
  return r;
}

PlanRequest single_request(const MultiGpuRequest& r) {
  PlanRequest p;
  p.vram_budget = r.gpus[0].vram_budget;
  p.ram_budget = r.ram_budget;
  p.reserve = r.reserve;
  p.ring_slots = r.ring_slots;
  p.staging_slots = r.staging_slots;
  p.disk_to_device = r.disk_to_device;
  return p;
}

void expect_layers_covered_once(const MultiGpuPlan& plan, size_t n_layers) {
  ASSERT_FALSE(plan.gpus.empty());
  EXPECT_EQ(plan.gpus.front().first_layer, 0);
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const GpuPlacement& p = plan.gpus[g];
    EXPECT_LT(p.first_layer, p.end_layer) << "GPU " << p.gpu.id << " runs no layer";
    EXPECT_EQ(p.plan.layer_tier.size(), size_t(p.end_layer - p.first_layer));
    if (g > 0) {
      EXPECT_EQ(p.first_layer, plan.gpus[g - 1].end_layer) << "ranges must be contiguous and disjoint";
    }
  }
  EXPECT_EQ(plan.gpus.back().end_layer, int64_t(n_layers));
}

void expect_budgets_respected(const MultiGpuPlan& plan, const MultiGpuRequest& r) {
  for (const auto& p : plan.gpus) EXPECT_LE(p.plan.vram_total(), p.gpu.vram_budget) << "GPU " << p.gpu.id;
  uint64_t ram = 0;
  for (const auto& p : plan.gpus) ram += p.plan.ram_total();
  EXPECT_EQ(ram, plan.ram_total);
  EXPECT_LE(plan.ram_total, r.ram_budget);
}

TEST(MultiGpuPlan, OneGpuLayerSplitIsTheSingleGpuPlacement) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    ModelFootprint m;
    const int n = std::uniform_int_distribution<int>(1, 12)(rng);
    for (int i = 0; i < n; ++i) {
      const uint64_t r = std::uniform_int_distribution<uint64_t>(10, 200)(rng) * MiB;
      m.layers.push_back({r, r + 3 * MiB, r + 5 * MiB});
    }
    m.output_head_bytes = 20 * MiB;
    m.token_embd_bytes = 30 * MiB;
    m.tied_embeddings = trial % 3 == 0;
    MultiGpuRequest r = request({std::uniform_int_distribution<uint64_t>(300, 2500)(rng) * MiB},
                                std::uniform_int_distribution<uint64_t>(300, 1500)(rng) * MiB);
    r.reserve.kv_cache = uint64_t(n) * 4 * MiB;
    PlacementPlan single;
    try {
      single = plan_placement(m, single_request(r));
    } catch (const Error&) {
      EXPECT_THROW(plan_multi_gpu(m, r, Split::Layer), Error);
      continue;
    }
    const MultiGpuPlan multi = plan_multi_gpu(m, r, Split::Layer);
    ASSERT_EQ(multi.gpus.size(), 1u);
    const PlacementPlan& p = multi.gpus[0].plan;
    EXPECT_EQ(p.layer_tier, single.layer_tier) << "trial " << trial;
    EXPECT_EQ(p.vram_total(), single.vram_total());
    EXPECT_EQ(p.ram_total(), single.ram_total());
    EXPECT_EQ(p.token_embd_in_vram, single.token_embd_in_vram);
    EXPECT_EQ(p.streamed_from_ram, single.streamed_from_ram);
    EXPECT_EQ(p.streamed_from_disk, single.streamed_from_disk);
  }
}

TEST(MultiGpuPlan, LayerRangesFollowTheBudgets) {
  // Each GPU's capacity for layers is its budget less activations and GEMM
  // scratch (70 MiB), the last also less logits, head and norms (71 MiB):
  // 1070, 2070 and 3141 MiB of budget give 1000, 2000 and 3000 MiB, so the
  // 20 layers of 110 MiB (weights and KV) divide 1 : 2 : 3.
  const MultiGpuRequest r = request({1070 * MiB, 2070 * MiB, 3141 * MiB}, 4000 * MiB);
  const MultiGpuPlan plan = plan_multi_gpu(twenty_layers(), r, Split::Layer);
  expect_layers_covered_once(plan, 20);
  expect_budgets_respected(plan, r);
  const double share[] = {20.0 / 6, 20.0 * 2 / 6, 20.0 * 3 / 6};
  for (size_t g = 0; g < 3; ++g) {
    EXPECT_NEAR(double(plan.gpus[g].end_layer - plan.gpus[g].first_layer), share[g], 0.5) << "GPU " << g;
  }
}

TEST(MultiGpuPlan, LayerSplitPoolsVramSoFewerLayersStream) {
  const ModelFootprint m = twenty_layers();
  const MultiGpuRequest one = request({1200 * MiB}, 4000 * MiB);
  const MultiGpuRequest two = request({1200 * MiB, 1200 * MiB}, 4000 * MiB);
  const PlacementPlan single = plan_multi_gpu(m, one, Split::Layer).gpus[0].plan;
  const MultiGpuPlan pooled = plan_multi_gpu(m, two, Split::Layer);
  int64_t resident = 0;
  for (const auto& p : pooled.gpus) resident += p.plan.count(Tier::Vram);
  EXPECT_GT(resident, single.count(Tier::Vram));
  expect_budgets_respected(pooled, two);
}

TEST(MultiGpuPlan, RandomPlansCoverEverythingOnceWithinBudgets) {
  std::mt19937 rng(11);
  const ModelFootprint m = twenty_layers();
  int planned = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int G = std::uniform_int_distribution<int>(1, 4)(rng);
    std::vector<uint64_t> vram;
    for (int g = 0; g < G; ++g) vram.push_back(std::uniform_int_distribution<uint64_t>(300, 3000)(rng) * MiB);
    const MultiGpuRequest r = request(vram, std::uniform_int_distribution<uint64_t>(300, 3000)(rng) * MiB);
    for (Split split : {Split::Layer, Split::Tensor}) {
      SCOPED_TRACE(testing::Message() << "trial " << trial << " split " << split_name(split));
      MultiGpuPlan plan;
      try {
        plan = plan_multi_gpu(m, r, split);
      } catch (const Error&) {
        continue;  // what the errors say is checked below
      }
      ++planned;
      expect_budgets_respected(plan, r);
      if (split == Split::Layer) {
        expect_layers_covered_once(plan, m.layers.size());
        continue;
      }
      int64_t kv = 0, ffn = 0;
      for (const auto& p : plan.gpus) {
        EXPECT_EQ(p.first_kv_head, kv);
        EXPECT_EQ(p.first_ffn_column, ffn);
        EXPECT_GT(p.kv_heads, 0);
        EXPECT_EQ(p.ffn_columns % r.shape.ffn_down_block, 0) << "ffn_down cut off a block boundary";
        const int64_t group_columns = r.shape.n_heads / r.shape.n_kv_heads * r.shape.head_dim;
        EXPECT_EQ(p.first_kv_head * group_columns % r.shape.attn_output_block, 0) << "attn_output cut off a block";
        EXPECT_EQ(p.plan.layer_tier.size(), m.layers.size());
        kv += p.kv_heads;
        ffn += p.ffn_columns;
      }
      EXPECT_EQ(kv, r.shape.n_kv_heads);
      EXPECT_EQ(ffn, r.shape.ffn_dim);
    }
  }
  EXPECT_GT(planned, 100) << "the budgets were meant to fit most of the time";
}

TEST(MultiGpuPlan, TensorSharesFollowTheBudgets) {
  const MultiGpuRequest r = request({3000 * MiB, 1000 * MiB}, 4000 * MiB);
  const MultiGpuPlan plan = plan_multi_gpu(twenty_layers(), r, Split::Tensor);
  ASSERT_EQ(plan.gpus.size(), 2u);
  EXPECT_EQ(plan.gpus[0].kv_heads, 6);  // 8 groups 3 : 1
  EXPECT_EQ(plan.gpus[1].kv_heads, 2);
  EXPECT_EQ(plan.gpus[0].ffn_columns, 56 * 3 / 4 * 256);  // 56 blocks of 256 columns 3 : 1
  EXPECT_EQ(plan.gpus[1].ffn_columns, 56 / 4 * 256);
}

TEST(MultiGpuPlan, ErrorsNameTheGpu) {
  const ModelFootprint m = twenty_layers();
  MultiGpuRequest r = request({2000 * MiB, 50 * MiB}, 4000 * MiB);
  r.gpus[1].id = 7;
  for (Split split : {Split::Layer, Split::Tensor}) {
    try {
      plan_multi_gpu(m, r, split);
      ADD_FAILURE() << "a 50 MiB GPU cannot take a share of " << split_name(split);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("GPU 7"), std::string::npos) << e.what();
    }
  }
}

// One GPU listed twice holds two stages of a layer split, or both ranks of a
// tensor split (how one GPU tests either); auto never picks the latter, and
// a tensor split with some GPUs shared and others not is an error.
TEST(MultiGpuPlan, AGpuListedTwiceHoldsTwoLayerStagesOrTwoShards) {
  MultiGpuRequest r = request({2000 * MiB, 2000 * MiB}, 4000 * MiB);
  r.gpus[1].id = 0;
  const MultiGpuPlan plan = plan_multi_gpu(twenty_layers(), r, Split::Layer);
  expect_layers_covered_once(plan, 20);
  EXPECT_EQ(plan.gpus[0].gpu.id, 0);
  EXPECT_EQ(plan.gpus[1].gpu.id, 0);
  const MultiGpuPlan shards = place_multi_gpu(twenty_layers(), r, Split::Tensor);
  ASSERT_EQ(shards.gpus.size(), 2u);
  EXPECT_EQ(shards.gpus[1].first_kv_head, shards.gpus[0].kv_heads);
  const std::vector<SplitCandidate> candidates = split_candidates(twenty_layers(), r);
  for (const SplitCandidate& c : candidates) EXPECT_TRUE(c.plan.has_value()) << split_name(c.split) << ": " << c.error;
  EXPECT_EQ(fastest_split(candidates).split, Split::Layer);
  std::vector<SplitCandidate> only_shards = candidates;
  only_shards[0].plan.reset();
  only_shards[0].error = "does not fit";
  try {
    fastest_split(only_shards);
    ADD_FAILURE() << "chose the tensor split over one GPU";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("share a GPU"), std::string::npos) << e.what();
  }
  MultiGpuRequest mixed = request({2000 * MiB, 2000 * MiB, 2000 * MiB}, 6000 * MiB);
  mixed.gpus[1].id = mixed.gpus[0].id;
  try {
    plan_multi_gpu(twenty_layers(), mixed, Split::Tensor);
    ADD_FAILURE() << "a tensor split over GPUs 0, 0 and another";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is listed twice"), std::string::npos) << e.what();
  }
}

// What a runner allocates from needs no rates; the prediction does.
TEST(MultiGpuPlan, PlacementNeedsNoRates) {
  MultiGpuRequest r = request({1500 * MiB, 1500 * MiB}, 4000 * MiB);
  const MultiGpuPlan predicted = plan_multi_gpu(twenty_layers(), r, Split::Layer);
  for (auto& g : r.gpus) g.gpu_gbps = g.h2d_gbps = 0;
  r.peer_gbps = r.disk_gbps = 0;
  const MultiGpuPlan placed = place_multi_gpu(twenty_layers(), r, Split::Layer);
  ASSERT_EQ(placed.gpus.size(), 2u);
  for (size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(placed.gpus[g].first_layer, predicted.gpus[g].first_layer);
    EXPECT_EQ(placed.gpus[g].plan.layer_tier, predicted.gpus[g].plan.layer_tier);
  }
  EXPECT_EQ(placed.seconds, 0);
  EXPECT_THROW(plan_multi_gpu(twenty_layers(), r, Split::Layer), Error);
}

// A device footprint keeps the token embedding resident, counted in
// small_bytes (or as the tied head): the layer split puts it on the first
// GPU, the head and the rest of small_bytes on the last.
TEST(MultiGpuPlan, LayerSplitHoldsTheEmbeddingOnTheFirstGpu) {
  for (const bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelFootprint m = twenty_layers();
    m.token_embd_bytes = 0;
    m.tied_embeddings = tied;
    m.resident_embedding_bytes = tied ? m.output_head_bytes : 300 * MiB;
    m.small_bytes = 1 * MiB + (tied ? 0 : m.resident_embedding_bytes);
    const MultiGpuRequest r = request({4000 * MiB, 4000 * MiB, 4000 * MiB}, 4000 * MiB);
    const MultiGpuPlan plan = place_multi_gpu(m, r, Split::Layer);
    ASSERT_EQ(plan.gpus.size(), 3u);
    // Every layer resident: vram_fixed is the reserve and the small tensors each holds.
    const auto reserve = [&](size_t g) {
      VramReserve v = r.reserve;
      v.kv_cache = 10 * MiB * uint64_t(plan.gpus[g].end_layer - plan.gpus[g].first_layer);
      if (g < 2) v.logits = 0;
      return v.total();
    };
    EXPECT_EQ(plan.gpus[0].plan.vram_fixed, reserve(0) + m.resident_embedding_bytes);
    EXPECT_EQ(plan.gpus[1].plan.vram_fixed, reserve(1));
    EXPECT_EQ(plan.gpus[2].plan.vram_fixed, reserve(2) + m.output_head_bytes + 1 * MiB);
  }
}

TEST(MultiGpuPlan, TensorSplitRejectsCutsOffBlockBoundaries) {
  MultiGpuRequest r = request({2000 * MiB, 2000 * MiB}, 4000 * MiB);
  // One query head per KV head of 64 columns: attn_output's 256-column blocks
  // hold four groups, so four groups make one piece and two GPUs cannot share it.
  r.shape.n_heads = r.shape.n_kv_heads = 4;
  r.shape.head_dim = 64;
  try {
    plan_multi_gpu(twenty_layers(), r, Split::Tensor);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn_output"), std::string::npos) << e.what();
  }
  r.shape = llama_like_shape();
  r.shape.n_kv_heads = 1;
  r.shape.n_heads = 8;
  EXPECT_THROW(plan_multi_gpu(twenty_layers(), r, Split::Tensor), Error) << "one KV head, two GPUs";
  // The layer split does not care.
  EXPECT_NO_THROW(plan_multi_gpu(twenty_layers(), r, Split::Layer));
}

// The header's cost model evaluated from the plan's tiers alone.
double independent_seconds(const ModelFootprint& m, const MultiGpuRequest& r, const MultiGpuPlan& plan) {
  const double G = double(plan.gpus.size());
  const TensorSplitShape& s = r.shape;
  std::vector<double> disk_bytes;
  double all_disk = 0;
  std::vector<std::vector<LayerFootprint>> layers;
  for (const auto& p : plan.gpus) {
    std::vector<LayerFootprint> mine;
    double fraction = 1.0;
    if (plan.split == Split::Tensor) {
      fraction = (1.0 - s.attention_fraction - s.ffn_fraction) + s.attention_fraction * double(p.kv_heads) / double(s.n_kv_heads) +
                 s.ffn_fraction * double(p.ffn_columns) / double(s.ffn_dim);
    }
    double disk = 0;
    for (int64_t i = p.first_layer; i < p.end_layer; ++i) {
      const LayerFootprint& l = m.layers[size_t(i)];
      mine.push_back({uint64_t(std::ceil(double(l.resident_bytes) * fraction)),
                      uint64_t(std::ceil(double(l.streamed_bytes) * fraction)), 0});
      if (p.plan.layer_tier[size_t(i - p.first_layer)] == Tier::Disk) disk += double(mine.back().streamed_bytes);
    }
    layers.push_back(mine);
    disk_bytes.push_back(disk);
    all_disk += disk;
  }
  double sum = 0, slowest = 0;
  for (size_t g = 0; g < plan.gpus.size(); ++g) {
    const GpuPlacement& p = plan.gpus[g];
    const bool has_head = plan.split == Split::Layer ? g + 1 == plan.gpus.size() : g == 0;
    double resident = has_head ? double(m.output_head_bytes) : 0, streamed = 0, streamed_resident = 0;
    for (size_t i = 0; i < layers[g].size(); ++i) {
      if (p.plan.layer_tier[i] == Tier::Vram) {
        resident += double(layers[g][i].resident_bytes);
      } else {
        streamed += double(layers[g][i].streamed_bytes);
        streamed_resident += double(layers[g][i].resident_bytes);
      }
    }
    const double disk = (plan.split == Split::Layer ? disk_bytes[g] : all_disk) / (r.disk_gbps * 1e9);
    const double stage = resident / (p.gpu.gpu_gbps * 1e9) +
                         std::max({streamed / (p.gpu.h2d_gbps * 1e9), disk, streamed_resident / (p.gpu.gpu_gbps * 1e9)});
    sum += stage;
    slowest = std::max(slowest, stage);
  }
  const double copy = double(r.tokens) * double(r.hidden_bytes_per_token) / (r.peer_gbps * 1e9);
  if (plan.split == Split::Layer) return sum + (G - 1) * (r.peer_latency_s + copy);
  return slowest + (G > 1 ? 2 * double(m.layers.size()) * (r.peer_latency_s + 2 * (G - 1) / G * copy) : 0);
}

TEST(MultiGpuPlan, AutoPicksTheFastestByTheCostModel) {
  const ModelFootprint m = twenty_layers();
  int layer_wins = 0, tensor_wins = 0;
  for (uint64_t vram : {800 * MiB, 1500 * MiB, 3000 * MiB}) {
    for (double peer : {0.05, 1.0, 25.0, 400.0}) {
      for (int64_t tokens : {1, 64}) {
        for (int G : {2, 3, 4}) {
          MultiGpuRequest r = request(std::vector<uint64_t>(size_t(G), vram), 2500 * MiB);
          r.peer_gbps = peer;
          r.tokens = tokens;
          SCOPED_TRACE(testing::Message() << "vram " << vram / MiB << " MiB, peer " << peer << " GB/s, " << tokens
                                          << " tokens, " << G << " GPUs");
          const auto candidates = split_candidates(m, r);
          const SplitCandidate* best = nullptr;
          for (const auto& c : candidates) {
            if (!c.plan) continue;
            const double expected = independent_seconds(m, r, *c.plan);
            EXPECT_NEAR(c.plan->seconds, expected, 1e-9 * expected) << split_name(c.split);
            if (!best || expected < independent_seconds(m, r, *best->plan)) best = &c;
          }
          if (!best) {
            EXPECT_THROW(fastest_split(candidates), Error);
            continue;
          }
          EXPECT_EQ(fastest_split(candidates).split, best->split);
          (best->split == Split::Layer ? layer_wins : tensor_wins)++;
        }
      }
    }
  }
  // The grid is meant to exercise both answers: slow peer links favour the
  // layer split, fast ones the tensor split's parallel reads.
  EXPECT_GT(layer_wins, 0);
  EXPECT_GT(tensor_wins, 0);
}

}  // namespace
}  // namespace nt
