#include "backend/cuda/kernels/quantized_gemm.h"

#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/device_util.cuh"
#include "backend/cuda/kernels/launch.cuh"
#include "backend/cuda/kernels/weight_formats.cuh"

namespace nt {
namespace {

// A block is eight warps over 128 rows (16 each, one mma tile) and up to 64
// tokens; it walks its share of the rows in steps of 256 elements (one
// K-quant super-block, eight 32-element blocks), copying the weights and the
// tokens' q8 codes and scales of the next steps into shared memory
// (cp.async) while it computes this one.
constexpr int kWarps = 8;
constexpr int kRowsPerBlock = 16 * kWarps;
constexpr int kStepElems = cuda::kSuperBlockElems;
constexpr int kBlocksPerStep = kStepElems / 32;
// Bytes per staged token: 16 more than a step, so that the eight tokens of a
// fragment load land in different banks.
constexpr int kCodeStride = kStepElems + 16;
// Resident blocks that keep the GPU's memory busy: matrices with fewer row
// blocks split their rows' steps until the grid has this many per SM (split-K).
constexpr int kBlocksPerMultiprocessor = 4;

// The weights of one 32-element block of a row, for the mma that takes it:
// integer weights (w_lo for elements 0-15, w_hi for 16-31) multiply the
// block's integer dot products, then x = f * d_token * sum - min * s_token,
// where (d, s) are the token block's q8 scale and scaled sum. Formats
// without a min term (kHasMin false) skip its multiply-add. Formats whose
// 16-element groups have their own integer mins (kGroupMins) subtract
// min * d_token * (m_lo * sum of the first 16 codes + m_hi * the last 16's),
// an mma of the token's codes with m_lo and m_hi (each in four bytes).
struct BlockScale {
  int w_lo, w_hi;
  float f, min;
  uint32_t m_lo = 0, m_hi = 0;
};

// A tile format stages one row's step as kPieces 16-byte pieces of its
// planes (a row of kRowStride bytes in shared memory; the stride puts the
// eight rows of a fragment load in different banks) and keeps the 2-byte
// scale records, which 16-byte copies cannot address, in registers (Step,
// loaded a step ahead). Per block j it hands out thread t's elements
// 4t..4t+3 (lo) and 16+4t..16+4t+3 (hi) as four signed bytes each: the mma
// fragment layout. kSplitHalves: the halves have their own weights
// (16-element scale groups) and take two k16 mmas instead of one k32.
// kPiecesPerBlock: pieces of one 32-element block (legacy formats, whose
// last step may hold fewer blocks); 0 for K-quants, whose steps are whole.
__device__ __forceinline__ uint32_t word(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ float half_at(const uint8_t* p) { return cuda::half_to_float(__ldg(reinterpret_cast<const uint16_t*>(p))); }

// Q4_K: qs[128] | (d, dmin, scales[12]). Block j = 2c + n: qs bytes 32c + l,
// nibble n. Q5_K: qs[128] | qh[32] | header, its fifth bits at qh byte l, bit j.
template <bool kFifthBit>
struct TileQ45_K {
  static constexpr bool kSplitHalves = false, kHasMin = true, kGroupMins = false;
  static constexpr int kPieces = kFifthBit ? 11 : 9, kRowStride = 16 * kPieces, kPiecesPerBlock = 0;
  static constexpr int kHeader = 16 * (kPieces - 1);  // the staged row's (d, dmin, scales[12])
  struct Step {};
  static __device__ const uint8_t* piece(const DeviceMatrix& m, int64_t row, int64_t step, int k) {
    const int64_t sb = row * (m.cols / 256) + step;
    if (k < 8) return m.plane[0] + sb * 128 + 16 * k;
    if (kFifthBit && k < 10) return m.plane[1] + sb * 32 + 16 * (k - 8);
    return m.plane[kFifthBit ? 2 : 1] + sb * 16;
  }
  static __device__ Step load_step(const DeviceMatrix&, int64_t, int64_t, int) { return {}; }
  static __device__ void codes(const uint8_t* s, int j, int t, uint32_t& lo, uint32_t& hi) {
    const uint8_t* q = s + 32 * (j / 2) + 4 * t;
    lo = (word(q) >> (4 * (j % 2))) & cuda::kLowNibbles;
    hi = (word(q + 16) >> (4 * (j % 2))) & cuda::kLowNibbles;
    if constexpr (kFifthBit) {
      const uint8_t* qh = s + 128 + 4 * t;
      lo |= ((word(qh) >> j) & 0x01010101u) << 4;
      hi |= ((word(qh + 16) >> j) & 0x01010101u) << 4;
    }
  }
  static __device__ BlockScale scale(const uint8_t* s, const Step&, int j) {
    const uint4 header = *reinterpret_cast<const uint4*>(s + kHeader);
    int sc, mn;
    cuda::k_scale_min(header, j, sc, mn);
    const float2 dm = __half22float2(*reinterpret_cast<const __half2*>(&header.x));
    return {sc, sc, dm.x, dm.y * float(mn)};
  }
  // Super-block activations: (d, dmin) of the step, and sub-block j's min code.
  static __device__ float2 super_scale(const uint8_t* s, const Step&) {
    return __half22float2(*reinterpret_cast<const __half2*>(s + kHeader));
  }
  static __device__ int min_code(const uint8_t* s, int j) {
    int sc, mn;
    cuda::k_scale_min(*reinterpret_cast<const uint4*>(s + kHeader), j, sc, mn);
    return mn;
  }
};
using TileQ4_K = TileQ45_K<false>;
using TileQ5_K = TileQ45_K<true>;

// Q6_K: ql[128] | qh[64] | scales[16] | d. Block j = 4c + 2n + a: ql bytes
// 64c + 32a + l, nibble n; qh bytes 32c + l, bits 2(2n + a); x = d sc (q - 32).
struct TileQ6_K {
  static constexpr bool kSplitHalves = true, kHasMin = false, kGroupMins = false;
  static constexpr int kPieces = 13, kRowStride = 208, kPiecesPerBlock = 0;
  struct Step {
    float d;
  };
  static __device__ const uint8_t* piece(const DeviceMatrix& m, int64_t row, int64_t step, int k) {
    const int64_t sb = row * (m.cols / 256) + step;
    return k < 8 ? m.plane[0] + sb * 128 + 16 * k : k < 12 ? m.plane[1] + sb * 64 + 16 * (k - 8) : m.plane[2] + sb * 16;
  }
  static __device__ Step load_step(const DeviceMatrix& m, int64_t row, int64_t step, int) {
    return {half_at(m.plane[3] + (row * (m.cols / 256) + step) * 2)};
  }
  static __device__ void codes(const uint8_t* s, int j, int t, uint32_t& lo, uint32_t& hi) {
    const int c = j / 4, g = j % 4, n = g / 2, a = g % 2;
    const uint8_t* ql = s + 64 * c + 32 * a + 4 * t;
    const uint8_t* qh = s + 128 + 32 * c + 4 * t;
    auto code = [&](uint32_t l, uint32_t h) {
      const uint32_t q = ((l >> (4 * n)) & cuda::kLowNibbles) | (((h >> (2 * g)) & 0x03030303u) << 4);
      return __vsub4(q, 0x20202020u);
    };
    lo = code(word(ql), word(qh));
    hi = code(word(ql + 16), word(qh + 16));
  }
  static __device__ BlockScale scale(const uint8_t* s, const Step& step, int j) {
    const uint32_t w = word(s + 192 + 4 * (j / 2));
    const int shift = 16 * (j % 2);  // groups 2j and 2j + 1
    return {int(int8_t(w >> shift)), int(int8_t(w >> (shift + 8))), step.d, 0.0f};
  }
  static __device__ float2 super_scale(const uint8_t*, const Step& step) { return {step.d, 0.0f}; }
};

// Q3_K: qs[64] | hmask[32] | (scales[12], d). Block j = 4c + n: qs bytes
// 32c + l, bits 2n; hmask byte l, bit j (clear: the code is 4 below its low
// bits); x = d (sc - 32) q with a 6-bit scale per 16 elements.
struct TileQ3_K {
  static constexpr bool kSplitHalves = true, kHasMin = false, kGroupMins = false;
  static constexpr int kPieces = 7, kRowStride = 16 * kPieces, kPiecesPerBlock = 0;
  static constexpr int kHmask = 64, kMeta = 96;  // where the staged row's planes start
  struct Step {};
  static __device__ const uint8_t* piece(const DeviceMatrix& m, int64_t row, int64_t step, int k) {
    const int64_t sb = row * (m.cols / 256) + step;
    return k < 4 ? m.plane[0] + sb * 64 + 16 * k : k < 6 ? m.plane[1] + sb * 32 + 16 * (k - 4) : m.plane[2] + sb * 16;
  }
  static __device__ Step load_step(const DeviceMatrix&, int64_t, int64_t, int) { return {}; }
  static __device__ void codes(const uint8_t* s, int j, int t, uint32_t& lo, uint32_t& hi) {
    const int c = j / 4, n = j % 4;
    auto code = [&](int l) {
      const uint32_t low = (word(s + 32 * c + l) >> (2 * n)) & 0x03030303u;
      const uint32_t missing_high = ((word(s + kHmask + l) >> j) & 0x01010101u) ^ 0x01010101u;
      return __vsub4(low, missing_high << 2);
    };
    lo = code(4 * t);
    hi = code(16 + 4 * t);
  }
  static __device__ BlockScale scale(const uint8_t* s, const Step&, int j) {
    const uint4 meta = *reinterpret_cast<const uint4*>(s + kMeta);
    return {cuda::FormatQ3_K::scale(meta, 2 * j), cuda::FormatQ3_K::scale(meta, 2 * j + 1),
            cuda::half_to_float(uint16_t(meta.w & 0xffff)), 0.0f};
  }
};

// Q2_K: qs[64] | scales[16] | (d, dmin). Block j = 4c + n: qs bytes 32c + l,
// bits 2n; scale byte g (16 elements) = sc | m << 4; x = d sc q - dmin m.
// (d, dmin) sit in a 4-byte plane, which 16-byte copies cannot address: a
// register record, loaded a step ahead.
struct TileQ2_K {
  static constexpr bool kSplitHalves = true, kHasMin = false, kGroupMins = true;
  static constexpr int kPieces = 5, kRowStride = 16 * kPieces, kPiecesPerBlock = 0;
  static constexpr int kScales = 64;  // where the staged row's scales start
  struct Step {
    float2 dm;
  };
  static __device__ const uint8_t* piece(const DeviceMatrix& m, int64_t row, int64_t step, int k) {
    const int64_t sb = row * (m.cols / 256) + step;
    return k < 4 ? m.plane[0] + sb * 64 + 16 * k : m.plane[1] + sb * 16;
  }
  static __device__ Step load_step(const DeviceMatrix& m, int64_t row, int64_t step, int) {
    const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(m.plane[2] + (row * (m.cols / 256) + step) * 4));
    return {__half22float2(*reinterpret_cast<const __half2*>(&dm))};
  }
  static __device__ void codes(const uint8_t* s, int j, int t, uint32_t& lo, uint32_t& hi) {
    const int c = j / 4, n = j % 4;
    lo = (word(s + 32 * c + 4 * t) >> (2 * n)) & 0x03030303u;
    hi = (word(s + 32 * c + 16 + 4 * t) >> (2 * n)) & 0x03030303u;
  }
  static __device__ BlockScale scale(const uint8_t* s, const Step& step, int j) {
    const int lo = s[kScales + 2 * j], hi = s[kScales + 2 * j + 1];
    return {lo & 15, hi & 15, step.dm.x, step.dm.y, uint32_t(lo >> 4) * 0x01010101u, uint32_t(hi >> 4) * 0x01010101u};
  }
};

// The legacy 32-element blocks, eight to a step. Q8_0: qs[32] | d, x = q d.
// Q4_0: qs[16] | d, x = (q - 8) d. Q4_1: qs[16] | (d, m), x = q d + m. Byte i
// of a 4-bit block holds element i (low nibble) and 16 + i (high).
template <TensorType kType>
struct TileLegacy {
  static constexpr bool kNibbles = kType != TensorType::Q8_0;
  static constexpr bool kSplitHalves = false, kHasMin = kType == TensorType::Q4_1, kGroupMins = false;
  static constexpr int kCodeBytes = kNibbles ? 16 : 32;
  static constexpr int kPieces = kBlocksPerStep * kCodeBytes / 16, kRowStride = 16 * kPieces + 16;
  static constexpr int kPiecesPerBlock = kCodeBytes / 16;
  struct Step {
    float2 dm[kBlocksPerStep];
  };
  static __device__ int64_t first_block(const DeviceMatrix& m, int64_t row, int64_t step) {
    return row * (m.cols / 32) + step * kBlocksPerStep;
  }
  static __device__ const uint8_t* piece(const DeviceMatrix& m, int64_t row, int64_t step, int k) {
    return m.plane[0] + first_block(m, row, step) * kCodeBytes + 16 * k;
  }
  static __device__ Step load_step(const DeviceMatrix& m, int64_t row, int64_t step, int blocks) {
    const int64_t b0 = first_block(m, row, step);
    Step r{};
#pragma unroll
    for (int j = 0; j < kBlocksPerStep; ++j) {
      if (j >= blocks) continue;
      if constexpr (kHasMin) {
        const uint32_t dm = __ldg(reinterpret_cast<const uint32_t*>(m.plane[1] + (b0 + j) * 4));
        r.dm[j] = __half22float2(*reinterpret_cast<const __half2*>(&dm));
      } else {
        r.dm[j] = {half_at(m.plane[1] + (b0 + j) * 2), 0.0f};
      }
    }
    return r;
  }
  static __device__ void codes(const uint8_t* s, int j, int t, uint32_t& lo, uint32_t& hi) {
    if constexpr (kNibbles) {
      const uint32_t q = word(s + 16 * j + 4 * t);
      lo = q & cuda::kLowNibbles;
      hi = (q >> 4) & cuda::kLowNibbles;
      if constexpr (kType == TensorType::Q4_0) {
        lo = __vsub4(lo, 0x08080808u);
        hi = __vsub4(hi, 0x08080808u);
      }
    } else {
      lo = word(s + 32 * j + 4 * t);
      hi = word(s + 32 * j + 16 + 4 * t);
    }
  }
  static __device__ BlockScale scale(const uint8_t*, const Step& step, int j) { return {1, 1, step.dm[j].x, -step.dm[j].y}; }
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
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

struct KernelParams {
  DeviceMatrix w;
  DeviceMatrix w_up;   // the gated form: row blocks past row_blocks multiply w_up
  int64_t row_blocks;  // of w
  const int8_t* q8;
  const float2* q8_scales;
  int64_t n_tokens;
  float* y;  // the output, or the splits' partial sums: [matrix][split][token][row]
  int64_t y_stride;
  bool accumulate;
  int64_t steps_per_split;
};

// Pipeline stages: the narrow tiles compute little per step, so more steps' loads are in flight.
template <int kCols>
constexpr int pipeline_stages() {
  return kCols == 64 ? 2 : 3;
}

// One stage: the block's weight rows, the tokens' q8 codes [token][kCodeStride],
// then their scales [block][token] as float2 (d, d * sum q).
template <class Tile, int kCols>
constexpr int stage_bytes() {
  return kRowsPerBlock * Tile::kRowStride + kCols * kCodeStride + kBlocksPerStep * kCols * 8;
}

// Issues the copies of step `step` into `stage`: the weight pieces of rows
// row_base.. (the last row repeats past the matrix) and the tokens col_base..
// (the last token repeats past n_tokens), `blocks` 32-element blocks of each;
// stage_step adds their per-32 scales.
template <class Tile, int kCols>
__device__ __forceinline__ void stage_rows_and_codes(const KernelParams& p, int64_t step, int64_t row_base, int64_t col_base,
                                                     int blocks, uint8_t* stage) {
  for (int i = threadIdx.x; i < kRowsPerBlock * Tile::kPieces; i += blockDim.x) {
    const int r = i / Tile::kPieces, k = i % Tile::kPieces;
    if (Tile::kPiecesPerBlock && k >= blocks * Tile::kPiecesPerBlock) continue;
    const int64_t row = std::min<int64_t>(row_base + r, p.w.rows - 1);
    cp_async(stage + r * Tile::kRowStride + 16 * k, Tile::piece(p.w, row, step, k), 16);
  }
  uint8_t* codes = stage + kRowsPerBlock * Tile::kRowStride;
  for (int i = threadIdx.x; i < kCols * kBlocksPerStep * 2; i += blockDim.x) {
    const int col = i / (2 * kBlocksPerStep), piece = i % (2 * kBlocksPerStep);
    if (piece >= 2 * blocks) continue;
    const int64_t token = std::min<int64_t>(col_base + col, p.n_tokens - 1);
    cp_async(codes + col * kCodeStride + piece * 16, p.q8 + token * p.w.cols + step * kStepElems + piece * 16, 16);
  }
}

template <class Tile, int kCols>
__device__ void stage_step(const KernelParams& p, int64_t step, int64_t row_base, int64_t col_base, int blocks,
                           uint8_t* stage) {
  stage_rows_and_codes<Tile, kCols>(p, step, row_base, col_base, blocks, stage);
  uint8_t* codes = stage + kRowsPerBlock * Tile::kRowStride;
  auto* scales = reinterpret_cast<float2*>(codes + kCols * kCodeStride);
  for (int i = threadIdx.x; i < kCols * kBlocksPerStep; i += blockDim.x) {
    const int col = i / kBlocksPerStep, j = i % kBlocksPerStep;  // a token's scales are contiguous in global memory
    if (j >= blocks) continue;
    const int64_t token = std::min<int64_t>(col_base + col, p.n_tokens - 1);
    cp_async(scales + j * kCols + col, p.q8_scales + token * (p.w.cols / 32) + step * kBlocksPerStep + j, 8);
  }
}

// A block's tile of outputs: the rows (r0, r1) and tokens (2t, 2t + 1) of each
// 8-token tile a thread holds, into y or its split's partial sums.
template <int kCols>
__device__ __forceinline__ void write_tile(const KernelParams& p, int64_t row_base, int r0, int r1, int64_t col_base, int t,
                                           const float (&acc)[kCols / 8][4]) {
  const int64_t rows = p.w.rows;
  const bool split = gridDim.y > 1 || p.w_up.rows > 0;  // the gated form always writes partial sums
  float* out = split ? p.y + int64_t(blockIdx.y) * p.n_tokens * rows : p.y;
  const int64_t stride = split ? rows : p.y_stride;
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row_base + (i < 2 ? r0 : r1), token = col_base + nt * 8 + 2 * t + (i % 2);
      if (row >= rows || token >= p.n_tokens) continue;
      float* y = out + token * stride + row;
      *y = !split && p.accumulate ? *y + acc[nt][i] : acc[nt][i];
    }
  }
}

// PRECOND: cols % 32 == 0 (% 256 for K-quants); grid (row blocks, splits, token
// tiles of kCols); y has room for [splits][n_tokens][rows] when split.
// Bytes moved: the weights once per token tile, the q8 tokens once per row block.
template <class Tile, int kCols>
__global__ void __launch_bounds__(32 * kWarps) quantized_gemm_kernel(KernelParams p) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kTiles = kCols / 8, kStages = pipeline_stages<kCols>(), kStage = stage_bytes<Tile, kCols>();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const bool up = blockIdx.x >= p.row_blocks;  // the gated form's second matrix, into the second set of partial sums
  if (up) {
    p.w = p.w_up;
    p.y += int64_t(gridDim.y) * p.n_tokens * p.w.rows;
  }
  const int64_t rows = p.w.rows;
  const int64_t row_base = (int64_t(blockIdx.x) - (up ? p.row_blocks : 0)) * kRowsPerBlock;
  const int r0 = warp * 16 + g, r1 = r0 + 8;  // the thread's rows in the block
  const int64_t load_row0 = std::min(row_base + r0, rows - 1), load_row1 = std::min(row_base + r1, rows - 1);
  const int64_t col_base = int64_t(blockIdx.z) * kCols;
  const int64_t steps = ceil_div(p.w.cols, kStepElems);
  const int64_t first = int64_t(blockIdx.y) * p.steps_per_split, last = std::min(first + p.steps_per_split, steps);
  auto blocks_in = [&](int64_t step) { return int(std::min<int64_t>(kBlocksPerStep, p.w.cols / 32 - step * kBlocksPerStep)); };

