// The sampler's chain after its top-k (top-p, min-p, a draw at a temperature)
// run on the GPU over the row's top as top_logits leaves it, so that sampled
// decoding can feed each pick to the next step without the host, as greedy
// decoding does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/top_logits.h"

namespace nt {

constexpr int kSampleUniforms = 8;

// Read by the kernel from pinned host memory while the selection runs, so the
// host sets them per decoding run and per step without capturing a new graph.
struct SampleChain {
  float temperature = 0.0f;  // > 0
  float top_p = 1.0f;
  float min_p = 0.0f;
  double uniforms[kSampleUniforms] = {};  // the draw of the step at position p in uniforms[p % kSampleUniforms]
};

// Picks from top[0..*k) (highest first) as Candidates::keep_top_p,
// keep_min_p and draw do on the host, in float64 with the same order of
// operations, and advances as argmax_and_advance does. A poisoned row
// (*poisoned >= 0) or a row of -inf leaves the pick -1 or -2 in host_picks
// and does not advance: the host reports the sampler's error.
void sample_top_and_advance(const TopLogit* top, const int32_t* k, const int32_t* poisoned, const SampleChain* chain,
                            const StepAdvance& advance, cudaStream_t stream);

}  // namespace nt
