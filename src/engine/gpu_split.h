// The split a run over several GPUs takes (--split layer|tensor|auto): the
// one given, or for auto the multi-GPU planner's faster prediction
// (planning/multi_gpu_plan.h) from rates measured now: each GPU's host link
// and compute, the copies between neighbouring GPUs, and storage when a
// layer would stream from it.
#pragma once

#include <optional>
#include <string>

#include "gguf/gguf_file.h"
#include "planning/multi_gpu_plan.h"

namespace nt {

struct GpuSplitChoice {
  MultiGpuPlan plan;
  std::string summary;  // what auto measured and predicted, for the log; empty when the split was given
};

// `request` holds the budgets and buffers (rates unset). Throws nt::Error
// with the planner's reason when the split given, or with auto every
// split, cannot be made.
GpuSplitChoice choose_gpu_split(const GgufFile& file, const ModelFootprint& model, MultiGpuRequest request,
                                std::optional<Split> split);

}  // namespace nt