  cuda::allow_dependents();
  cuda::wait_for_inputs();
  for (int s = 0; s < kStages - 1; ++s) {  // one commit group per stage, empty past the split's end
    if (first + s < last) stage_step<Tile, kCols>(p, first + s, row_base, col_base, blocks_in(first + s), smem + s * kStage);
    cp_async_commit();
  }
  typename Tile::Step step0 = Tile::load_step(p.w, load_row0, first, blocks_in(first));
  typename Tile::Step step1 = Tile::load_step(p.w, load_row1, first, blocks_in(first));

  float acc[kTiles][4] = {};
  for (int64_t step = first; step < last; ++step) {
    const int64_t i = step - first;
    const int blocks = blocks_in(step);
    cp_async_wait<kStages - 2>();
    __syncthreads();  // this step is staged, and every warp is done with the stage refilled next
    const int64_t ahead = step + kStages - 1;
    if (ahead < last) stage_step<Tile, kCols>(p, ahead, row_base, col_base, blocks_in(ahead), smem + ((i + kStages - 1) % kStages) * kStage);
    cp_async_commit();
    typename Tile::Step next0 = step0, next1 = step1;
    if (step + 1 < last) {
      next0 = Tile::load_step(p.w, load_row0, step + 1, blocks_in(step + 1));
      next1 = Tile::load_step(p.w, load_row1, step + 1, blocks_in(step + 1));
    }
    const uint8_t* stage = smem + (i % kStages) * kStage;
    const uint8_t* w0 = stage + r0 * Tile::kRowStride;
    const uint8_t* w1 = stage + r1 * Tile::kRowStride;
    const uint8_t* codes = stage + kRowsPerBlock * Tile::kRowStride;
    const auto* scales = reinterpret_cast<const float2*>(codes + kCols * kCodeStride);
#pragma unroll
    for (int j = 0; j < kBlocksPerStep; ++j) {
      if (j >= blocks) break;
      uint32_t lo0, hi0, lo1, hi1;
      Tile::codes(w0, j, t, lo0, hi0);
      Tile::codes(w1, j, t, lo1, hi1);
      const BlockScale s0 = Tile::scale(w0, step0, j), s1 = Tile::scale(w1, step1, j);
      // One weight per row when the halves share it: the float factor takes it, the dot stays as the mma wrote it.
      const float f0 = Tile::kSplitHalves ? s0.f : s0.f * float(s0.w_lo), f1 = Tile::kSplitHalves ? s1.f : s1.f * float(s1.w_lo);
#pragma unroll
      for (int nt = 0; nt < kTiles; ++nt) {
        const uint8_t* x = codes + (nt * 8 + g) * kCodeStride + 32 * j + 4 * t;
        const uint32_t b_lo = word(x), b_hi = word(x + 16);
        // Rows (g, g, g + 8, g + 8), tokens (2t, 2t + 1, 2t, 2t + 1) of the tile.
        int c[4] = {};
        if constexpr (Tile::kSplitHalves) {
          int c_hi[4] = {};
          mma_k16(c, lo0, lo1, b_lo);
          mma_k16(c_hi, hi0, hi1, b_hi);
          c[0] = s0.w_lo * c[0] + s0.w_hi * c_hi[0];
          c[1] = s0.w_lo * c[1] + s0.w_hi * c_hi[1];
          c[2] = s1.w_lo * c[2] + s1.w_hi * c_hi[2];
          c[3] = s1.w_lo * c[3] + s1.w_hi * c_hi[3];
        } else {
          mma_k32(c, lo0, lo1, hi0, hi1, b_lo, b_hi);
        }
        const float4 ds = *reinterpret_cast<const float4*>(scales + j * kCols + nt * 8 + 2 * t);  // tokens 2t, 2t + 1
        acc[nt][0] = fmaf(f0 * ds.x, float(c[0]), acc[nt][0]);
        acc[nt][1] = fmaf(f0 * ds.z, float(c[1]), acc[nt][1]);
        acc[nt][2] = fmaf(f1 * ds.x, float(c[2]), acc[nt][2]);
        acc[nt][3] = fmaf(f1 * ds.z, float(c[3]), acc[nt][3]);
        if constexpr (Tile::kHasMin) {
          acc[nt][0] = fmaf(-s0.min, ds.y, acc[nt][0]);
          acc[nt][1] = fmaf(-s0.min, ds.w, acc[nt][1]);
          acc[nt][2] = fmaf(-s1.min, ds.y, acc[nt][2]);
          acc[nt][3] = fmaf(-s1.min, ds.w, acc[nt][3]);
        }
        if constexpr (Tile::kGroupMins) {
          int m[4] = {};
          mma_k32(m, s0.m_lo, s1.m_lo, s0.m_hi, s1.m_hi, b_lo, b_hi);
          acc[nt][0] = fmaf(-s0.min * ds.x, float(m[0]), acc[nt][0]);
          acc[nt][1] = fmaf(-s0.min * ds.z, float(m[1]), acc[nt][1]);
          acc[nt][2] = fmaf(-s1.min * ds.x, float(m[2]), acc[nt][2]);
          acc[nt][3] = fmaf(-s1.min * ds.z, float(m[3]), acc[nt][3]);
        }
      }
    }
    step0 = next0;
    step1 = next1;
  }

