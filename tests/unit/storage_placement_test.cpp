// The placement planner: budgets that force each tier, exact boundaries, the
// reserve arithmetic, clear errors for budgets too small, and a brute-force
// comparison over random models and budgets.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/byte_size.h"
#include "core/error.h"
#include "planning/placement.h"

namespace nt {
namespace {

constexpr uint64_t MiB = 1ull << 20;

// Ten equal layers of 100 MiB (110 MiB when staged: aligned runs), a 50 MiB
// head, 1 MiB of norms, a 200 MiB embedding, and a round 1000 MiB reserve.
ModelFootprint ten_layers() {
  ModelFootprint m;
  m.layers.assign(10, LayerFootprint{100 * MiB, 105 * MiB, 110 * MiB});
  m.output_head_bytes = 50 * MiB;
  m.small_bytes = 1 * MiB;
  m.token_embd_bytes = 200 * MiB;
  return m;
}

PlanRequest request(uint64_t vram, uint64_t ram) {
  PlanRequest r;
  r.vram_budget = vram;
  r.ram_budget = ram;
  r.reserve.kv_cache = 600 * MiB;
  r.reserve.activations = 300 * MiB;
  r.reserve.logits = 60 * MiB;
  r.reserve.gemm_scratch = 40 * MiB;
  return r;
}

constexpr uint64_t kFixed = (50 + 1 + 1000) * MiB;  // head + norms + reserve
constexpr uint64_t kRing = 2 * 110 * MiB;           // two slots of the largest streamed layer (staged size)
constexpr uint64_t kStaging = 2 * 110 * MiB;

std::string tiers(const PlacementPlan& p) {
  std::string s;
  for (Tier t : p.layer_tier) s += tier_name(t)[0];
  return s;
}

TEST(StoragePlacement, EverythingResidentWhenVramIsAmple) {
  const auto p = plan_placement(ten_layers(), request(100000 * MiB, 0));
  EXPECT_EQ(tiers(p), "vvvvvvvvvv");
  EXPECT_EQ(p.vram_ring, 0u) << "no streamed layer, no ring";
  EXPECT_TRUE(p.token_embd_in_vram) << "room left: the embedding joins the resident model";
  EXPECT_EQ(p.vram_total(), kFixed + 1000 * MiB + 200 * MiB);
  EXPECT_EQ(p.streamed_from_ram + p.streamed_from_disk, 0u);
}

TEST(StoragePlacement, ExactFitOfAllLayersLeavesTheEmbeddingOnTheHost) {
  const auto p = plan_placement(ten_layers(), request(kFixed + 1000 * MiB, 0));
  EXPECT_EQ(tiers(p), "vvvvvvvvvv");
  EXPECT_FALSE(p.token_embd_in_vram);
  EXPECT_EQ(p.vram_total(), kFixed + 1000 * MiB);
}

TEST(StoragePlacement, VramBoundaryIsExact) {
  const uint64_t three = kFixed + 300 * MiB + kRing;
  const auto ram_all = 100000 * MiB;
  EXPECT_EQ(tiers(plan_placement(ten_layers(), request(three, ram_all))), "vvvrrrrrrr");
  EXPECT_EQ(tiers(plan_placement(ten_layers(), request(three - 1, ram_all))), "vvrrrrrrrr");
  const auto p = plan_placement(ten_layers(), request(three, ram_all));
  EXPECT_EQ(p.vram_total(), three);
  EXPECT_EQ(p.vram_slot_bytes, 110 * MiB);
  EXPECT_FALSE(p.token_embd_in_vram);
  EXPECT_EQ(p.streamed_from_ram, 7 * 105 * MiB);
  EXPECT_EQ(p.ram_total(), 7 * 110 * MiB) << "no disk layers, no staging";
}

TEST(StoragePlacement, RamBoundaryAndDiskTier) {
  const uint64_t vram = kFixed + 300 * MiB + kRing;
  const uint64_t four = 4 * 110 * MiB + kStaging;
  auto p = plan_placement(ten_layers(), request(vram, four));
  EXPECT_EQ(tiers(p), "vvvrrrrddd");
  EXPECT_EQ(p.streamed_from_ram, 4 * 105 * MiB);
  EXPECT_EQ(p.streamed_from_disk, 3 * 105 * MiB);
  EXPECT_EQ(p.ram_staging, kStaging);
  EXPECT_EQ(p.ram_total(), four);
  EXPECT_EQ(tiers(plan_placement(ten_layers(), request(vram, four - 1))), "vvvrrrdddd");
  // RAM for the staging buffers only: everything streamed comes from storage.
  p = plan_placement(ten_layers(), request(vram, kStaging));
  EXPECT_EQ(tiers(p), "vvvddddddd");
  EXPECT_EQ(p.ram_layers, 0u);
  // Enough RAM for every streamed layer: no staging is needed after all.
  EXPECT_EQ(tiers(plan_placement(ten_layers(), request(vram, 7 * 110 * MiB))), "vvvrrrrrrr");
}

TEST(StoragePlacement, AllThreeTiersAtOnceAndCounts) {
  const auto p = plan_placement(ten_layers(), request(kFixed + 200 * MiB + kRing, 3 * 110 * MiB + kStaging));
  EXPECT_EQ(tiers(p), "vvrrrddddd");
  EXPECT_EQ(p.count(Tier::Vram), 2);
  EXPECT_EQ(p.count(Tier::Ram), 3);
  EXPECT_EQ(p.count(Tier::Disk), 5);
  EXPECT_EQ(p.resident_bytes(ten_layers(), Tier::Vram), 200 * MiB);
  EXPECT_EQ(p.resident_bytes(ten_layers(), Tier::Ram), 330 * MiB);
}

TEST(StoragePlacement, CuFileNeedsNoHostStaging) {
  PlanRequest r = request(kFixed + kRing, 0);
  r.disk_to_device = true;
  const auto p = plan_placement(ten_layers(), r);
  EXPECT_EQ(tiers(p), "dddddddddd");
  EXPECT_EQ(p.ram_total(), 0u);
  EXPECT_EQ(p.streamed_from_disk, 10 * 105 * MiB);
}

TEST(StoragePlacement, TiedHeadIsTheEmbeddingAndStaysInVram) {
  ModelFootprint m = ten_layers();
  m.tied_embeddings = true;
  m.output_head_bytes = m.token_embd_bytes;
  const auto p = plan_placement(m, request(100000 * MiB, 0));
  EXPECT_TRUE(p.token_embd_in_vram);
  EXPECT_EQ(p.vram_total(), 200 * MiB + 1 * MiB + 1000 * MiB + 1000 * MiB) << "the embedding counted once";
}

TEST(StoragePlacement, VramTooSmallSaysHowMuchIsNeeded) {
  const uint64_t needed = kFixed + kRing;  // every layer streamed
  EXPECT_EQ(tiers(plan_placement(ten_layers(), request(needed, 100000 * MiB))), "rrrrrrrrrr");
  try {
    plan_placement(ten_layers(), request(needed - 1, 100000 * MiB));
    ADD_FAILURE() << "a VRAM budget below the minimum was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("VRAM budget"), std::string::npos) << message;
    EXPECT_NE(message.find("needs " + format_size(needed)), std::string::npos) << message;
    EXPECT_NE(message.find("KV cache 600.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("2 layer buffers of 110.00 MiB"), std::string::npos) << message;
    EXPECT_EQ(message.find("KV cache is most of it"), std::string::npos) << message;
  }
  // A cache larger than everything else together: the message says what shrinks it.
  PlanRequest cached = request(needed, 100000 * MiB);
  cached.reserve.kv_cache = 4000 * MiB;
  try {
    plan_placement(ten_layers(), cached);
    ADD_FAILURE() << "a VRAM budget below the cache was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("the KV cache is most of it"), std::string::npos) << message;
    EXPECT_NE(message.find("--kv-pool"), std::string::npos) << message;
  }
}

TEST(StoragePlacement, RamTooSmallForStagingSaysHowMuchIsNeeded) {
  try {
    plan_placement(ten_layers(), request(kFixed + kRing, kStaging - 1));
    ADD_FAILURE() << "a RAM budget below the staging size was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("RAM budget"), std::string::npos) << message;
    EXPECT_NE(message.find(format_size(kStaging)), std::string::npos) << message;
  }
  PlanRequest zero_slots = request(100000 * MiB, 0);
  zero_slots.ring_slots = 0;
  EXPECT_THROW(plan_placement(ten_layers(), zero_slots), Error);
}

TEST(StoragePlacement, AutomaticRamBudget) {
  ModelSpec c;
  c.dim = 4096;
  c.vocab_size = 128256;
  const RamBudget r = automatic_ram_budget(48ull << 30, c, 16);
  EXPECT_EQ(r.host_buffers, 16ull * (128256 + 4096) * 4);
  EXPECT_EQ(r.headroom, 3ull << 30);
  EXPECT_EQ(r.budget, (45ull << 30) - 16ull * (128256 + 4096) * 4);
  EXPECT_EQ(automatic_ram_budget(1000, c, 16).budget, 0u) << "never below zero";
}

TEST(StoragePlacement, PredictedStepTime) {
  PlacementPlan p;
  p.streamed_from_ram = 1000000000;
  p.streamed_from_disk = 2000000000;
  StepTime t = predict_step_time(p, {25.0, 5.0});
  EXPECT_DOUBLE_EQ(t.h2d_seconds, 3e9 / 25e9);
  EXPECT_DOUBLE_EQ(t.disk_seconds, 2e9 / 5e9);
  EXPECT_DOUBLE_EQ(t.seconds(), 0.4);
  t = predict_step_time(p, {6.5, 100.0});  // a PCIe 3 x8 link bounds it instead
  EXPECT_DOUBLE_EQ(t.seconds(), 3e9 / 6.5e9);
  EXPECT_THROW(predict_step_time(p, {25.0, 0.0}), Error);
  EXPECT_DOUBLE_EQ(predict_step_time(PlacementPlan{}, {0.0, 0.0}).seconds(), 0.0) << "nothing streamed";
}

// The planner against the plainest statement of its policy, over random
// models and budgets: the most layers resident in index order that fit, then
// the most in RAM that fit, then disk.
TEST(StoragePlacement, MatchesBruteForceOverRandomCases) {
  const uint64_t seed = std::random_device{}();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 3000; ++trial) {
    ModelFootprint m;
    const int n = 1 + int(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint64_t resident = 1 + rng() % 1000;
      const uint64_t staging = resident + rng() % 50;
      m.layers.push_back({resident, resident + rng() % 10, staging});
    }
    m.output_head_bytes = rng() % 100;
    m.small_bytes = rng() % 10;
    PlanRequest r;
    r.reserve.kv_cache = rng() % 500;
    r.ring_slots = 1 + int(rng() % 3);
    r.staging_slots = 1 + int(rng() % 3);
    r.disk_to_device = rng() % 4 == 0;
    r.vram_budget = rng() % 8000;
    r.ram_budget = rng() % 8000;

    // Brute force over every (resident, in_ram) split.
    auto vram_of = [&](int k) {
      uint64_t bytes = m.output_head_bytes + m.small_bytes + r.reserve.total();
      uint64_t largest = 0;
      for (int i = 0; i < n; ++i) {
        if (i < k) bytes += m.layers[size_t(i)].resident_bytes;
        else largest = std::max({largest, m.layers[size_t(i)].resident_bytes, m.layers[size_t(i)].staging_bytes});
      }
      return bytes + uint64_t(r.ring_slots) * largest;
    };
    auto ram_of = [&](int k, int j) {
      uint64_t bytes = 0, largest_disk = 0;
      for (int i = k; i < n; ++i) {
        if (i < k + j) bytes += m.layers[size_t(i)].staging_bytes;
        else largest_disk = std::max(largest_disk, m.layers[size_t(i)].staging_bytes);
      }
      return bytes + (r.disk_to_device ? 0 : uint64_t(r.staging_slots) * largest_disk);
    };
    int best_k = -1;
    for (int k = 0; k <= n; ++k) {
      if (vram_of(k) <= r.vram_budget) best_k = k;
    }
    int best_j = -1;
    for (int j = 0; best_k >= 0 && j <= n - best_k; ++j) {
      if (ram_of(best_k, j) <= r.ram_budget) best_j = j;
    }
    if (best_k < 0 || best_j < 0) {
      EXPECT_THROW(plan_placement(m, r), Error) << "trial " << trial;
      continue;
    }
    const PlacementPlan p = plan_placement(m, r);
    std::string expected;
    for (int i = 0; i < n; ++i) expected += i < best_k ? 'v' : i < best_k + best_j ? 'r' : 'd';
    ASSERT_EQ(tiers(p), expected) << "trial " << trial;
    EXPECT_LE(p.vram_total(), r.vram_budget);
    EXPECT_LE(p.ram_total(), r.ram_budget);
    EXPECT_EQ(p.ram_total(), ram_of(best_k, best_j));
  }
}

}  // namespace
}  // namespace nt
