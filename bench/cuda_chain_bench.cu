// Does a persistent decode kernel pay? The 8B decode step's mat-vec chain
// (per layer Q/K/V 6144 x 4096 Q4_K, wo 4096 x 4096 Q4_K, gate and up
// 14336 x 4096 Q4_K gated, down 4096 x 14336 Q6_K; 32 layers, 4.4 GB), each
// matrix waiting for the one before it, on fixed q8 activations (no norms,
// no attention, no quantization between them), three ways:
// - the engine's mat-vec launches in a captured graph, programmatic
//   dependent launch on, as the decode graph runs them;
// - one persistent kernel, all blocks resident, walking the same matrices in
//   order through the engine's mat-vec block body (the graph's variant per
//   shape), row blocks grid-stride; each block counts itself done per matrix
//   (fence + atomic) and waits for the previous matrix's count;
// - the same kernel without the waits: the streaming rate with no
//   dependencies at all, the bound for any design of this step.
// GB/s is the chain's weight bytes over the time, against the copy ceiling.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/matvec_kernel.cuh"
#include "event_timing.h"
#include "grid_counter.cuh"

namespace nt::cuda {

// One matrix of the chain as the persistent kernel walks it.
struct ChainStep {
  DeviceMatrix w, w_up;  // w_up: the gated form
  float* y = nullptr;
  int kind = 0;          // 0: Q4_K, 1: Q4_K gated (32-byte units), 2: Q6_K
};

namespace {

// One matrix through the engine's mat-vec block body (the decode graph's
// variant for the shape), its row blocks taken grid-stride; then the block
// counts itself done. `wait`: first wait until every block counted the
// previous matrix.
template <class F, bool kGated, int kSplit, bool kTwoRows>
__device__ __forceinline__ void chain_step(const ChainStep& s, const Activations& x, int index, unsigned* done, bool wait) {
  if (wait && index > 0) {
    wait_for_count(done + index - 1, gridDim.x, 32);
    __syncthreads();
  }
  MatvecParams p;
  p.w = s.w;
  p.w_up = s.w_up;
  p.x = x;
  p.y = s.y;
  constexpr int rows_per_block = kMatvecWarps / kSplit * (kTwoRows ? 2 : 1);
  const int64_t blocks = (s.w.rows + rows_per_block - 1) / rows_per_block;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    matvec_block<F, 1, kGated, kSplit, kDefaultUnroll<F, kGated || kTwoRows>, kTwoRows>(p, b);
    __syncthreads();  // split rows reuse the block's shared partials
  }
  count_block_done(done + index);
}

// PRECOND: every block resident (cooperative launch); done[] zero.
// kMinBlocks per SM caps the registers (the register kernels keep ~25-32
// warps per SM; the union of the three bodies takes 136 registers uncapped).
template <int kMinBlocks>
__global__ void __launch_bounds__(kMatvecWarps * 32, kMinBlocks) chain_kernel(const ChainStep* steps, int n_steps, const Activations x,
                                                                  unsigned* done, bool wait) {
  for (int i = 0; i < n_steps; ++i) {
    const ChainStep s = steps[i];
    switch (s.kind) {
      case 0: chain_step<FormatQ45_K<false>, false, 1, false>(s, x, i, done, wait); break;
      case 1: chain_step<FormatQ4_KPair, true, 1, false>(s, x, i, done, wait); break;
      default: chain_step<FormatQ6_K, false, 2, true>(s, x, i, done, wait); break;
    }
  }
}

// Median of `reps` timings after two warm-up runs.
template <class Body>
float median_ms(cudaStream_t stream, int reps, const Body& body) {
  std::vector<float> ms;
  for (int i = 0; i < reps + 2; ++i) {
    const float t = bench::event_ms(stream, body);
    if (i >= 2) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

// steps: the chain in order; x: q8 activations of the widest input.
void bench_chain(const std::vector<ChainStep>& steps, const Activations& x, double weight_bytes, double copy_gbs,
                 int multiprocessors) {
  cudaStream_t stream;
  NT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  constexpr int kReps = 20;
  auto print = [&](const char* what, float ms) {
    const double gbs = weight_bytes / (double(ms) * 1e-3) / 1e9;
    fmt::print("{:<60} {:>8.3f} ms {:>7.0f} GB/s {:>5.1f}% of copy\n", what, ms, gbs, 100 * gbs / copy_gbs);
  };

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  NT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (const ChainStep& s : steps) {
    MatvecParams p;
    p.w = s.w;
    if (s.kind == 1) p.w_up = s.w_up;
    p.x = x;
    p.y = s.y;
    p.y_stride = s.w.rows;
    matvec(p, 1, stream);
  }
  NT_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  NT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  print("graph of mat-vec launches (PDL)", median_ms(stream, kReps, [&] { NT_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  DeviceBuffer dev_steps(steps.size() * sizeof(ChainStep), "chain steps"), done(steps.size() * 4, "chain counts");
  NT_CUDA_CHECK(cudaMemcpy(dev_steps.get(), steps.data(), steps.size() * sizeof(ChainStep), cudaMemcpyHostToDevice));
  auto run_persistent = [&](auto kernel, const char* regs) {
    int per_sm = 0;
    NT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kMatvecWarps * 32, 0));
    for (const bool wait : {true, false}) {
      const ChainStep* s_ptr = dev_steps.as<ChainStep>();
      int n = int(steps.size());
      Activations xa = x;
      unsigned* d = done.as<unsigned>();
      bool w = wait;
      void* args[] = {&s_ptr, &n, &xa, &d, &w};
      const float ms = median_ms(stream, kReps, [&] {
        NT_CUDA_CHECK(cudaMemsetAsync(done.get(), 0, steps.size() * 4, stream));
        NT_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(kernel), dim3(unsigned(multiprocessors * per_sm)),
                                                  dim3(kMatvecWarps * 32), args, 0, stream));
      });
      print(fmt::format("persistent, {}, {} blocks/SM, {}", regs, per_sm, wait ? "waits" : "no waits").c_str(), ms);
    }
  };
  run_persistent(chain_kernel<1>, "registers uncapped");
  run_persistent(chain_kernel<6>, "registers capped for 6");
  run_persistent(chain_kernel<7>, "registers capped for 7");
  run_persistent(chain_kernel<8>, "registers capped for 8");
  cudaStreamDestroy(stream);
}

}  // namespace nt::cuda