  write_tile<kCols>(p, row_base, r0, r1, col_base, t, acc);
}

// f32 += f16 (16 x 16, rows) x f16 (16 x 8, columns): the Q4_K mins against the 16-element activation sums.
__device__ __forceinline__ void mma_f16_k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two copies of the small integer v as f16 bits (exact: |v| <= 2048).
__device__ __forceinline__ uint32_t half2_of(int v) {
  const __half2 h = __float2half2_rn(float(v));
  return *reinterpret_cast<const uint32_t*>(&h);
}

// A 4-byte cp.async (a token's super-block scale).
__device__ __forceinline__ void cp_async4(void* smem, const void* global) {
  const unsigned dst = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(global) : "memory");
}

// The rest of SuperBlockActivations, beside KernelParams (whose q8 then holds
// the super-block codes) for the super-block kernel.
struct SuperScales {
  const float* scales;   // per 256 elements
  const uint16_t* sums;  // per 16 elements, f16
};

// A stage of the super-block kernel: as stage_bytes, with each token's scale
// of the step and its sixteen 16-element sums (f16) where the per-32 scales were.
template <class Tile, int kCols>
constexpr int super_stage_bytes() {
  return kRowsPerBlock * Tile::kRowStride + kCols * kCodeStride + kCols * (4 + 32);
}

