// The element-wise and per-token steps of a Llama layer on the GPU. Positions
// are read from device memory (`pos`: the position of token 0) so a captured
// decode graph stays valid from token to token.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/kv_layout.h"
#include "runtime/kernel_shapes.h"

namespace nt {

// out[t] = x[t] / rms(x[t]) * weight, for n_rows rows of dim (a multiple of 32).
// Writes the f32 result when out is set and its q8 form when q8 is set.
void rms_norm(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps, float* out, int8_t* q8,
              float2* q8_scales, cudaStream_t stream);

// The int8 GEMM's super-block activations (quantize_super_blocks' format) of
// rms_norm's output, in one launch that reads each row once: the same bits
// as rms_norm to f32 and then quantize_super_blocks. dim % 256 == 0.
struct NormSuperBlocks {
  int8_t* q8 = nullptr;       // [rows][dim]
  float* scales = nullptr;    // [rows][dim / 256]
  uint16_t* sums = nullptr;   // [rows][dim / 16], f16 bits
};
void rms_norm_super_blocks(const float* x, const float* weight, int64_t n_rows, int64_t dim, float eps,
                           const NormSuperBlocks& out, cudaStream_t stream);

struct RopeKvParams {
  float* qkv = nullptr;          // token t: q[n_heads*head_dim], k[n_kv_heads*head_dim], v[...] at qkv + t*qkv_stride
  int64_t qkv_stride = 0;
  int64_t n_tokens = 0;
  const int32_t* pos = nullptr;  // device: position of token 0
  const float* inv_freq = nullptr;  // device: rope_pairs inverse frequencies
  int rope_pairs = 0;            // pairs (2i, 2i+1) rotated per head, i < rope_pairs
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  uint16_t* k_cache = nullptr;   // this layer (its page 0 when paged), f16, laid out as kv_layout.h says
  uint16_t* v_cache = nullptr;
  int64_t context = 0;           // a multiple of kKvTile; unused when paged
  KvPaging paging;               // the sequence's pages; with token_row, a block table
  // Tokens of many sequences: token t at position token_pos[t] of the
  // sequence whose pages are row token_row[t] of the block table
  // (paging.pages + token_row[t] * table_width); pos is unused then.
  const int32_t* token_pos = nullptr;  // device
  const int32_t* token_row = nullptr;  // device
  int64_t table_width = 0;
  // A token tree's tokens are rotated for their depth, not for where they are
  // cached: token t's RoPE position. Null: its cache position.
  const int32_t* token_rope_pos = nullptr;  // device
};

// Rotates q (in place) and k, and stores k and v at their positions in the cache.
void rope_and_store_kv(const RopeKvParams& p, cudaStream_t stream);

// to[i] = from[i] for i < n, by a kernel. Either side may be pinned host
// memory, which the kernel reads or writes across the link itself: a small
// copy then does not queue behind the copy engines' layer transfers (the
// hybrid pass's hidden state waited up to 20 ms behind them on the H200).
void copy_floats(const float* from, float* to, int64_t n, cudaStream_t stream);

// y[i] += x[i] for i < n.
void add_floats(const float* x, float* y, int64_t n, cudaStream_t stream);

// h[i] = silu(gate[i]) * up[i] for i < n.
void swiglu(const float* gate, const float* up, int64_t n, float* h, cudaStream_t stream);

// out[r] = index of the largest of x[r][0..n): argmax_first's rule (the first
// on ties, NaN never wins, 0 when nothing beats -inf). Two launches: chunks of
// each row in parallel, then their winners; `scratch` holds
// argmax_scratch_bytes(n_rows, n) (runtime/kernel_shapes.h).
void argmax_rows(const float* x, int64_t n_rows, int64_t n, int32_t* out, void* scratch, cudaStream_t stream);

// Decoding without the host between steps: a step's pick (the argmax, or a
// draw from the top on the GPU) becomes the next step's input token, the
// position advances by one, and the pick lands in host_picks[position %
// ring_size] (pinned host memory, written by the GPU) for the host to read
// once the step's event completes.
struct StepAdvance {
  int32_t* token = nullptr;       // device: the next step's input token
  int32_t* pos = nullptr;         // device: the step's position, incremented
  int32_t* host_picks = nullptr;  // pinned host memory
  int ring_size = 0;
};
void argmax_and_advance(const float* logits, int64_t n, void* scratch, const StepAdvance& advance, cudaStream_t stream);

}  // namespace nt
