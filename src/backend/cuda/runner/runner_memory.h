// The CUDA side of the runner's memory plan: the budgets found on the device
// and the storage reader. The arithmetic is host code shared with
// `ntransformer plan` (planning/device_memory_plan.h).
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/runner/cuda_runner.h"
#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "planning/device_memory_plan.h"
#include "storage/io_reader.h"
#include "storage/layer_reads.h"

namespace nt {

// plan_device_placement within the options' budgets; without a VRAM budget,
// the free VRAM less kMemoryMarginBytes, without a RAM budget the automatic
// one. With o.draft_model, that draft's VRAM for `context` positions a
// sequence on this GPU (`multiprocessors` SMs) comes out of the budget.
CudaPlacement place_layers(const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads,
                           const RunnerBuffers& buffers, int64_t context, int multiprocessors, const CudaRunnerOptions& o);

// The VRAM of o.draft_model, planned from its file as its own runner will plan it.
DraftVram draft_model_vram(int64_t context, int multiprocessors, const CudaRunnerOptions& o);
// The storage reader of streamed layers (--io as given).
OpenedReader open_layer_reader(const std::string& path, const CudaRunnerOptions& o);

}  // namespace nt