// stage_step for the super-block kernel (K-quant steps are whole super-blocks).
template <class Tile, int kCols>
__device__ void stage_super_step(const KernelParams& p, const SuperScales& super, int64_t step, int64_t row_base,
                                 int64_t col_base, uint8_t* stage) {
  stage_rows_and_codes<Tile, kCols>(p, step, row_base, col_base, kBlocksPerStep, stage);
  uint8_t* codes = stage + kRowsPerBlock * Tile::kRowStride;
  auto* scales = reinterpret_cast<float*>(codes + kCols * kCodeStride);
  uint8_t* sums = codes + kCols * kCodeStride + kCols * 4;
  for (int i = threadIdx.x; i < kCols * 3; i += blockDim.x) {
    const int col = i / 3, part = i % 3;
    const int64_t token = std::min<int64_t>(col_base + col, p.n_tokens - 1);
    if (part == 0) {
      cp_async4(scales + col, super.scales + token * (p.w.cols / kStepElems) + step);
    } else {
      cp_async(sums + col * 32 + 16 * (part - 1), super.sums + token * (p.w.cols / 16) + step * 16 + 8 * (part - 1), 16);
    }
  }
}

// The A fragments of block j of a thread's two rows (r0 = g, r1 = g + 8).
struct BlockCodes {
  uint32_t lo0, hi0, lo1, hi1;
};

template <class Tile>
__device__ __forceinline__ BlockCodes block_codes(const uint8_t* w0, const uint8_t* w1, int j, int t) {
  BlockCodes a;
  Tile::codes(w0, j, t, a.lo0, a.hi0);
  Tile::codes(w1, j, t, a.lo1, a.hi1);
  return a;
}

