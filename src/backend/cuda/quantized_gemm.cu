#include "backend/cuda/quantized_gemm.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/weight_formats.cuh"

namespace nt {
namespace {

// A block is four warps over 64 rows (16 each, one mma tile) and up to 64
// tokens; it walks its share of the row in steps of 256 elements (one K-quant
// super-block, eight 32-element blocks), staging the tokens' q8 codes and
// scales of the next step in shared memory while it computes this one.
constexpr int kWarps = 4;
constexpr int kRowsPerBlock = 16 * kWarps;
constexpr int kStepElems = 256;
constexpr int kBlocksPerStep = kStepElems / 32;
// Bytes per staged token: 16 more than a step, so that the eight tokens of a
// fragment load land in different banks.
constexpr int kCodeStride = kStepElems + 16;
// Resident blocks that keep the GPU's memory busy: matrices with fewer row
// blocks split their rows' steps over this many (split-K).
constexpr int kBlocksPerMultiprocessor = 4;

// The weights of one 32-element block of a row, for the mma that takes it:
// integer weights (w_lo for elements 0-15, w_hi for 16-31) multiply the
// block's integer dot products, then x = f * d_token * sum - min * s_token,
// where (d, s) are the token block's q8 scale and scaled sum.
struct BlockScale {
  int w_lo, w_hi;
  float f, min;
};

// Each tile format loads one row's codes of one step for thread t of the
// row's quad and hands out, per block j, the thread's elements 4t..4t+3 (lo)
// and 16+4t..16+4t+3 (hi) as four signed bytes each: the mma fragment layout.
// kSplitHalves: the halves have their own weights (16-element scale groups),
// so they take two k16 mmas instead of one k32.
__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) { return __ldg(reinterpret_cast<const uint32_t*>(p)); }

// Q4_K: qs[128] | (d, dmin, scales[12]). Block j = 2c + n: qs bytes 32c + l, nibble n.
struct TileQ4_K {
  static constexpr bool kSplitHalves = false;
  struct Raw {
    uint32_t q[8];
    uint4 header;
  };
  static __device__ Raw load(const DeviceMatrix& m, int64_t row, int64_t step, int t, int) {
    const int64_t sb = row * (m.cols / 256) + step;
    const uint8_t* qs = m.plane[0] + sb * 128 + 4 * t;
    Raw r;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      r.q[2 * c] = load_u32(qs + 32 * c);
      r.q[2 * c + 1] = load_u32(qs + 32 * c + 16);
    }
    r.header = cuda::load_stream16(m.plane[1] + sb * 16);
    return r;
  }
  static __device__ void codes(const Raw& r, int j, uint32_t& lo, uint32_t& hi) {
    const int shift = 4 * (j % 2);
    lo = (r.q[2 * (j / 2)] >> shift) & cuda::kLowNibbles;
    hi = (r.q[2 * (j / 2) + 1] >> shift) & cuda::kLowNibbles;
  }
  static __device__ BlockScale scale(const Raw& r, int j) {
    int sc, mn;
    cuda::k_scale_min(r.header, j, sc, mn);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&r.header.x));
    return {sc, sc, dm.x, dm.y * float(mn)};
  }
};

