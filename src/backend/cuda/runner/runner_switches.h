// The CUDA runner's A/B switches: fields of CudaRunnerOptions that a
// benchmark flips without a rebuild. The environment is one way to set them
// (a caller sets the fields themselves); a variable that is set overrides
// the field, one that is not leaves it:
//   NT_CUDA_DECODE_GEMM=N      decode_gemm_min_tokens
//   NT_CUDA_INT8_GEMM=0|N      int8_gemm_min_tokens (0: the int8 GEMM off)
//   NT_CUDA_INT8_TILE=32|64    int8_gemm_widest_tile
//   NT_CUDA_SUPER_BLOCKS=0|1   super_block_activations
//   NT_CUDA_MATVEC_PAIRS=0|1   matvec_row_pairs
//   NT_CUDA_SEQUENCE_SPLITS=0|1 sequence_splits
//   NT_CUDA_STEPWISE_STEPS=N   stepwise_steps_max
//   NT_CUDA_TENSOR_GRAPHS=0|1  tensor_graphs
//   NT_STREAM_RUN_AHEAD=0|1    stream_run_ahead
// nt::Error naming the variable for a value out of its range.
#pragma once

#include "backend/cuda/runner/cuda_runner.h"

namespace nt {

CudaRunnerOptions with_environment_switches(CudaRunnerOptions options);

}  // namespace nt