// The integer products of block j with tile nt's tokens, for rows (g, g,
// g + 8, g + 8) and tokens (2t, 2t + 1, 2t, 2t + 1) of the tile. Formats
// whose halves have their own weights (kSplitHalves) come weighted by them;
// the others as the mma wrote them.
template <class Tile, int kCols>
__device__ __forceinline__ void block_products(const BlockCodes& a, const uint8_t* codes, int j, int nt, int g, int t,
                                               const BlockScale& s0, const BlockScale& s1, int (&c)[4]) {
  const uint8_t* x = codes + (nt * 8 + g) * kCodeStride + 32 * j + 4 * t;
  const uint32_t b_lo = word(x), b_hi = word(x + 16);
  c[0] = c[1] = c[2] = c[3] = 0;
  if constexpr (Tile::kSplitHalves) {
    int c_hi[4] = {};
    mma_k16(c, a.lo0, a.lo1, b_lo);
    mma_k16(c_hi, a.hi0, a.hi1, b_hi);
    c[0] = s0.w_lo * c[0] + s0.w_hi * c_hi[0];
    c[1] = s0.w_lo * c[1] + s0.w_hi * c_hi[1];
    c[2] = s1.w_lo * c[2] + s1.w_hi * c_hi[2];
    c[3] = s1.w_lo * c[3] + s1.w_hi * c_hi[3];
  } else {
    mma_k32(c, a.lo0, a.lo1, a.hi0, a.hi1, b_lo, b_hi);
  }
}

// One step with super-block activations: the eight blocks' products, each
// times its integer sub-block weight, add up in int32 (|sum| < 2^31: Q5_K
// 8 x 63 x 32 x 31 x 127, Q6_K 16 x 128 x 16 x 32 x 127); then one conversion
// takes the super-block scales, and Q4_K/Q5_K mins meet the tokens' 16-element
// sums in one f16 mma (exact in f32: 16 x 63 x 2032 < 2^24).
template <class Tile, int kCols>
__device__ __forceinline__ void super_step(const uint8_t* w0, const uint8_t* w1, const uint8_t* codes,
                                           const typename Tile::Step& step0, const typename Tile::Step& step1, int g, int t,
                                           float (&acc)[kCols / 8][4]) {
  int sums[kCols / 8][4] = {};
#pragma unroll
  for (int j = 0; j < kBlocksPerStep; ++j) {
    const BlockCodes a = block_codes<Tile>(w0, w1, j, t);
    const BlockScale s0 = Tile::scale(w0, step0, j), s1 = Tile::scale(w1, step1, j);
#pragma unroll
    for (int nt = 0; nt < kCols / 8; ++nt) {
      int c[4];
      block_products<Tile, kCols>(a, codes, j, nt, g, t, s0, s1, c);
      const int k0 = Tile::kSplitHalves ? 1 : s0.w_lo, k1 = Tile::kSplitHalves ? 1 : s1.w_lo;
      sums[nt][0] += k0 * c[0];
      sums[nt][1] += k0 * c[1];
      sums[nt][2] += k1 * c[2];
      sums[nt][3] += k1 * c[3];
    }
  }
  const float2 dm0 = Tile::super_scale(w0, step0), dm1 = Tile::super_scale(w1, step1);  // (d, dmin) of each row
  const auto* token_scales = reinterpret_cast<const float*>(codes + kCols * kCodeStride);
  const auto* token_sums = reinterpret_cast<const uint16_t*>(token_scales + kCols);  // [token][16]
  [[maybe_unused]] uint32_t mins[4];
  if constexpr (Tile::kHasMin) {
    // The mins as the A operand (rows g, g + 8; 16-element groups 2t, 2t + 1
    // and 2t + 8, 2t + 9, which lie in sub-blocks t and t + 4).
    mins[0] = half2_of(Tile::min_code(w0, t));
    mins[1] = half2_of(Tile::min_code(w1, t));
    mins[2] = half2_of(Tile::min_code(w0, t + 4));
    mins[3] = half2_of(Tile::min_code(w1, t + 4));
  }
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt) {
    float m[4] = {};
    if constexpr (Tile::kHasMin) {
      const auto* groups = reinterpret_cast<const uint8_t*>(token_sums + (nt * 8 + g) * 16);
      mma_f16_k16(m, mins, word(groups + 4 * t), word(groups + 16 + 4 * t));
    }
    const float2 d = *reinterpret_cast<const float2*>(token_scales + nt * 8 + 2 * t);  // tokens 2t, 2t + 1
    acc[nt][0] = fmaf(d.x, dm0.x * float(sums[nt][0]) - dm0.y * m[0], acc[nt][0]);
    acc[nt][1] = fmaf(d.y, dm0.x * float(sums[nt][1]) - dm0.y * m[1], acc[nt][1]);
    acc[nt][2] = fmaf(d.x, dm1.x * float(sums[nt][2]) - dm1.y * m[2], acc[nt][2]);
    acc[nt][3] = fmaf(d.y, dm1.x * float(sums[nt][3]) - dm1.y * m[3], acc[nt][3]);
  }
}

// quantized_gemm_kernel on super-block activations (K-quants only): the same
// grid, pipeline and output, each step through super_step. It keeps a tile's
// integer sums beside its float ones: Q4_K's and Q5_K's are held to 128
// registers (24 and 40 bytes of spill loads at 64 tokens, CUDA 13.0), two
// blocks a multiprocessor as the 64-token tiles' shared memory allows
// (uncapped Q4_K took 133 and one block); Q6_K's would spill 564 bytes
// there, so it keeps its 189 (unmeasured either way).
// Its own kernel, not a mode of the per-32 one: folding the two moved that
// one's register counts (Q4_1 at 32 tokens 128 -> 131, past two blocks a
// multiprocessor).
template <class Tile, int kCols>
__global__ void __launch_bounds__(32 * kWarps, Tile::kSplitHalves ? 1 : 2) quantized_gemm_super_kernel(KernelParams p,
                                                                                                  SuperScales super) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kTiles = kCols / 8, kStages = pipeline_stages<kCols>(), kStage = super_stage_bytes<Tile, kCols>();
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const bool up = blockIdx.x >= p.row_blocks;
  if (up) {
    p.w = p.w_up;
    p.y += int64_t(gridDim.y) * p.n_tokens * p.w.rows;
  }
  const int64_t rows = p.w.rows;
  const int64_t row_base = (int64_t(blockIdx.x) - (up ? p.row_blocks : 0)) * kRowsPerBlock;
  const int r0 = warp * 16 + g, r1 = r0 + 8;
  const int64_t load_row0 = std::min(row_base + r0, rows - 1), load_row1 = std::min(row_base + r1, rows - 1);
  const int64_t col_base = int64_t(blockIdx.z) * kCols;
  const int64_t steps = p.w.cols / kStepElems;
  const int64_t first = int64_t(blockIdx.y) * p.steps_per_split, last = std::min(first + p.steps_per_split, steps);

  cuda::allow_dependents();
  cuda::wait_for_inputs();
  for (int s = 0; s < kStages - 1; ++s) {
    if (first + s < last) stage_super_step<Tile, kCols>(p, super, first + s, row_base, col_base, smem + s * kStage);
    cp_async_commit();
  }
  typename Tile::Step step0 = Tile::load_step(p.w, load_row0, first, kBlocksPerStep);
  typename Tile::Step step1 = Tile::load_step(p.w, load_row1, first, kBlocksPerStep);
  float acc[kTiles][4] = {};
  for (int64_t step = first; step < last; ++step) {
    const int64_t i = step - first;
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t ahead = step + kStages - 1;
    if (ahead < last) stage_super_step<Tile, kCols>(p, super, ahead, row_base, col_base, smem + ((i + kStages - 1) % kStages) * kStage);
    cp_async_commit();
    typename Tile::Step next0 = step0, next1 = step1;
    if (step + 1 < last) {
      next0 = Tile::load_step(p.w, load_row0, step + 1, kBlocksPerStep);
      next1 = Tile::load_step(p.w, load_row1, step + 1, kBlocksPerStep);
    }
    const uint8_t* stage = smem + (i % kStages) * kStage;
    super_step<Tile, kCols>(stage + r0 * Tile::kRowStride, stage + r1 * Tile::kRowStride, stage + kRowsPerBlock * Tile::kRowStride,
                            step0, step1, g, t, acc);
    step0 = next0;
    step1 = next1;
  }
  write_tile<kCols>(p, row_base, r0, r1, col_base, t, acc);
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