// Q6_K: ql[128] | qh[64] | scales[16] | d. Block j = 4c + 2n + a: ql bytes
// 64c + 32a + l, nibble n; qh bytes 32c + l, bits 2(2n + a); x = d sc (q - 32).
struct TileQ6_K {
  static constexpr bool kSplitHalves = true;
  struct Raw {
    uint32_t ql[8], qh[4];
    uint4 scales;
    float d;
  };
  static __device__ Raw load(const DeviceMatrix& m, int64_t row, int64_t step, int t, int) {
    const int64_t sb = row * (m.cols / 256) + step;
    const uint8_t* ql = m.plane[0] + sb * 128 + 4 * t;
    const uint8_t* qh = m.plane[1] + sb * 64 + 4 * t;
    Raw r;
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // i = 2c + a
      r.ql[2 * i] = load_u32(ql + 32 * i);
      r.ql[2 * i + 1] = load_u32(ql + 32 * i + 16);
    }
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      r.qh[2 * c] = load_u32(qh + 32 * c);
      r.qh[2 * c + 1] = load_u32(qh + 32 * c + 16);
    }
    r.scales = cuda::load_stream16(m.plane[2] + sb * 16);
    r.d = cuda::half_to_float(__ldg(reinterpret_cast<const uint16_t*>(m.plane[3] + sb * 2)));
    return r;
  }
  static __device__ void codes(const Raw& r, int j, uint32_t& lo, uint32_t& hi) {
    const int c = j / 4, g = j % 4, n = g / 2, a = g % 2;
    auto code = [&](uint32_t l, uint32_t h) {
      const uint32_t q = ((l >> (4 * n)) & cuda::kLowNibbles) | (((h >> (2 * g)) & 0x03030303u) << 4);
      return __vsub4(q, 0x20202020u);
    };
    lo = code(r.ql[2 * (2 * c + a)], r.qh[2 * c]);
    hi = code(r.ql[2 * (2 * c + a) + 1], r.qh[2 * c + 1]);
  }
  static __device__ BlockScale scale(const Raw& r, int j) {
    const uint32_t word = j < 2 ? r.scales.x : j < 4 ? r.scales.y : j < 6 ? r.scales.z : r.scales.w;
    const int shift = 16 * (j % 2);  // groups 2j and 2j + 1: bytes 2(j%2) and 2(j%2) + 1 of word j/2
    return {int(int8_t(word >> shift)), int(int8_t(word >> (shift + 8))), r.d, 0.0f};
  }
};

// The legacy 32-element blocks, eight to a step; a row's last step may hold
// fewer (`blocks`), and nothing past the row is read.
// Q8_0: qs[32] | d.
struct TileQ8_0 {
  static constexpr bool kSplitHalves = false;
  struct Raw {
    uint32_t q[16];
    float d[8];
  };
  static __device__ Raw load(const DeviceMatrix& m, int64_t row, int64_t step, int t, int blocks) {
    const int64_t b0 = row * (m.cols / 32) + step * kBlocksPerStep;
    Raw r{};
#pragma unroll
    for (int j = 0; j < kBlocksPerStep; ++j) {
      if (j < blocks) {
        const uint8_t* qs = m.plane[0] + (b0 + j) * 32 + 4 * t;
        r.q[2 * j] = load_u32(qs);
        r.q[2 * j + 1] = load_u32(qs + 16);
        r.d[j] = cuda::half_to_float(__ldg(reinterpret_cast<const uint16_t*>(m.plane[1] + (b0 + j) * 2)));
      }
    }
    return r;
  }
  static __device__ void codes(const Raw& r, int j, uint32_t& lo, uint32_t& hi) {
    lo = r.q[2 * j];
    hi = r.q[2 * j + 1];
  }
  static __device__ BlockScale scale(const Raw& r, int j) { return {1, 1, r.d[j], 0.0f}; }
};

// Q4_0: qs[16] | d, x = (q - 8) d. Q4_1: qs[16] | (d, m), x = q d + m.
// Byte i of qs holds element i (low nibble) and 16 + i (high).
template <bool kMin>
struct TileQ4Legacy {
  static constexpr bool kSplitHalves = false;
  struct Raw {
    uint32_t q[8];
    float2 dm[8];
  };
  static __device__ Raw load(const DeviceMatrix& m, int64_t row, int64_t step, int t, int blocks) {
    const int64_t b0 = row * (m.cols / 32) + step * kBlocksPerStep;
    Raw r{};
#pragma unroll
    for (int j = 0; j < kBlocksPerStep; ++j) {
      if (j < blocks) {
        r.q[j] = load_u32(m.plane[0] + (b0 + j) * 16 + 4 * t);
        if constexpr (kMin) {
          const uint32_t dm = load_u32(m.plane[1] + (b0 + j) * 4);
          r.dm[j] = __half22float2(*reinterpret_cast<const __half2*>(&dm));
        } else {
          r.dm[j] = {cuda::half_to_float(__ldg(reinterpret_cast<const uint16_t*>(m.plane[1] + (b0 + j) * 2))), 0.0f};
        }
      }
    }
    return r;
  }
  static __device__ void codes(const Raw& r, int j, uint32_t& lo, uint32_t& hi) {
    lo = r.q[j] & cuda::kLowNibbles;
    hi = (r.q[j] >> 4) & cuda::kLowNibbles;
    if constexpr (!kMin) {
      lo = __vsub4(lo, 0x08080808u);
      hi = __vsub4(hi, 0x08080808u);
    }
  }
  static __device__ BlockScale scale(const Raw& r, int j) { return {1, 1, r.dm[j].x, -r.dm[j].y}; }
};

