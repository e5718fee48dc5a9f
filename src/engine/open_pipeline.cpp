#ifdef NT_HAVE_CUDA
#include "engine/open_pipeline.h"

#include <fmt/format.h>

#include <set>

#include "backend/cuda/multi_gpu/tensor_parallel_runner.h"
#include "core/error.h"
#include "engine/gpu_split.h"

namespace nt {

OpenedPipeline open_cuda_pipeline(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                  std::optional<Split> split) {
  const CudaPipelineRequest r = cuda_pipeline_request(file, context, options);
  GpuSplitChoice choice = choose_gpu_split(file, r.footprint, r.request, split);
  // The tensor split cuts Llama layers' matrices only so far; the layer split runs every family.
  const auto check_tensor_split_runs = [&] {
    const ModelSpec spec = read_model_spec(file.header(), file.path());
    if (!spec.llama_layers()) {
      fail("{}: the tensor split (--split tensor) runs Llama layers only so far, not architecture '{}' ({}); use "
           "--split layer",
           file.path(), spec.architecture, describe_layers(spec));
    }
  };
  if (!options.nccl_id_file.empty()) {
    if (choice.plan.split != Split::Tensor) fail("--nccl-id: a process per GPU runs the tensor split (--split tensor)");
    check_tensor_split_runs();
    const std::set<int> distinct(options.gpus.begin(), options.gpus.end());
    if (distinct.size() != options.gpus.size()) {
      fail("--nccl-id with --gpus {}: a process per GPU needs distinct GPUs (NCCL joins one rank a GPU)", fmt::join(options.gpus, ","));
    }
    const int ranks = int(choice.plan.gpus.size());
    RankLink followers = join_rank_link(0, ranks, choice.plan.gpus[0].gpu.id, options.nccl_id_file, options.join_timeout_s);
    return {make_cuda_tensor_leader(file, context, options, choice.plan, std::move(followers)), choice.summary};
  }
  if (choice.plan.split == Split::Tensor) {
    if (split) {
      check_tensor_split_runs();
      return {make_cuda_tensor_parallel(file, context, options, choice.plan), choice.summary};
    }
    // Until it is measured on several GPUs, auto does not pick it.
    choice.plan = place_multi_gpu(r.footprint, r.request, Split::Layer);
    choice.summary += "; the tensor split runs only when asked for (--split tensor) until measured on several GPUs: the "
                      "layer split runs";
  }
  return {make_cuda_pipeline(file, context, options, choice.plan), choice.summary};
}

}  // namespace nt
#endif