// The gated form: h = silu(gate) * up of the splits' partial sums (each in
// split order, as sum_splits_kernel adds them), as q8 activations when q8 is
// set and f32 when h is. One warp per 32 rows of a token: one q8 block.
// PRECOND: rows % 32 == 0. Bytes moved: the partial sums once, h once.
__global__ void gated_sum_kernel(const float* partials, int splits, int64_t n_tokens, int64_t rows, float* h,
                                 int64_t h_stride, int8_t* q8, float2* q8_scales) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n_tokens * rows) return;  // whole warps: n_tokens * rows is a multiple of 32
  const int64_t token = i / rows, row = i % rows, outputs = n_tokens * rows;
  float gate = 0.0f, up = 0.0f;
  for (int s = 0; s < splits; ++s) gate += partials[s * outputs + i];
  for (int s = 0; s < splits; ++s) up += partials[(splits + s) * outputs + i];
  const float v = cuda::silu(gate) * up;
  if (h) h[token * h_stride + row] = v;
  if (q8) cuda::quantize_q8_warp(v, q8 + i - threadIdx.x % 32, q8_scales + i / 32);
}

// The narrow form: Q4_K and Q5_K weights times super-block activations of up
// to 4 tokens, where the staged kernel is latency-bound (a 4-token step's gate and
// up at 1.7 TB/s on an H100, 25% occupancy, 525 instructions a warp per
// 256-element step) and its split-K sums take a second launch. A block is one
// mma tile of 16 rows by 8 tokens; its 8 warps take steps w, w + 8, ... of
// those rows, loading the weights straight into registers, and add their sums
// in warp order through shared memory: no staging, no split-K partial sums,
// no second launch.
// Each thread loads bytes 32c + 8t .. 32c + 8t + 7 of its two rows' codes
// (c = 0..3): elements 8t..8t+7 of sub-blocks 2c (low nibbles) and 2c + 1
// (high); Q5_K's fifth bits are bits j of qh bytes 8t..8t+7. The mma's k order is permuted alike for weights and tokens (its k
// slots 4t..4t+3 take elements 8t..8t+3, slots 16+4t.. elements 8t+4..), so a
// token's fragment is one 8-byte load. A step's integer sums and the mins'
// f16 mma are exact, and the float conversions are super_step's.
// Up to 4 tokens: on an H100 (8B Q4_K decode) the narrow form gave +6% at 4
// sequences but -8% at 8 and -29% at 16 (two token tiles), where each warp's
// token loads from L1 outweigh what it saves (docs/PERFORMANCE.md).
constexpr int kNarrowWarps = 8;
constexpr int kNarrowMaxTokens = 4;

struct NarrowParams {
  DeviceMatrix w, w_up;  // w_up: the gated form, y = silu(X W^T) * (X W_up^T)
  SuperBlockActivations xs;
  int64_t n_tokens;
  float* y;
  int64_t y_stride;
  bool accumulate;
};

// One step (256 elements) of matrix m for the thread's rows (row0, row1) and
// tokens: acc as super_step adds it. Planes as TileQ45_K reads them.
template <bool kFifthBit>
__device__ __forceinline__ void narrow_step(const NarrowParams& p, const DeviceMatrix& m, int64_t row0, int64_t row1, int64_t step,
                                            int g, int t, float (&acc)[4]) {
  const int64_t steps = m.cols / kStepElems;
  const int64_t sb0 = row0 * steps + step, sb1 = row1 * steps + step;
  uint2 w0[4], w1[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    w0[c] = cuda::load_stream8(m.plane[0] + sb0 * 128 + 32 * c + 8 * t);
    w1[c] = cuda::load_stream8(m.plane[0] + sb1 * 128 + 32 * c + 8 * t);
  }
  [[maybe_unused]] uint2 qh0, qh1;
  if constexpr (kFifthBit) {
    qh0 = cuda::load_stream8(m.plane[1] + sb0 * 32 + 8 * t);
    qh1 = cuda::load_stream8(m.plane[1] + sb1 * 32 + 8 * t);
  }
  const uint8_t* headers = m.plane[kFifthBit ? 2 : 1];
  const uint4 h0 = cuda::load_stream16(headers + sb0 * 16), h1 = cuda::load_stream16(headers + sb1 * 16);
  const int64_t token = std::min<int64_t>(g, p.n_tokens - 1);  // the B fragment's (column g); past the last, the last again
  int sums[4] = {};
#pragma unroll
  for (int j = 0; j < kBlocksPerStep; ++j) {
    const int c = j / 2, shift = 4 * (j % 2);
    uint32_t a0 = (w0[c].x >> shift) & cuda::kLowNibbles, a2 = (w0[c].y >> shift) & cuda::kLowNibbles;
    uint32_t a1 = (w1[c].x >> shift) & cuda::kLowNibbles, a3 = (w1[c].y >> shift) & cuda::kLowNibbles;
    if constexpr (kFifthBit) {
      a0 |= ((qh0.x >> j) & 0x01010101u) << 4;
      a2 |= ((qh0.y >> j) & 0x01010101u) << 4;
      a1 |= ((qh1.x >> j) & 0x01010101u) << 4;
      a3 |= ((qh1.y >> j) & 0x01010101u) << 4;
    }
    int sc0, sc1, mn;
    cuda::k_scale_min(h0, j, sc0, mn);
    cuda::k_scale_min(h1, j, sc1, mn);
    const uint2 b = __ldg(reinterpret_cast<const uint2*>(p.xs.q8 + token * m.cols + step * kStepElems + 32 * j + 8 * t));
    int d[4] = {};
    mma_k32(d, a0, a1, a2, a3, b.x, b.y);
    sums[0] += sc0 * d[0];
    sums[1] += sc0 * d[1];
    sums[2] += sc1 * d[2];
    sums[3] += sc1 * d[3];
  }
  // The mins as super_step's f16 mma takes them: rows (g, g + 8), sub-blocks t and t + 4.
  const auto min_of = [&](const uint4& header, int j) {
    int sc, mn;
    cuda::k_scale_min(header, j, sc, mn);
    return half2_of(mn);
  };
  const uint32_t mins[4] = {min_of(h0, t), min_of(h1, t), min_of(h0, t + 4), min_of(h1, t + 4)};
  const float2 dm0 = __half22float2(*reinterpret_cast<const __half2*>(&h0.x)), dm1 = __half22float2(*reinterpret_cast<const __half2*>(&h1.x));
  const int64_t scales_per_token = m.cols / kStepElems, sums_per_token = m.cols / 16;
  const auto* groups = reinterpret_cast<const uint8_t*>(p.xs.sums + token * sums_per_token + step * 16);
  float mn[4] = {};
  mma_f16_k16(mn, mins, __ldg(reinterpret_cast<const uint32_t*>(groups + 4 * t)), __ldg(reinterpret_cast<const uint32_t*>(groups + 16 + 4 * t)));
  // The C fragment's tokens 2t and 2t + 1.
  const int64_t tok0 = std::min<int64_t>(2 * t, p.n_tokens - 1), tok1 = std::min<int64_t>(2 * t + 1, p.n_tokens - 1);
  const float2 d = {__ldg(p.xs.scales + tok0 * scales_per_token + step), __ldg(p.xs.scales + tok1 * scales_per_token + step)};
  acc[0] = fmaf(d.x, dm0.x * float(sums[0]) - dm0.y * mn[0], acc[0]);
  acc[1] = fmaf(d.y, dm0.x * float(sums[1]) - dm0.y * mn[1], acc[1]);
  acc[2] = fmaf(d.x, dm1.x * float(sums[2]) - dm1.y * mn[2], acc[2]);
  acc[3] = fmaf(d.y, dm1.x * float(sums[3]) - dm1.y * mn[3], acc[3]);
}

