// The several-GPU part of `plan --gpus 0,1 --split layer|tensor|auto`: the
// predicted pass of each split and the chosen split's per-GPU placement
// (planning/multi_gpu_plan.h has the planner and its cost model).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "planning/multi_gpu_plan.h"

namespace nt::cli {

// --split: "layer" or "tensor", or nullopt for "auto".
std::optional<Split> parse_split(const std::string& text);

struct MultiGpuReportInput {
  const ModelFootprint* model = nullptr;
  MultiGpuRequest request;                  // GPUs, budgets and rates filled in
  std::optional<Split> split;               // nullopt: the fastest
  std::vector<std::string> budget_sources;  // per GPU: "given", "free on ..."
  std::string h2d_source, gpu_source, peer_source;
};

// Prints every split's predicted pass of request.tokens tokens (or why it
// cannot be made) and the placement of the chosen one; throws nt::Error when
// the split asked for, or with auto every split, cannot be made.
void print_multi_gpu_plan(const MultiGpuReportInput& in);

}  // namespace nt::cli
