// Scaled dot-product attention of f32 queries against an F32 or F16 KV cache
// with grouped-query heads (n_heads / n_kv_heads query heads per KV head).
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/kernels.h"
#include "backend/cpu/thread_pool.h"
#include "quant/tensor_type.h"

namespace nt::cpu {

// One of the K or V caches. Element (pos, kv_head, i) lives at
// pos * pos_stride + kv_head * head_stride + i.
struct KvView {
  const void* data = nullptr;
  TensorType type = TensorType::F16;  // F16 or F32
  int64_t pos_stride = 0;
  int64_t head_stride = 0;
};

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0;  // usually 1 / sqrt(head_dim)
  int64_t window = 0;  // sliding window: a query at position p sees only (p - window, p]; 0 = all
  // Per query head, a logit that joins the softmax's denominator and weighs
  // no value (attention sinks); null: none.
  const float* sinks = nullptr;
};

// Queries of one sequence: n_tokens rows (row t at position first_pos + t,
// n_heads * head_dim values each, at q + t * n_heads * head_dim; output
// alike), causally masked: row t sees the sequence's positions
// [0, first_pos + t]. A position p of the sequence is cache row
// pages[p / page_size] * page_size + p % page_size; no pages: row p.
// A token tree's rows (path_start set) see the positions [0, tree_start)
// instead, then paths[path_start[t] .. path_start[t + 1]) in that order:
// the cache positions of their ancestors and their own, root first. A row
// then attends in the order a chain of its path would, to the same numbers.
struct AttentionRun {
  const float* q = nullptr;
  float* out = nullptr;
  int64_t first_pos = 0;
  int n_tokens = 0;
  const int32_t* pages = nullptr;
  int64_t page_size = 0;
  int64_t tree_start = 0;
  const int64_t* path_start = nullptr;  // n_tokens + 1 offsets into paths; null: causal
  const int64_t* paths = nullptr;
};

// Every run's queries in one parallel pass (decode of many sequences at
// once); a few rows with many keys (a decode step of one or two sequences)
// spread over the threads in three passes (keys, softmax, elements). A
// row's output has the same bits however it is computed.
void attention_runs(std::span<const AttentionRun> runs, const KvView& k, const KvView& v, const AttentionShape& shape,
                    ThreadPool& pool, const Kernels& kernels = cpu::kernels());

// One query (n_heads * head_dim values) against cache positions [0, n_ctx):
// out[h] = sum_j softmax_j(scale * q[h] . k[j]) v[j]. The cache must already
// hold the current token.
void attention(const float* q, const KvView& k, const KvView& v, int64_t n_ctx, const AttentionShape& shape,
               float* out, ThreadPool& pool, const Kernels& kernels = cpu::kernels());

// n_tokens queries (row t at position n_past + t, each n_heads * head_dim
// values) with causal masking: query t sees positions [0, n_past + t].
void attention_prefill(const float* q, const KvView& k, const KvView& v, int64_t n_past, int n_tokens,
                       const AttentionShape& shape, float* out, ThreadPool& pool,
                       const Kernels& kernels = cpu::kernels());

}  // namespace nt::cpu