// PRECOND: Q4_K (Q5_K: kFifthBit), cols % 256 == 0, 1 <= n_tokens <= 8;
// grid: one block per 16 rows. Bytes moved: the weights once, the tokens' codes once per block (from
// L1/L2), n_tokens x rows outputs.
template <bool kFifthBit, bool kGated>
__global__ void __launch_bounds__(32 * kNarrowWarps, 2) quantized_gemm_narrow_kernel(NarrowParams p) {
  constexpr int kMatrices = kGated ? 2 : 1;
  __shared__ float sums[kNarrowWarps][kMatrices][4][32];
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const int64_t rows = p.w.rows, first = int64_t(blockIdx.x) * 16;
  const int64_t row0 = std::min(first + g, rows - 1), row1 = std::min(first + g + 8, rows - 1);
  const int64_t steps = p.w.cols / kStepElems;
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  float acc[kMatrices][4] = {};
  for (int64_t step = warp; step < steps; step += kNarrowWarps) {
    narrow_step<kFifthBit>(p, p.w, row0, row1, step, g, t, acc[0]);
    if constexpr (kGated) narrow_step<kFifthBit>(p, p.w_up, row0, row1, step, g, t, acc[kMatrices - 1]);
  }
#pragma unroll
  for (int m = 0; m < kMatrices; ++m) {
#pragma unroll
    for (int i = 0; i < 4; ++i) sums[warp][m][i][lane] = acc[m][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // rows g, g, g + 8, g + 8; tokens 2t, 2t + 1, 2t, 2t + 1
    float total[kMatrices] = {};
    for (int w = 0; w < kNarrowWarps; ++w) {
#pragma unroll
      for (int m = 0; m < kMatrices; ++m) total[m] += sums[w][m][i][lane];
    }
    const int64_t row = first + g + (i < 2 ? 0 : 8), token = 2 * t + (i % 2);
    if (row >= rows || token >= p.n_tokens) continue;
    float* y = p.y + token * p.y_stride + row;
    if constexpr (kGated) {
      *y = cuda::silu(total[0]) * total[1];
    } else {
      *y = p.accumulate ? *y + total[0] : total[0];
    }
  }
}

bool narrow_form_takes(const QuantizedGemmParams& p) {
  return (p.w.type == TensorType::Q4_K || p.w.type == TensorType::Q5_K) && p.xs.q8 && p.n_tokens <= kNarrowMaxTokens && !p.y_q8;
}

template <bool kFifthBit>
void launch_narrow_as(const NarrowParams& p, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(p.w.rows, 16))), block(32 * kNarrowWarps);
  if (p.w_up.rows > 0) {
    cuda::launch_kernel(quantized_gemm_narrow_kernel<kFifthBit, true>, grid, block, 0, stream, p);
  } else {
    cuda::launch_kernel(quantized_gemm_narrow_kernel<kFifthBit, false>, grid, block, 0, stream, p);
  }
  NT_CUDA_CHECK_LAUNCH();
}

void launch_narrow(const QuantizedGemmParams& p, cudaStream_t stream) {
  const NarrowParams k{p.w, p.w_up, p.xs, p.n_tokens, p.y, p.y_stride, p.accumulate};
  p.w.type == TensorType::Q5_K ? launch_narrow_as<true>(k, stream) : launch_narrow_as<false>(k, stream);
}

template <class Tile, int kCols, bool kSuper>
void launch(const QuantizedGemmParams& p, cudaStream_t stream) {
  const int64_t row_blocks = ceil_div(p.w.rows, kRowsPerBlock);
  const int64_t token_tiles = ceil_div(p.n_tokens, kCols);
  const int64_t steps = ceil_div(p.w.cols, kStepElems);
  constexpr size_t smem =
      size_t(pipeline_stages<kCols>()) * size_t(kSuper ? super_stage_bytes<Tile, kCols>() : stage_bytes<Tile, kCols>());
  constexpr auto kernel = [] {
    if constexpr (kSuper) {
      return quantized_gemm_super_kernel<Tile, kCols>;
    } else {
      return quantized_gemm_kernel<Tile, kCols>;
    }
  }();
  static std::atomic<uint64_t> configured{0};
  cuda::allow_dynamic_shared_memory(kernel, smem, configured);
  // Split the steps while the grid is short of kBlocksPerMultiprocessor
  // blocks a multiprocessor and the partial sums fit the scratch. At 64
  // tokens a block's partial sums outweigh a step's weights, so the wide
  // tiles stop at one wave of resident blocks (8B Q4_K on the H200 at 64
  // sequences: +3%; at 16, one wave was 0.8% slower than 4 blocks).
  static std::atomic<int> resident{0};
  if (resident.load() == 0) {
    int blocks = 0;
    NT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, 32 * kWarps, smem));
    resident.store(std::max(blocks, 1));
  }
  const int64_t wanted = int64_t(kCols == 64 ? resident.load() : kBlocksPerMultiprocessor) * p.multiprocessors;
  const bool gated = p.w_up.rows > 0;
  const int64_t matrices = gated ? 2 : 1;
  const int64_t fits = int64_t(p.scratch_bytes / (4 * uint64_t(matrices) * uint64_t(p.n_tokens) * uint64_t(p.w.rows)));
  // (The gated form splits as each of its matrices alone would: the same sums, bit for bit.)
  int64_t splits = std::clamp<int64_t>((wanted + row_blocks * token_tiles - 1) / (row_blocks * token_tiles), 1, steps);
  splits = std::min(splits, std::max<int64_t>(fits, 1));
  const int64_t steps_per_split = ceil_div(steps, splits);
  splits = ceil_div(steps, steps_per_split);

  KernelParams k{p.w,         p.w_up,      row_blocks, kSuper ? p.xs.q8 : p.x.q8, p.x.q8_scales,
                 p.n_tokens,  splits > 1 || gated ? p.scratch : p.y, p.y_stride, p.accumulate, steps_per_split};
  const dim3 grid(unsigned(matrices * row_blocks), unsigned(splits), unsigned(token_tiles));
  if constexpr (kSuper) {
    cuda::launch_kernel(kernel, grid, dim3(32 * kWarps), smem, stream, k, SuperScales{p.xs.scales, p.xs.sums});
  } else {
    cuda::launch_kernel(kernel, grid, dim3(32 * kWarps), smem, stream, k);
  }
  NT_CUDA_CHECK_LAUNCH();
  if (gated) {
    const int64_t outputs = p.n_tokens * p.w.rows;
    cuda::launch_kernel(gated_sum_kernel, dim3(cuda::blocks_for(outputs, 256)), dim3(256), 0, stream,
                        static_cast<const float*>(p.scratch), int(splits), p.n_tokens, p.w.rows, p.y, p.y_stride, p.y_q8,
                        p.y_q8_scales);
    NT_CUDA_CHECK_LAUNCH();
  } else if (splits > 1) {
    const int64_t outputs = p.n_tokens * p.w.rows;
    cuda::launch_kernel(sum_splits_kernel, dim3(cuda::blocks_for(outputs, 256)), dim3(256), 0, stream,
                        static_cast<const float*>(p.scratch), int(splits), p.n_tokens, p.w.rows, p.y, p.y_stride,
                        p.accumulate);
    NT_CUDA_CHECK_LAUNCH();
  }
}

