// The four-tier planner: its cost model against the formula worked out by
// hand, its choice against a brute-force search over every assignment of the
// non-resident layers to RAM streaming, disk streaming or the CPU, the batch
// dependence, and the CPU-layer override's bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "planning/hybrid_plan.h"

namespace nt {
namespace {

constexpr uint64_t MiB = 1ull << 20;

ModelFootprint equal_layers(int n, uint64_t bytes) {
  ModelFootprint m;
  m.layers.assign(n, LayerFootprint{bytes, bytes, bytes});
  m.output_head_bytes = bytes / 4;
  return m;
}

// Budgets for `resident` VRAM layers (with a ring of two) and `in_ram` RAM
// layers (with two staging buffers when any layer is left to disk). Layers
// are equal, so the ring and staging take two layers' room: resident n-2 or
// n-1 makes every layer resident, and in_ram within two of the rest puts them
// all in RAM.
PlanRequest budgets(const ModelFootprint& m, int resident, int in_ram) {
  const uint64_t layer = m.layers[0].staging_bytes;
  PlanRequest r;
  const bool streams = resident < int(m.layers.size());
  r.vram_budget = m.output_head_bytes + uint64_t(resident) * layer + (streams ? 2 * layer : 0);
  const bool any_disk = resident + in_ram < int(m.layers.size());
  r.ram_budget = uint64_t(in_ram) * layer + (any_disk ? 2 * layer : 0);
  return r;
}

HybridRates rates(double h2d, double disk, double cpu1, double cpu16, double gpu) {
  HybridRates r;
  r.link = {h2d, disk};
  r.cpu = {cpu1, cpu16, 16};
  r.gpu_gbps = gpu;
  r.hidden_bytes_per_token = 8192 * 4;
  return r;
}

TEST(StorageHybridPlan, StepFollowsTheFormulaWorkedByHand) {
  // 2 resident, 1 RAM-streamed, 1 disk-streamed, 2 CPU layers of 1 GB each; head 0.25 GB.
  ModelFootprint m = equal_layers(6, 1'000'000'000);
  const std::vector<Path> path{Path::Vram, Path::Vram, Path::Ram, Path::Cpu, Path::Disk, Path::Cpu};
  const HybridRates r = rates(20, 4, 50, 10, 2000);
  for (int64_t t : {1, 16, 31}) {
    const HybridStep s = predict_hybrid_step(m, path, r, t);
    const double per_byte = 1 / 50e9 + double(t - 1) * (1 / 10e9 - 1 / 50e9) / 15;
    EXPECT_DOUBLE_EQ(s.gpu_resident, 2.25e9 / 2000e9);
    EXPECT_DOUBLE_EQ(s.link, 2e9 / 20e9);
    EXPECT_DOUBLE_EQ(s.disk, 1e9 / 4e9);
    EXPECT_DOUBLE_EQ(s.cpu, 2 * 1e9 * per_byte);
    EXPECT_DOUBLE_EQ(s.gpu_streamed, 2e9 / 2000e9);
    EXPECT_DOUBLE_EQ(s.handoff, 2 * 2 * (10e-6 + double(t) * 8192 * 4 / 20e9));
    EXPECT_DOUBLE_EQ(s.seconds(), s.gpu_resident + s.handoff + std::max({s.link, s.disk, s.cpu + s.gpu_streamed}));
  }
  EXPECT_DOUBLE_EQ(predict_hybrid_step(m, path, r, 16).cpu, 2 * 1e9 / 10e9) << "the measured point at 16 tokens";
}

TEST(StorageHybridPlan, AWidePassPointSetsTheSlopePastTheBatchPoint) {
  const CpuRate rate{50, 10, 16, 2, 64};
  EXPECT_DOUBLE_EQ(rate.seconds(1'000'000'000, 8), 1 / 50.0 + 7 * (1 / 10.0 - 1 / 50.0) / 15) << "below: the two points";
  EXPECT_DOUBLE_EQ(rate.seconds(1'000'000'000, 64), 1 / 2.0);
  EXPECT_DOUBLE_EQ(rate.seconds(1'000'000'000, 32), 1 / 10.0 + 16 * (1 / 2.0 - 1 / 10.0) / 48);
  EXPECT_THROW((CpuRate{50, 10, 16, 0, 64}.seconds(1, 32)), Error);
}

TEST(StorageHybridPlan, ACpuLayerLongerThanTheRingLeavesTheLinkIdle) {
  // Ten streamed layers (0.05 s each at 20 GB/s) and two CPU layers of 0.2 s:
  // a ring of one slot holds one copy ahead, so the link waits 0.15 s behind
  // each CPU layer and the pass takes 0.5 + 0.3 s of link instead of 0.5.
  const ModelFootprint m = equal_layers(12, 1'000'000'000);
  std::vector<Path> path(12, Path::Ram);
  path[5] = path[11] = Path::Cpu;
  HybridRates r = rates(20, 4, 5, 5, 2000);
  const HybridStep unlimited = predict_hybrid_step(m, path, r, 1);
  EXPECT_DOUBLE_EQ(unlimited.link_idle, 0);
  EXPECT_DOUBLE_EQ(unlimited.overlapped(), 0.5);
  r.ring_slots = 1;
  const HybridStep ring = predict_hybrid_step(m, path, r, 1);
  EXPECT_NEAR(ring.link_idle, 0.3, 1e-12);
  EXPECT_NEAR(ring.overlapped(), 0.8, 1e-12);
  r.ring_slots = 4;  // four copies ahead outlast a CPU layer
  EXPECT_DOUBLE_EQ(predict_hybrid_step(m, path, r, 1).link_idle, 0);
}

TEST(StorageHybridPlan, CpuLayersAreSpreadAmongTheStreamedOnes) {
  const ModelFootprint m = equal_layers(12, 100 * MiB);
  const PlacementPlan base = plan_placement(m, budgets(m, 2, 10));
  const HybridRates r = rates(25, 2, 60, 12, 3000);
  std::string s;
  for (Path p : spread_cpu_layers(m, base, r, 1, 3).path) s += path_name(p)[0];
  EXPECT_EQ(s, "vvrcrrrcrrcr");
  s.clear();
  for (Path p : spread_cpu_layers(m, base, r, 1, 5).path) s += path_name(p)[0];
  EXPECT_EQ(s, "vvrcrcrcrcrc") << "at half the RAM tier they alternate";
}

TEST(StorageHybridPlan, OverrideOutsideTheRamTierFails) {
  const ModelFootprint m = equal_layers(10, 100 * MiB);
  const PlacementPlan base = plan_placement(m, budgets(m, 2, 4));  // 2 vram, 4 ram, 4 disk
  ASSERT_EQ(base.count(Tier::Ram), 4);
  const HybridRates r = rates(25, 2, 60, 12, 3000);
  EXPECT_EQ(spread_cpu_layers(m, base, r, 1, 4).count(Path::Cpu), 4);
  EXPECT_THROW(spread_cpu_layers(m, base, r, 1, 5), Error);
  EXPECT_THROW(spread_cpu_layers(m, base, r, 1, -1), Error);
}

// Every assignment of the non-resident layers to RAM, disk or CPU that fits
// the RAM budget (the CPU's layers stay in RAM; any disk layer needs the
// staging buffers), evaluated with the cost model; returns the fastest, the
// fewest CPU layers among equals.
struct Best {
  double seconds = INFINITY;
  int64_t cpu = 0, ram = 0, disk = 0;
};
Best brute_force(const ModelFootprint& m, const PlanRequest& req, int resident, const HybridRates& r, int64_t tokens) {
  const int n = int(m.layers.size()), free = n - resident;
  int64_t combos = 1;
  for (int i = 0; i < free; ++i) combos *= 3;
  Best best;
  std::vector<Path> path(n, Path::Vram);
  for (int64_t c = 0; c < combos; ++c) {
    int64_t code = c;
    uint64_t ram_bytes = 0, max_disk_staging = 0;
    for (int i = resident; i < n; ++i) {
      path[i] = std::array{Path::Ram, Path::Disk, Path::Cpu}[code % 3];
      code /= 3;
      if (path[i] == Path::Disk) {
        max_disk_staging = std::max(max_disk_staging, m.layers[i].staging_bytes);
      } else {
        ram_bytes += m.layers[i].staging_bytes;
      }
    }
    if (ram_bytes + uint64_t(req.staging_slots) * max_disk_staging > req.ram_budget) continue;
    const double s = predict_hybrid_step(m, path, r, tokens).seconds();
    const int64_t cpu = std::count(path.begin(), path.end(), Path::Cpu);
    const double tie = 1e-12 * s;
    if (s < best.seconds - tie || (std::abs(s - best.seconds) <= tie && cpu < best.cpu)) {
      best = {s, cpu, std::count(path.begin(), path.end(), Path::Ram), std::count(path.begin(), path.end(), Path::Disk)};
    }
  }
  return best;
}

TEST(StorageHybridPlan, ChoiceMatchesBruteForceOverAllAssignments) {
  std::mt19937_64 rng(22);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  int with_cpu = 0, without_cpu = 0, with_disk = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 7;
    const ModelFootprint m = equal_layers(n, uint64_t(uniform(50, 600)) * MiB);
    const int resident = std::array{0, 1, 2, 3, 4, n}[rng() % 6];  // n-2 and n-1 cannot be (see budgets)
    const int in_ram = int(rng() % (n - resident + 1));
    const PlanRequest req = budgets(m, resident, in_ram);
    const double cpu1 = uniform(5, 120);
    const HybridRates r = rates(uniform(5, 60), uniform(0.5, 8), cpu1, cpu1 / uniform(1, 16), uniform(500, 4000));
    const int64_t tokens = std::array{1, 2, 8, 16, 64}[rng() % 5];

    const PlacementPlan base = plan_placement(m, req);
    ASSERT_EQ(base.count(Tier::Vram), resident);
    const HybridPlan p = plan_hybrid(m, base, r, tokens);
    const Best b = brute_force(m, req, resident, r, tokens);
    SCOPED_TRACE(::testing::Message() << "trial " << trial << ": " << resident << " resident, " << in_ram
                                      << " fit in RAM, " << tokens << " tokens");
    EXPECT_NEAR(p.step.seconds(), b.seconds, 1e-12 * b.seconds);
    EXPECT_EQ(p.count(Path::Cpu), b.cpu);
    EXPECT_EQ(p.count(Path::Ram), b.ram);
    EXPECT_EQ(p.count(Path::Disk), b.disk);
    EXPECT_DOUBLE_EQ(p.step.seconds(), predict_hybrid_step(m, p.path, r, tokens).seconds());
    (b.cpu > 0 ? with_cpu : without_cpu) += 1;
    with_disk += b.disk > 0;
  }
  // The draw must exercise both outcomes, or the comparison proves little.
  EXPECT_GT(with_cpu, 30);
  EXPECT_GT(without_cpu, 30);
  EXPECT_GT(with_disk, 30);
}

TEST(StorageHybridPlan, MoreTokensPerPassGiveTheCpuFewerLayers) {
  // The benchmarked 70B at 24 GiB: 40 resident, 40 in RAM (0.51 GB each), a
  // 55 GB/s link, a CPU at 52 GB/s for one token and 11.4 GB/s at 16.
  const ModelFootprint m = equal_layers(80, 510'000'000);
  const PlacementPlan base = plan_placement(m, budgets(m, 40, 40));
  const HybridRates r = rates(55.3, 1.0, 52, 11.4, 3000);
  int64_t previous = base.count(Tier::Ram);
  for (int64_t t : {1, 2, 4, 8, 16, 32, 64, 256}) {
    const int64_t k = plan_hybrid(m, base, r, t).count(Path::Cpu);
    EXPECT_LE(k, previous) << t << " tokens per pass";
    previous = k;
  }
  EXPECT_GT(plan_hybrid(m, base, r, 1).count(Path::Cpu), 10) << "decode: the CPU takes a large share";
  // Where one layer on the CPU outlasts the whole streamed pass, no split can gain.
  const double streaming_alone = spread_cpu_layers(m, base, r, 1, 0).step.seconds();
  int64_t t = 1;
  while (r.cpu.seconds(m.layers[0].resident_bytes, t) <= streaming_alone) t *= 2;
  EXPECT_EQ(plan_hybrid(m, base, r, t).count(Path::Cpu), 0) << t << " tokens per pass: streaming alone";
  EXPECT_GT(plan_hybrid(m, base, r, t / 2).count(Path::Cpu), 0) << "the bound is not loose by more than 2x";
  EXPECT_LT(plan_hybrid(m, base, r, 1).step.seconds(), spread_cpu_layers(m, base, r, 1, 0).step.seconds());
}

TEST(StorageHybridPlan, SpreadRanksTakeTheMiddleOfEqualStretches) {
  EXPECT_EQ(spread_ranks(10, 3), (std::vector<int64_t>{1, 5, 8}));  // 10/6, 30/6, 50/6
  EXPECT_EQ(spread_ranks(5, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(spread_ranks(4, 0).empty());
  EXPECT_THROW(spread_ranks(3, 4), Error);
}

TEST(StorageHybridPlan, AShareOfTheCpuLayersIsASpreadSubsetOfThem) {
  const ModelFootprint m = equal_layers(14, 100 * MiB);
  const PlacementPlan base = plan_placement(m, budgets(m, 2, 12));
  const std::vector<Path> all = spread_cpu_paths(base, 8);
  const auto letters = [](const std::vector<Path>& path) {
    std::string s;
    for (Path p : path) s += path_name(p)[0];
    return s;
  };
  EXPECT_EQ(letters(all), "vvcrccrccrccrc");
  // Ranks 1, 4 and 6 of the 8 (spread_ranks(8, 3)): layers 4, 8 and 11.
  EXPECT_EQ(letters(cpu_share_paths(base, 8, 3)), "vvrrcrrrcrrcrr");
  EXPECT_EQ(cpu_share_paths(base, 8, 8), all);
  EXPECT_EQ(letters(cpu_share_paths(base, 8, 0)), "vvrrrrrrrrrrrr");
}

TEST(StorageHybridPlan, WiderPassesGiveTheCpuTheShareThatBalancesTheLink) {
  // 12 RAM layers of 1 GB: streaming one takes 0.05 s on a 20 GB/s link. A
  // CPU layer takes 0.02 s at one token and 0.1 s at 16 (linear between).
  // Two tokens (0.025 s a layer) still take all 8 CPU layers (0.2 s against
  // 0.2 s of streaming the other 4); four (0.036 s) balance at 7 against 5
  // (0.25 s); 16 at 4 against 8 (0.4 s each side); 32 (0.185 s a CPU layer)
  // at 2 against 10; 64 (0.356 s) gain with one: 0.55 s against 0.6.
  const ModelFootprint m = equal_layers(14, 1'000'000'000);
  const PlacementPlan base = plan_placement(m, budgets(m, 2, 12));
  const HybridRates r = rates(20, 4, 50, 10, 2000);
  const CpuPassPlan p = plan_cpu_passes(m, base, r, 8, 64);
  EXPECT_EQ(p.all_up_to, 2);
  ASSERT_EQ(p.wider.size(), 5u);
  for (size_t i = 0; i < p.wider.size(); ++i) EXPECT_EQ(p.wider[i].max_tokens, int64_t(4) << i);
  EXPECT_EQ(p.wider[0].layers, 7);
  EXPECT_EQ(p.wider[2].layers, 4);
  EXPECT_EQ(p.wider[3].layers, 2);
  EXPECT_EQ(p.wider[4].layers, 1);
  // A CPU whose 16-token passes take 10 s a layer gains nothing from two
  // tokens on (0.02 + 0.66 s a layer): the decode keeps its layers, nothing wider.
  const CpuPassPlan slow = plan_cpu_passes(m, base, rates(20, 4, 50, 0.1, 2000), 8, 64);
  EXPECT_EQ(slow.all_up_to, 1);
  EXPECT_TRUE(slow.wider.empty());
  EXPECT_EQ(plan_cpu_passes(m, base, r, 0, 64).all_up_to, 0);
}

TEST(StorageHybridPlan, APassTakesTheShareOfTheNarrowestWidthThatCoversIt) {
  const CpuPassPlan p{.all_up_to = 2, .wider = {{8, 5}, {32, 2}}};
  EXPECT_EQ(p.share(1, 9), 9);
  EXPECT_EQ(p.share(2, 9), 9);
  EXPECT_EQ(p.share(3, 9), 5);
  EXPECT_EQ(p.share(8, 9), 5);
  EXPECT_EQ(p.share(9, 9), 2);
  EXPECT_EQ(p.share(32, 9), 2);
  EXPECT_EQ(p.share(33, 9), 0);
  EXPECT_EQ((CpuPassPlan{.all_up_to = 2, .wider = {}}.share(4, 9)), 0);
  // The host's scratch is sized for the widest pass that gives it a layer.
  EXPECT_EQ(p.widest(), 32);
  EXPECT_EQ((CpuPassPlan{.all_up_to = 2, .wider = {{8, 5}, {32, 0}}}.widest()), 8);
  EXPECT_EQ((CpuPassPlan{.all_up_to = 4, .wider = {}}.widest()), 4);
}

TEST(StorageHybridPlan, APassPlanThatDoesNotWidenIsRefused) {
  EXPECT_NO_THROW((CpuPassPlan{.all_up_to = 2, .wider = {{8, 5}, {32, 2}}}.check(9)));
  EXPECT_NO_THROW(CpuPassPlan{}.check(0));
  const auto message = [](const CpuPassPlan& p, int64_t cpu_layers) {
    try {
      p.check(cpu_layers);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(CpuPassPlan{}, 3), "3 CPU layers computed in passes of up to 0 tokens: at least 1");
  EXPECT_EQ(message(CpuPassPlan{.all_up_to = 8, .wider = {{8, 2}}}, 3),
            "the CPU's share of passes of up to 8 tokens: 2 of its 3 layers, in passes wider than 8 (0 to 3 layers)");
  EXPECT_EQ(message(CpuPassPlan{.all_up_to = 1, .wider = {{8, 4}}}, 3),
            "the CPU's share of passes of up to 8 tokens: 4 of its 3 layers, in passes wider than 1 (0 to 3 layers)");
}

TEST(StorageHybridPlan, NoCpuLayersWhenTheCpuIsSlow) {
  const ModelFootprint m = equal_layers(10, 100 * MiB);
  const PlacementPlan base = plan_placement(m, budgets(m, 5, 5));
  // A CPU far slower than the link: every CPU layer costs more than it saves.
  const HybridPlan p = plan_hybrid(m, base, rates(50, 1, 1, 0.5, 3000), 1);
  EXPECT_EQ(p.count(Path::Cpu), 0);
  EXPECT_EQ(p.count(Path::Ram), 5);
}

TEST(StorageHybridPlan, RatesThatAreMissingFailClearly) {
  const ModelFootprint m = equal_layers(4, 100 * MiB);
  const std::vector<Path> cpu_path{Path::Vram, Path::Cpu, Path::Ram, Path::Ram};
  HybridRates r = rates(25, 2, 0, 0, 3000);
  EXPECT_THROW(predict_hybrid_step(m, cpu_path, r, 1), Error);
  r = rates(0, 2, 50, 10, 3000);
  EXPECT_THROW(predict_hybrid_step(m, cpu_path, r, 1), Error);
  r = rates(25, 2, 50, 10, 0);
  EXPECT_THROW(predict_hybrid_step(m, cpu_path, r, 1), Error);
}

}  // namespace
}  // namespace nt
