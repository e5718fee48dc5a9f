// The CUDA backend over several GPUs (OpenModelOptions::gpus): the split
// (engine/gpu_split.h), then for the layer split the pipeline of one stage
// per GPU (backend/cuda/multi_gpu/pipeline_runner.h), for the tensor split one rank
// per GPU (backend/cuda/multi_gpu/tensor_parallel_runner.h). The tensor split runs
// when asked for; chosen by auto, the layer split runs instead (the tensor
// split is unmeasured on several GPUs) and the summary says so.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "backend/cuda/multi_gpu/pipeline_runner.h"
#include "gguf/gguf_file.h"
#include "planning/multi_gpu_plan.h"
#include "runtime/model_runner.h"

namespace nt {

struct OpenedPipeline {
  std::unique_ptr<ModelRunner> runner;
  std::string summary;  // how --split auto chose; empty when the split was given
};

OpenedPipeline open_cuda_pipeline(const GgufFile& file, int64_t context, const CudaPipelineOptions& options,
                                  std::optional<Split> split);

}  // namespace nt
