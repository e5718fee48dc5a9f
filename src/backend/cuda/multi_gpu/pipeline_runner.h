// The layer split over several GPUs: one CUDA runner stage per GPU over a
// contiguous range of layers (pipeline_stage.h), placed by the multi-GPU
// planner (planning/multi_gpu_plan.h) from the runner's own memory plan, each
// stage streaming the layers beyond its VRAM budget from pinned RAM or
// storage into its own GPU. A pass runs each chunk of the batch through the
// stages in turn, the hidden state crossing between GPUs (hidden_state_link.h);
// the first stage embeds the tokens, the last computes the head and what the
// entries ask for. The chunks of a pass longer than max_batch, and the
// micro-batches of a decode step of several sequences, overlap: each stage
// works through them on a thread of its own. It serves the whole ModelRunner seam: batches, sequence
// memory and layer schedules, with the single-sequence methods' defaults.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cuda/runner/cuda_runner.h"
#include "gguf/gguf_file.h"
#include "planning/multi_gpu_plan.h"
#include "runtime/model_runner.h"

namespace nt {

struct CudaPipelineOptions {
  // One stage per entry, in layer order. A GPU listed twice holds two
  // stages: how one GPU tests the pipeline (the hand-off is then a device copy).
  std::vector<int> gpus;
  std::vector<uint64_t> vram_budgets;  // one per stage; empty: each GPU's free VRAM less the margin, shared by its stages
  // Everything else, for every stage (device, vram_budget and stage are set
  // per stage; the CPU computes no layers of a pipeline).
  CudaRunnerOptions runner;
  // A decode step of several sequences runs as this many micro-batches
  // (runtime/pass_chunks.h), which the stages overlap; 0: one a stage; 1: none.
  int micro_batches = 0;
  // The tensor split only: this process runs rank 0 and the other ranks run
  // in processes of their own, joined through the NCCL id written to this
  // file within join_timeout_s (tensor_parallel_runner.h). Empty: one process.
  std::string nccl_id_file;
  double join_timeout_s = 300;
};

// What the multi-GPU planner places from, found on the GPUs: the model's
// device footprint, and the request with every stage's budget, the shared RAM
// budget and the runner's buffers (no rates: those only predict).
struct CudaPipelineRequest {
  ModelFootprint footprint;
  MultiGpuRequest request;
};
// Throws nt::Error naming a GPU that is absent or whose free memory holds nothing.
CudaPipelineRequest cuda_pipeline_request(const GgufFile& file, int64_t context, const CudaPipelineOptions& options);

// A stage per GPU placement of the layer split `plan` (place_multi_gpu over
// cuda_pipeline_request's). Throws nt::Error naming the GPU that is absent,
// out of memory, or refuses peer access it reports.
std::unique_ptr<ModelRunner> make_cuda_pipeline(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                                const MultiGpuPlan& plan);

}  // namespace nt