__device__ __forceinline__ void mma_k32(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

__device__ __forceinline__ void cp_async(void* smem, const void* global, int bytes) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  if (bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(global) : "memory");
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

struct KernelParams {
  DeviceMatrix w;
  const int8_t* q8;
  const float2* q8_scales;
  int64_t n_tokens;
  float* y;  // the output, or the splits' partial sums: [split][token][row]
  int64_t y_stride;
  bool accumulate;
  int64_t steps_per_split;
};

template <int kCols>
constexpr int stage_bytes() {
  return kCols * kCodeStride + kBlocksPerStep * kCols * 8;
}

// Stages the q8 codes and scales of `blocks` blocks of step `step` for tokens
// col_base.. (the last token repeats past n_tokens): codes [token][kCodeStride],
// then scales [block][token] as float2 (d, d * sum q).
template <int kCols>
__device__ void stage_tokens(const KernelParams& p, int64_t step, int64_t col_base, int blocks, uint8_t* stage) {
  const int64_t row_bytes = p.w.cols, row_blocks = p.w.cols / 32;
  for (int i = threadIdx.x; i < kCols * kBlocksPerStep * 2; i += blockDim.x) {
    const int col = i / (2 * kBlocksPerStep), piece = i % (2 * kBlocksPerStep);
    if (piece >= 2 * blocks) continue;
    const int64_t token = std::min<int64_t>(col_base + col, p.n_tokens - 1);
    cp_async(stage + col * kCodeStride + piece * 16, p.q8 + token * row_bytes + step * kStepElems + piece * 16, 16);
  }
  auto* scales = reinterpret_cast<float2*>(stage + kCols * kCodeStride);
  for (int i = threadIdx.x; i < kCols * kBlocksPerStep; i += blockDim.x) {
    const int col = i % kCols, j = i / kCols;
    if (j >= blocks) continue;
    const int64_t token = std::min<int64_t>(col_base + col, p.n_tokens - 1);
    cp_async(scales + j * kCols + col, p.q8_scales + token * row_blocks + step * kBlocksPerStep + j, 8);
  }
  cp_async_commit();
}

// PRECOND: cols % 32 == 0 (% 256 for K-quants); grid (row blocks, splits, token
// tiles of kCols); y has room for [splits][n_tokens][rows] when split.
// Bytes moved: the weights once per token tile, the q8 tokens once per row block.
template <class Tile, int kCols>
__global__ void __launch_bounds__(32 * kWarps) quantized_gemm_kernel(KernelParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kTiles = kCols / 8;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int64_t rows = p.w.rows;
  const int64_t row0 = int64_t(blockIdx.x) * kRowsPerBlock + warp * 16 + g, row1 = row0 + 8;
  const int64_t load_row0 = std::min(row0, rows - 1), load_row1 = std::min(row1, rows - 1);
  const int64_t col_base = int64_t(blockIdx.z) * kCols;
  const int64_t steps = (p.w.cols + kStepElems - 1) / kStepElems;
  const int64_t first = int64_t(blockIdx.y) * p.steps_per_split, last = std::min(first + p.steps_per_split, steps);
  auto blocks_in = [&](int64_t step) { return int(std::min<int64_t>(kBlocksPerStep, p.w.cols / 32 - step * kBlocksPerStep)); };

  cuda::allow_dependents();
  // Weights are never written by the kernels before this one: fetch them before waiting.
  typename Tile::Raw raw0 = Tile::load(p.w, load_row0, first, t, blocks_in(first));
  typename Tile::Raw raw1 = Tile::load(p.w, load_row1, first, t, blocks_in(first));
  cuda::wait_for_inputs();
  stage_tokens<kCols>(p, first, col_base, blocks_in(first), smem);

  float acc[kTiles][4] = {};
  for (int64_t step = first; step < last; ++step) {
    uint8_t* stage = smem + ((step - first) % 2) * stage_bytes<kCols>();
    const int blocks = blocks_in(step);
    typename Tile::Raw next0 = raw0, next1 = raw1;
    cp_async_wait_all();
    __syncthreads();  // this step's tokens are staged, and every warp is done with the other buffer
    if (step + 1 < last) {
      stage_tokens<kCols>(p, step + 1, col_base, blocks_in(step + 1), smem + ((step + 1 - first) % 2) * stage_bytes<kCols>());
      next0 = Tile::load(p.w, load_row0, step + 1, t, blocks_in(step + 1));
      next1 = Tile::load(p.w, load_row1, step + 1, t, blocks_in(step + 1));
    }
    const uint8_t* codes = stage;
    const auto* scales = reinterpret_cast<const float2*>(stage + kCols * kCodeStride);
#pragma unroll
    for (int j = 0; j < kBlocksPerStep; ++j) {
      if (j >= blocks) break;
      uint32_t lo0, hi0, lo1, hi1;
      Tile::codes(raw0, j, lo0, hi0);
      Tile::codes(raw1, j, lo1, hi1);
      const BlockScale s0 = Tile::scale(raw0, j), s1 = Tile::scale(raw1, j);
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
        const uint8_t* x = codes + (nt * 8 + g) * kCodeStride + 32 * j + 4 * t;
        const uint32_t b_lo = *reinterpret_cast<const uint32_t*>(x);
        const uint32_t b_hi = *reinterpret_cast<const uint32_t*>(x + 16);
        // Rows (g, g, g + 8, g + 8), tokens (2t, 2t + 1, 2t, 2t + 1) of the tile.
        int c[4];
        if constexpr (Tile::kSplitHalves) {
          int c_lo[4] = {}, c_hi[4] = {};
          mma_k16(c_lo, lo0, lo1, b_lo);
          mma_k16(c_hi, hi0, hi1, b_hi);
          c[0] = s0.w_lo * c_lo[0] + s0.w_hi * c_hi[0];
          c[1] = s0.w_lo * c_lo[1] + s0.w_hi * c_hi[1];
          c[2] = s1.w_lo * c_lo[2] + s1.w_hi * c_hi[2];
          c[3] = s1.w_lo * c_lo[3] + s1.w_hi * c_hi[3];
        } else {
          int dot[4] = {};
          mma_k32(dot, lo0, lo1, hi0, hi1, b_lo, b_hi);
          c[0] = s0.w_lo * dot[0];
          c[1] = s0.w_lo * dot[1];
          c[2] = s1.w_lo * dot[2];
          c[3] = s1.w_lo * dot[3];
        }
        const float4 ds = *reinterpret_cast<const float4*>(scales + j * kCols + nt * 8 + 2 * t);  // tokens 2t, 2t + 1
        acc[nt][0] = fmaf(-s0.min, ds.y, fmaf(s0.f * ds.x, float(c[0]), acc[nt][0]));
        acc[nt][1] = fmaf(-s0.min, ds.w, fmaf(s0.f * ds.z, float(c[1]), acc[nt][1]));
        acc[nt][2] = fmaf(-s1.min, ds.y, fmaf(s1.f * ds.x, float(c[2]), acc[nt][2]));
        acc[nt][3] = fmaf(-s1.min, ds.w, fmaf(s1.f * ds.z, float(c[3]), acc[nt][3]));
      }
    }
    raw0 = next0;
    raw1 = next1;
  }

  const bool split = gridDim.y > 1;
  float* out = split ? p.y + int64_t(blockIdx.y) * p.n_tokens * rows : p.y;
  const int64_t stride = split ? rows : p.y_stride;
#pragma unroll
  for (int nt = 0; nt < kTiles; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = i < 2 ? row0 : row1, token = col_base + nt * 8 + 2 * t + (i % 2);
      if (row >= rows || token >= p.n_tokens) continue;
      float* y = out + token * stride + row;
      *y = !split && p.accumulate ? *y + acc[nt][i] : acc[nt][i];
    }
  }
}

