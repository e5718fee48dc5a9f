#include "backend/cuda/kernels/moe_ops.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/kernels/launch.cuh"

namespace nt {
namespace {

// One warp a row, the scores in shared memory: the probabilities over all
// experts (softmax_over_all) or the logits. It reads n_experts floats and
// writes 2k values a row: nothing to tune.
__global__ void route_top_k_kernel(const float* logits, int n_experts, int k, bool softmax_over_all, int32_t* experts,
                                   float* weights) {
  extern __shared__ float p[];
  const int lane = threadIdx.x;
  const float* row = logits + int64_t(blockIdx.x) * n_experts;
  if (softmax_over_all) {
    float top = -INFINITY;
    for (int e = lane; e < n_experts; e += 32) top = fmaxf(top, row[e]);
    top = cuda::warp_max(top);
    float sum = 0.0f;
    for (int e = lane; e < n_experts; e += 32) {
      p[e] = expf(row[e] - top);
      sum += p[e];
    }
    sum = cuda::warp_sum(sum);
    __syncwarp();
    for (int e = lane; e < n_experts; e += 32) p[e] /= sum;
  } else {
    for (int e = lane; e < n_experts; e += 32) p[e] = row[e];
  }
  __syncwarp();
  int32_t* out_e = experts + int64_t(blockIdx.x) * k;
  float* out_w = weights + int64_t(blockIdx.x) * k;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int best_e = n_experts;
    for (int e = lane; e < n_experts; e += 32) {
      if (p[e] > best) {  // e ascending: a lane keeps the lowest index of a tie
        best = p[e];
        best_e = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float other = __shfl_xor_sync(0xffffffffu, best, o);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
    if (lane == 0) {
      out_e[j] = best_e;
      out_w[j] = best;
      p[best_e] = -INFINITY;  // taken
    }
    __syncwarp();
  }
  // The chosen scores in decreasing order: renormalized probabilities, or
  // the softmax of the chosen logits (out_w[0] their maximum).
  if (lane == 0) {
    const float top = out_w[0];
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
      if (!softmax_over_all) out_w[j] = expf(out_w[j] - top);
      sum += out_w[j];
    }
    for (int j = 0; j < k; ++j) out_w[j] /= sum;
  }
}

__global__ void add_expert_biases_kernel(float* ye, const int32_t* experts, const float* bias, int64_t width) {
  float* to = ye + int64_t(blockIdx.y) * width;
  const float* from = bias + int64_t(experts[blockIdx.y]) * width;
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < width; d += int64_t(gridDim.x) * blockDim.x) {
    to[d] += from[d];
  }
}

__global__ void gather_routed_rows_kernel(const float* x, const int32_t* routed, int k, int64_t dim, float* xe) {
  const float* from = x + int64_t(routed[blockIdx.y] / k) * dim;
  float* to = xe + int64_t(blockIdx.y) * dim;
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < dim; d += int64_t(gridDim.x) * blockDim.x) to[d] = from[d];
}

__global__ void add_routed_rows_kernel(const float* ye, const int32_t* routed, const float* weights, int k, int64_t dim,
                                       float* y) {
  const int32_t pair = routed[blockIdx.y];
  const float w = weights[pair];
  const float* from = ye + int64_t(blockIdx.y) * dim;
  float* to = y + int64_t(pair / k) * dim;
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < dim; d += int64_t(gridDim.x) * blockDim.x) {
    to[d] += w * from[d];
  }
}

// Each thread keeps its element's sum in a register and adds the choices
// expert by expert, lowest first: the same float operations in the same
// order as one add_routed_rows launch per expert.
__global__ void add_expert_outputs_kernel(const float* ye, const int32_t* experts, const float* weights, int k, int64_t dim,
                                          float* y, const int32_t* place) {
  const int64_t t = blockIdx.y;
  const int32_t* chosen = experts + t * k;
  float* to = y + t * dim;
  for (int64_t d = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; d < dim; d += int64_t(gridDim.x) * blockDim.x) {
    float acc = to[d];
    int32_t last = -1;
    for (int r = 0; r < k; ++r) {
      int j = -1;  // the choice of the next expert above `last`
      for (int c = 0; c < k; ++c) {
        if (chosen[c] > last && (j < 0 || chosen[c] < chosen[j])) j = c;
      }
      const int64_t pair = t * k + j;
      acc += weights[pair] * ye[(place ? place[pair] : pair) * dim + d];
      last = chosen[j];
    }
    to[d] = acc;
  }
}

constexpr int kRouteThreads = 32;
constexpr int kRowThreads = 256;

// A row of dim floats per grid row y, at most 8 blocks across it.
dim3 row_grid(int64_t m, int64_t dim) { return dim3(std::min(cuda::blocks_for(dim, kRowThreads), 8u), unsigned(m)); }

}  // namespace

void route_top_k(const float* logits, int64_t n, int64_t n_experts, int64_t k, bool softmax_over_all, int32_t* experts,
                 float* weights, cudaStream_t stream) {
  if (n == 0) return;
  route_top_k_kernel<<<unsigned(n), kRouteThreads, size_t(n_experts) * sizeof(float), stream>>>(
      logits, int(n_experts), int(k), softmax_over_all, experts, weights);
  NT_CUDA_CHECK_LAUNCH();
}

void add_expert_biases(float* ye, const int32_t* experts, const float* bias, int64_t m, int64_t width, cudaStream_t stream) {
  if (m == 0) return;
  add_expert_biases_kernel<<<row_grid(m, width), kRowThreads, 0, stream>>>(ye, experts, bias, width);
  NT_CUDA_CHECK_LAUNCH();
}

void gather_routed_rows(const float* x, const int32_t* routed, int64_t m, int64_t k, int64_t dim, float* xe,
                        cudaStream_t stream) {
  if (m == 0) return;
  gather_routed_rows_kernel<<<row_grid(m, dim), kRowThreads, 0, stream>>>(x, routed, int(k), dim, xe);
  NT_CUDA_CHECK_LAUNCH();
}

void add_routed_rows(const float* ye, const int32_t* routed, const float* weights, int64_t m, int64_t k, int64_t dim,
                     float* y, cudaStream_t stream) {
  if (m == 0) return;
  add_routed_rows_kernel<<<row_grid(m, dim), kRowThreads, 0, stream>>>(ye, routed, weights, int(k), dim, y);
  NT_CUDA_CHECK_LAUNCH();
}

void add_expert_outputs(const float* ye, const int32_t* experts, const float* weights, int64_t n, int64_t k, int64_t dim,
                        float* y, cudaStream_t stream, const int32_t* place) {
  if (n == 0) return;
  add_expert_outputs_kernel<<<row_grid(n, dim), kRowThreads, 0, stream>>>(ye, experts, weights, int(k), dim, y, place);
  NT_CUDA_CHECK_LAUNCH();
}

}  // namespace nt
