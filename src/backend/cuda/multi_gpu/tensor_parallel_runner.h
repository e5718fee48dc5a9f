// The tensor split over several GPUs (Megatron style): one CUDA runner rank
// per GPU over every layer, each holding its shard (runtime/tensor_shard.h:
// its KV-head groups of attention and its FFN columns) as the multi-GPU
// planner placed it (planning/multi_gpu_plan.h). A pass runs every rank on
// the same chunks at once, each on a thread of its own; after attn_output
// and after ffn_down the ranks' partial sums are added by an all-reduce
// (residual_reducer.h: NCCL between GPUs, or through one GPU's memory when
// every rank is on that GPU, the test mode). Rank 0 embeds the tokens and
// computes the head and what the entries ask for. A rank's cuts of the
// layers beyond its VRAM stream from pinned RAM over its own link; a plan
// that reads shards from storage is refused. It serves the whole
// ModelRunner seam, as the layer split does. The ranks run as threads of one
// process, or one process per GPU: rank 0 (the leader) keeps the books and
// sends every other rank (a follower) its shard and then each pass and KV
// move (runtime/rank_messages.h) over their link (rank_link.h).
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cuda/multi_gpu/pipeline_runner.h"
#include "backend/cuda/multi_gpu/rank_link.h"
#include "gguf/gguf_file.h"
#include "planning/multi_gpu_plan.h"
#include "runtime/model_runner.h"

namespace nt {

// A rank per GPU placement of the tensor split `plan` (place_multi_gpu over
// cuda_pipeline_request's, with options.gpus in the plan's order). Throws
// nt::Error naming the GPU that is absent, out of memory or given layers to
// stream, and when NCCL cannot be loaded for ranks on distinct GPUs.
std::unique_ptr<ModelRunner> make_cuda_tensor_parallel(const GgufFile& file, int64_t context,
                                                       const CudaPipelineOptions& options, const MultiGpuPlan& plan);

// Rank 0 of the tensor split `plan` whose other ranks follow in processes
// (or threads) of their own (follow_tensor_rank), tied to them by
// `followers`: it loads plan.gpus[0]'s shard while they load theirs. Throws
// nt::Error as make_cuda_tensor_parallel does, and when a follower could not
// load its shard. Its destruction stops the followers.
std::unique_ptr<ModelRunner> make_cuda_tensor_leader(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                                     const MultiGpuPlan& plan, RankLink followers);

// A rank past the first (link.channel->rank()): loads on CUDA device `gpu`
// the shard that rank 0 sends, with `options` for everything rank 0 does
// not send (it sends the context, chunk size, sequences and KV pool), then
// runs rank 0's passes until rank 0's runner is gone. Throws nt::Error naming
// the rank when its file is not rank 0's model or its shard does not load
// (rank 0 then fails too), and on a message it cannot read.
void follow_tensor_rank(const GgufFile& file, int gpu, RankLink link, const CudaRunnerOptions& options);

}  // namespace nt
