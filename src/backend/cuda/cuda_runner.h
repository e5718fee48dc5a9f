// Entry point to the CUDA backend for code built without CUDA headers: the
// engine calls make_cuda_runner when NT_HAVE_CUDA is defined.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/model_runner.h"
#include "gguf/gguf_file.h"

namespace nt {

struct CudaRunnerOptions {
  int device = 0;
  int64_t max_batch = 512;       // tokens per prefill chunk (bounds activation memory)
  int64_t gemm_min_tokens = 16;  // chunks at least this long use the dequantize + GEMM path
  bool decode_graph = true;      // replay single-token steps from a captured CUDA graph
};

// Uploads every weight of the Llama model in `file` to the GPU and allocates a
// KV cache of `context` tokens. Throws nt::Error when there is no usable GPU,
// when the model and cache do not fit (saying how much is needed and free), or
// for weight formats the backend cannot run. `file` must outlive nothing: the
// runner keeps no pointer into it.
std::unique_ptr<ModelRunner> make_cuda_runner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options = {});

}  // namespace nt