// The narrowest token tile that holds n tokens (wider inputs take several tiles of 64).
template <class Tile, bool kSuper = false>
void launch_for_tokens(const QuantizedGemmParams& p, cudaStream_t stream) {
  if (p.n_tokens <= 8) return launch<Tile, 8, kSuper>(p, stream);
  if (p.n_tokens <= 16) return launch<Tile, 16, kSuper>(p, stream);
  if (p.n_tokens <= 32 || p.widest_tile == 32) return launch<Tile, 32, kSuper>(p, stream);
  launch<Tile, 64, kSuper>(p, stream);
}

// K-quant weights take super-block activations when they are given.
template <class Tile>
void launch_k_quant(const QuantizedGemmParams& p, cudaStream_t stream) {
  if (p.xs.q8) return launch_for_tokens<Tile, true>(p, stream);
  launch_for_tokens<Tile>(p, stream);
}

// PRECOND: n_blocks = tokens * cols / 256, one 256-thread block each. Bytes
// moved: 4 read and 1 written per element, 36 per super-block.
__global__ void quantize_super_blocks_kernel(const float* x, int8_t* q8, float* scales, uint16_t* sums) {
  cuda::allow_dependents();
  cuda::wait_for_inputs();
  __shared__ float warp_max[kStepElems / 32];
  const int64_t first = int64_t(blockIdx.x) * kStepElems;
  cuda::quantize_super_block(x[first + threadIdx.x], q8 + first, scales + blockIdx.x, sums + first / 16, warp_max);
}

}  // namespace

void quantize_super_blocks(const float* x, int64_t tokens, int64_t cols, int8_t* q8, float* scales, uint16_t* sums,
                           cudaStream_t stream) {
  if (cols % kStepElems != 0) fail("super-block activations need a multiple of {} elements per row, got {}", kStepElems, cols);
  const int64_t blocks = tokens * cols / kStepElems;
  if (blocks == 0) return;
  cuda::launch_kernel(quantize_super_blocks_kernel, dim3(unsigned(blocks)), dim3(kStepElems), 0, stream, x, q8, scales, sums);
  NT_CUDA_CHECK_LAUNCH();
}

bool quantized_gemm_takes_super_blocks(TensorType type) {
  return type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
}

bool quantized_gemm_supported(TensorType type, int64_t cols) {
  switch (type) {
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::Q3_K:
    case TensorType::Q2_K: return cols % 256 == 0;
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q4_1: return cols % 32 == 0;
    default: return false;
  }
}

int64_t quantized_gemm_min_tokens(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q4_1: return 6;
    case TensorType::Q8_0: return 8;
    default: return 4;
  }
}

void quantized_gemm(const QuantizedGemmParams& p, cudaStream_t stream) {
  if (!quantized_gemm_supported(p.w.type, p.w.cols)) {
    fail("the int8 GEMM has no kernel for {} rows of {} elements", tensor_type_name(p.w.type), p.w.cols);
  }
  if (p.multiprocessors < 1) fail("the int8 GEMM needs the GPU's multiprocessor count, got {}", p.multiprocessors);
  if (p.widest_tile != 32 && p.widest_tile != 64) fail("the int8 GEMM's widest tile is 32 or 64 tokens, not {}", p.widest_tile);
  if (p.w_up.rows > 0) {
    if (p.w_up.type != p.w.type || p.w_up.rows != p.w.rows || p.w_up.cols != p.w.cols || p.w.rows % 32 != 0 ||
        (!p.y && !p.y_q8) || (p.y_q8 && !p.y_q8_scales) || p.accumulate) {
      fail("the int8 GEMM's gated form takes two {} x {} {} matrices alike ({} x {} {}), rows a multiple of 32, and "
           "writes q8 activations (with their scales) or f32 ones without accumulating",
           p.w.rows, p.w.cols, tensor_type_name(p.w.type), p.w_up.rows, p.w_up.cols, tensor_type_name(p.w_up.type));
    }
    if (!narrow_form_takes(p) && p.scratch_bytes < 8 * uint64_t(p.n_tokens) * uint64_t(p.w.rows)) {
      fail("the int8 GEMM's gated form needs {} bytes of scratch for its partial sums, got {}",
           8 * uint64_t(p.n_tokens) * uint64_t(p.w.rows), p.scratch_bytes);
    }
  }
  if (p.xs.q8 && (!p.xs.scales || !p.xs.sums || !quantized_gemm_takes_super_blocks(p.w.type))) {
    fail("the int8 GEMM takes super-block activations (with their scales and sums) for Q4_K, Q5_K and Q6_K, not {}",
         tensor_type_name(p.w.type));
  }
  if (p.n_tokens == 0 || p.w.rows == 0) return;
  if (narrow_form_takes(p)) return launch_narrow(p, stream);
  switch (p.w.type) {
    case TensorType::Q4_K: return launch_k_quant<TileQ4_K>(p, stream);
    case TensorType::Q5_K: return launch_k_quant<TileQ5_K>(p, stream);
    case TensorType::Q6_K: return launch_k_quant<TileQ6_K>(p, stream);
    case TensorType::Q3_K: return launch_for_tokens<TileQ3_K>(p, stream);
    case TensorType::Q2_K: return launch_for_tokens<TileQ2_K>(p, stream);
    case TensorType::Q8_0: return launch_for_tokens<TileLegacy<TensorType::Q8_0>>(p, stream);
    case TensorType::Q4_0: return launch_for_tokens<TileLegacy<TensorType::Q4_0>>(p, stream);
    case TensorType::Q4_1: return launch_for_tokens<TileLegacy<TensorType::Q4_1>>(p, stream);
    default: break;
  }
}

}  // namespace nt
