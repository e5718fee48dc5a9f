#ifdef NT_HAVE_CUDA
#include "engine/open_pipeline.h"

#include "core/error.h"
#include "engine/gpu_split.h"

namespace nt {

OpenedPipeline open_cuda_pipeline(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                  std::optional<Split> split) {
  const CudaPipelineRequest r = cuda_pipeline_request(file, context, options);
  GpuSplitChoice choice = choose_gpu_split(file, r.footprint, r.request, split);
  if (choice.plan.split == Split::Tensor) {
    if (split) {
      fail("--split tensor: the runner does not run the tensor split yet (`plan --gpus ... --split tensor` shows its "
           "placement); use --split layer");
    }
    choice.plan = place_multi_gpu(r.footprint, r.request, Split::Layer);
    choice.summary += "; the runner does not run the tensor split yet: the layer split runs";
  }
  return {make_cuda_pipeline(file, context, options, choice.plan), choice.summary};
}

}  // namespace nt
#endif
