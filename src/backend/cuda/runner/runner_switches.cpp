#include "backend/cuda/runner/runner_switches.h"

#include <limits>

#include "core/env_setting.h"
#include "core/error.h"

namespace nt {

CudaRunnerOptions with_environment_switches(CudaRunnerOptions o) {
  constexpr int64_t kAny = std::numeric_limits<int64_t>::max();
  const auto flag = [](const char* name, bool value) { return env_setting(name, value, 0, 1) != 0; };
  o.decode_gemm_min_tokens = env_setting("NT_CUDA_DECODE_GEMM", o.decode_gemm_min_tokens, 0, kAny);
  if (const int64_t n = env_setting("NT_CUDA_INT8_GEMM", -1, 0, kAny); n >= 0) {
    if (n == 1) fail("NT_CUDA_INT8_GEMM=1: expected 0 (off) or the smallest chunk it takes, at least 2");
    o.int8_gemm_min_tokens = n == 0 ? kAny : n;
  }
  o.int8_gemm_widest_tile = int(env_setting("NT_CUDA_INT8_TILE", o.int8_gemm_widest_tile, 32, 64));
  o.super_block_activations = flag("NT_CUDA_SUPER_BLOCKS", o.super_block_activations);
  o.matvec_row_pairs = flag("NT_CUDA_MATVEC_PAIRS", o.matvec_row_pairs);
  o.sequence_splits = flag("NT_CUDA_SEQUENCE_SPLITS", o.sequence_splits);
  o.stepwise_steps_max = env_setting("NT_CUDA_STEPWISE_STEPS", o.stepwise_steps_max, -1, std::numeric_limits<int32_t>::max());
  o.tensor_graphs = flag("NT_CUDA_TENSOR_GRAPHS", o.tensor_graphs);
  o.stream_run_ahead = flag("NT_STREAM_RUN_AHEAD", o.stream_run_ahead);
  return o;
}

}  // namespace nt
