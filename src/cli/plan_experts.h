// The mixture-of-experts part of `plan`: every layer's attention, norms and
// router resident, the experts in VRAM as far as the budget goes and cached
// from pinned RAM beyond it (planning/expert_plan.h, what the CUDA runner
// allocates from), and the predicted decode rate at uniform routing, the
// misses copied or split between the link and the CPU.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "planning/device_memory_plan.h"

namespace nt::cli {

struct ExpertReportInput {
  const ModelSpec* config = nullptr;
  const ModelWeights* weights = nullptr;
  const ModelFootprint* model = nullptr;
  RunnerBuffers buffers;
  int64_t batch = 0;  // the runner's prefill chunk
  uint64_t vram_budget = 0, ram_budget = 0;
  std::string vram_source, ram_source;
  double h2d_gbps = 0, gpu_gbps = 0;
  std::string h2d_source, gpu_source;
  // The CPU's weights a second at one token, asked only when some experts
  // miss VRAM (a probe takes a while); it says where the figure came from.
  std::function<double(std::string& source)> cpu_gbps;
  // calibrate-experts' counts ([layer * experts + expert]; empty: none) and what they were counted on.
  std::vector<uint64_t> counts;
  std::string counts_source;
};

void print_expert_plan(const ExpertReportInput& in);

}  // namespace nt::cli
