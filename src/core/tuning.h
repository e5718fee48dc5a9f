// The kernels' A/B switches below any runner's options (the CUDA runner's own
// are CudaRunnerOptions fields: backend/cuda/runner/runner_switches.h). They
// are process-wide because the kernels that read them take no options. Each
// field's environment variable sets it for a run; the first read fixes them
// for the process.
#pragma once

#include <string>

namespace nt {

struct Tuning {
  int cpu_prefetch_bytes = 2048;     // NT_CPU_PREFETCH_BYTES, 0 to 1 MiB: how far ahead the CPU dots prefetch weights (0: none)
  bool cpu_prefetch_nta = false;     // NT_CPU_PREFETCH_NTA=0|1: the non-temporal hint, for weights read once a pass
  int cpu_pieces_per_thread = 4;     // NT_CPU_PIECES_PER_THREAD, 1 to 64: a parallel_for's pieces per thread (1: one static share each)
  int cpu_gemm_min_tokens = 0;       // NT_CPU_GEMM_MIN_TOKENS: the blocked GEMM from this many tokens in every format; 0: each format's own
  std::string cpu_isa;               // NT_CPU_ISA=scalar|avx2|avx512: the CPU kernels' level; empty: the best this CPU has
  bool cuda_pdl = true;              // NT_CUDA_PDL=0|1: programmatic dependent launch (sm_90 and newer)
  int cuda_columns_apart_waves = 2;  // NT_CUDA_COLUMNS_APART, 0 to 64: waves a stepwise mat-vec may take so that each column has blocks of its own (0: never)
  int hybrid_ring_slots = 3;         // NT_HYBRID_RING_SLOTS, 2 to 8: the hybrid split's host-to-GPU ring slots
};

// `defaults` with each variable that is set applied; nt::Error naming the
// variable for a value out of its range.
Tuning tuning_from_environment(const Tuning& defaults = {});

// The process's switches: the environment's, read once.
const Tuning& tuning();

}  // namespace nt
