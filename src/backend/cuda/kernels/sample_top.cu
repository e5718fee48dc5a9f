// One block over at most kMaxTopLogits candidates: the exponentials in
// parallel, each sum by one thread in candidate order, so the float64 results
// are the host sampler's up to the last bit of exp (CUDA's double exp is
// within 1 ulp; a draw could differ only when it lands within ~1e-16 of a
// boundary). Bytes moved: k candidates and ~100 bytes of host memory in, 4
// bytes out to the host.
#include "backend/cuda/kernels/sample_top.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/launch.cuh"
#include "core/error.h"

namespace nt {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads >= kMaxTopLogits);

__global__ void __launch_bounds__(kThreads)
    sample_top_kernel(const TopLogit* top, const int32_t* top_k, const int32_t* poisoned, const SampleChain* chain,
                      StepAdvance advance) {
  __shared__ double weight[kMaxTopLogits];
  __shared__ int kept;
  cuda::allow_dependents();
  const int tid = int(threadIdx.x);
  // Host memory: read before the wait, while the selection finishes.
  const double temperature = chain->temperature, top_p = chain->top_p, min_p = chain->min_p;
  const int pos = *advance.pos;  // written by the previous step's pick, before this step's launches
  const double u = chain->uniforms[pos % kSampleUniforms];
  cuda::wait_for_inputs();
  const int k = *top_k;
  const float best = top[0].logit;
  if (*poisoned >= 0 || best == -INFINITY) {
    if (tid == 0) advance.host_picks[pos % advance.ring_size] = *poisoned >= 0 ? -1 : -2;
    return;
  }
  const double top_logit = best;
  int n = k;
  if (top_p < 1.0 && n > 1) {  // keep_top_p: the smallest prefix whose mass reaches top_p of the total
    if (tid < n) weight[tid] = exp(double(top[tid].logit) - top_logit);
    __syncthreads();
    if (tid == 0) {
      double total = 0.0;
      for (int i = 0; i < n; ++i) total += weight[i];
      const double target = top_p * total;
      double mass = 0.0;
      kept = n;
      for (int i = 0; i < n; ++i) {
        mass += weight[i];
        if (mass >= target) {
          kept = i + 1;
          break;
        }
      }
    }
    __syncthreads();
    n = kept;
  }
  if (min_p > 0.0) {  // keep_min_p: logits at least top + log(min_p), a prefix of the sorted top
    const double threshold = top_logit + log(min_p);
    __syncthreads();  // every thread has read `kept` above
    if (tid == 0) {
      int i = 0;
      while (i < n && !(double(top[i].logit) < threshold)) ++i;
      kept = i;
    }
    __syncthreads();
    n = kept;
  }
  if (tid < n) weight[tid] = exp((double(top[tid].logit) - top_logit) / temperature);
  __syncthreads();
  if (tid != 0) return;
  double total = 0.0;
  for (int i = 0; i < n; ++i) total += weight[i];
  const double target = u * total;
  double mass = 0.0;
  int32_t pick = top[0].id;
  for (int i = 0; i < n; ++i) {  // draw: the first candidate whose running mass passes the target
    if (weight[i] <= 0.0) continue;
    mass += weight[i];
    pick = top[i].id;
    if (mass > target) break;
  }
  *advance.token = pick;
  advance.host_picks[pos % advance.ring_size] = pick;
  *advance.pos = pos + 1;
}

}  // namespace

void sample_top_and_advance(const TopLogit* top, const int32_t* k, const int32_t* poisoned, const SampleChain* chain,
                            const StepAdvance& advance, cudaStream_t stream) {
  if (!advance.token || !advance.pos || !advance.host_picks || advance.ring_size <= 0) {
    fail("sample_top_and_advance needs the token, the position and a ring of host picks");
  }
  cuda::launch_kernel(sample_top_kernel, dim3(1), dim3(kThreads), 0, stream, top, k, poisoned, chain, advance);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt
