// Budgets that split a model's layers over the three tiers exactly, for the
// GPU tests of streamed runs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cuda/runner/cuda_runner.h"

namespace nt::test {

// Budgets that put exactly `vram` layers in VRAM and `ram` in pinned RAM (the
// rest on storage), from the sizes the runner plans with. The planner pins
// every streamed layer when that costs no more than the staging slots, and
// keeps a layer resident when that costs no more than the ring, so a split
// needs more streamed layers than ring slots, and more disk layers too.
inline CudaRunnerOptions budgets_for(const GgufFile& file, int64_t context, int64_t vram, int64_t ram, CudaRunnerOptions o) {
  CudaRunnerOptions huge = o;
  huge.vram_budget = uint64_t(1) << 50;
  huge.ram_budget = uint64_t(1) << 50;
  const CudaPlacement all = plan_cuda_placement(file, context, huge);
  const int64_t n = int64_t(all.footprint.layers.size());
  uint64_t resident = 0, slot = 0, staging = 0;
  for (const LayerFootprint& l : all.footprint.layers) {
    resident = std::max(resident, l.resident_bytes);
    slot = std::max({slot, l.resident_bytes, l.staging_bytes});
    staging = std::max(staging, l.staging_bytes);
  }
  const uint64_t rings = uint64_t(o.ring_slots);
  o.vram_budget = all.plan.vram_fixed + uint64_t(vram) * resident + (vram < n ? rings * slot : 0);
  o.ram_budget = uint64_t(ram) * staging + (vram + ram < n ? rings * staging : 0);
  const CudaPlacement p = plan_cuda_placement(file, context, o);
  EXPECT_EQ(p.plan.count(Tier::Vram), vram);
  EXPECT_EQ(p.plan.count(Tier::Ram), ram);
  EXPECT_EQ(p.plan.count(Tier::Disk), n - vram - ram);
  return o;
}

}  // namespace nt::test
