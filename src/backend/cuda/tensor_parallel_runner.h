// The tensor split over several GPUs (Megatron style): one CUDA runner rank
// per GPU over every layer, each holding its shard (runtime/tensor_shard.h:
// its KV-head groups of attention and its FFN columns) as the multi-GPU
// planner placed it (storage/multi_gpu_plan.h). A pass runs every rank on
// the same chunks at once, each on a thread of its own; after attn_output
// and after ffn_down the ranks' partial sums are added by an all-reduce
// (residual_reducer.h: NCCL between GPUs, or through one GPU's memory when
// every rank is on that GPU, the test mode). Rank 0 embeds the tokens and
// computes the head and what the entries ask for. Every shard is resident:
// a plan that streams is refused. It serves the whole ModelRunner seam, as
// the layer split does.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cuda/pipeline_runner.h"
#include "engine/model_runner.h"
#include "gguf/gguf_file.h"
#include "storage/multi_gpu_plan.h"

namespace nt {

// A rank per GPU placement of the tensor split `plan` (place_multi_gpu over
// cuda_pipeline_request's, with options.gpus in the plan's order). Throws
// nt::Error naming the GPU that is absent, out of memory or given layers to
// stream, and when NCCL cannot be loaded for ranks on distinct GPUs.
std::unique_ptr<ModelRunner> make_cuda_tensor_parallel(const GgufFile& file, int64_t context,
                                                       const CudaPipelineOptions& options, const MultiGpuPlan& plan);

}  // namespace nt