// y[t][r] = (accumulate ? y : 0) + the splits' partial sums, in split order.
__global__ void sum_splits_kernel(const float* partials, int splits, int64_t n_tokens, int64_t rows, float* y,
                                  int64_t y_stride, bool accumulate) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens * rows) return;
  const int64_t token = i / rows, row = i % rows;
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) sum += partials[s * n_tokens * rows + i];
  float* out = y + token * y_stride + row;
  *out = accumulate ? *out + sum : sum;
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, n = 0;
    NT_CUDA_CHECK(cudaGetDevice(&device));
    NT_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    return n;
  }();
  return count;
}

template <class Tile, int kCols>
void launch(const QuantizedGemmParams& p, cudaStream_t stream) {
  const int64_t row_blocks = (p.w.rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t token_tiles = (p.n_tokens + kCols - 1) / kCols;
  const int64_t steps = (p.w.cols + kStepElems - 1) / kStepElems;
  // Split the steps while the grid is short of resident blocks and the partial sums fit the scratch.
  const int64_t wanted = int64_t(kBlocksPerMultiprocessor) * multiprocessor_count();
  const int64_t fits = int64_t(p.scratch_bytes / (4 * uint64_t(p.n_tokens) * uint64_t(p.w.rows)));
  int64_t splits = std::clamp<int64_t>((wanted + row_blocks * token_tiles - 1) / (row_blocks * token_tiles), 1, steps);
  splits = std::min(splits, std::max<int64_t>(fits, 1));
  const int64_t steps_per_split = (steps + splits - 1) / splits;
  splits = (steps + steps_per_split - 1) / steps_per_split;

  KernelParams k{p.w, p.x.q8, p.x.q8_scales, p.n_tokens, splits > 1 ? p.scratch : p.y, p.y_stride, p.accumulate, steps_per_split};
  constexpr size_t smem = 2 * size_t(stage_bytes<kCols>());
  static const bool configured = [] {
    NT_CUDA_CHECK(cudaFuncSetAttribute(quantized_gemm_kernel<Tile, kCols>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)configured;
  cuda::launch_kernel(quantized_gemm_kernel<Tile, kCols>, dim3(unsigned(row_blocks), unsigned(splits), unsigned(token_tiles)),
                      dim3(32 * kWarps), smem, stream, k);
  NT_CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    const int64_t outputs = p.n_tokens * p.w.rows;
    cuda::launch_kernel(sum_splits_kernel, dim3(unsigned((outputs + 255) / 256)), dim3(256), 0, stream,
                        static_cast<const float*>(p.scratch), int(splits), p.n_tokens, p.w.rows, p.y, p.y_stride,
                        p.accumulate);
    NT_CUDA_CHECK_LAUNCH();
  }
}

// The narrowest token tile that holds n tokens (wider inputs take several tiles of 64).
template <class Tile>
void launch_for_tokens(const QuantizedGemmParams& p, cudaStream_t stream) {
  if (p.n_tokens <= 8) return launch<Tile, 8>(p, stream);
  if (p.n_tokens <= 16) return launch<Tile, 16>(p, stream);
  if (p.n_tokens <= 32) return launch<Tile, 32>(p, stream);
  launch<Tile, 64>(p, stream);
}

}  // namespace

bool quantized_gemm_supported(TensorType type, int64_t cols) {
  switch (type) {
    case TensorType::Q4_K:
    case TensorType::Q6_K: return cols % 256 == 0;
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_1: return cols % 32 == 0;
    default: return false;
  }
}

void quantized_gemm(const QuantizedGemmParams& p, cudaStream_t stream) {
  if (!quantized_gemm_supported(p.w.type, p.w.cols)) {
    fail("the int8 GEMM has no kernel for {} rows of {} elements", tensor_type_name(p.w.type), p.w.cols);
  }
  if (p.n_tokens == 0 || p.w.rows == 0) return;
  switch (p.w.type) {
    case TensorType::Q4_K: return launch_for_tokens<TileQ4_K>(p, stream);
    case TensorType::Q6_K: return launch_for_tokens<TileQ6_K>(p, stream);
    case TensorType::Q8_0: return launch_for_tokens<TileQ8_0>(p, stream);
    case TensorType::Q4_0: return launch_for_tokens<TileQ4Legacy<false>>(p, stream);
    case TensorType::Q4_1: return launch_for_tokens<TileQ4Legacy<true>>(p, stream);
    default: break;
  }
}

}  // namespace nt
