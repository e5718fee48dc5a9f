#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace nt::cpu {

namespace {

void check(const KvView& k, const KvView& v, const AttentionShape& s) {
  for (const KvView* c : {&k, &v}) {
    if (c->type != TensorType::F16 && c->type != TensorType::F32) {
      fail("attention: KV cache type {} is not F16 or F32", tensor_type_name(c->type));
    }
  }
  if (s.n_kv_heads <= 0 || s.n_heads % s.n_kv_heads != 0) {
    fail("attention: {} query heads do not share {} KV heads evenly", s.n_heads, s.n_kv_heads);
  }
}

// Keys one dot-product or weighted-sum call takes (the weighted sums' outputs
// stay in registers across them).
constexpr int kKeyBlock = 32;

// out[h * out_stride + j] = q[h] . row j, for the rows at offsets[0..keys)
// and `heads` query heads hd apart.
void dot_rows(const Kernels& kn, const KvView& c, const int64_t* offsets, int keys, const float* q, int hd, int heads,
              float* out, int64_t out_stride) {
  if (c.type == TensorType::F16) {
    const uint16_t* rows[kKeyBlock];
    for (int j = 0; j < keys; ++j) rows[j] = static_cast<const uint16_t*>(c.data) + offsets[j];
    kn.dot_f16_heads(rows, keys, q, hd, heads, hd, out, out_stride);
    return;
  }
  const auto* data = static_cast<const float*>(c.data);
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < keys; ++j) out[h * out_stride + j] = kn.dot_f32(data + offsets[j], q + h * hd, hd);
  }
}

// out[h] += a[h * a_stride + j] * row j, for the rows at offsets[0..keys) in
// order and `heads` outputs hd apart.
void axpy_rows(const Kernels& kn, const float* a, int64_t a_stride, const KvView& c, const int64_t* offsets, int keys,
               float* out, int hd, int heads) {
  if (c.type == TensorType::F16) {
    const uint16_t* rows[kKeyBlock];
    for (int j = 0; j < keys; ++j) rows[j] = static_cast<const uint16_t*>(c.data) + offsets[j];
    kn.axpy_f16_heads(a, a_stride, rows, keys, out, hd, heads, hd);
    return;
  }
  for (int j = 0; j < keys; ++j) {
    for (int h = 0; h < heads; ++h) {
      kn.axpy_f32(a[h * a_stride + j], static_cast<const float*>(c.data) + offsets[j], out + h * hd, hd);
    }
  }
}

int64_t cache_row(const AttentionRun& run, int64_t pos) {
  if (!run.pages) return pos;
  return int64_t(run.pages[pos / run.page_size]) * run.page_size + pos % run.page_size;
}

// x[0..n) *= scale; returns their max (-inf for n = 0). Eight running maxima
// (the max is exact in any order) keep the loop off one compare's latency.
float scale_and_max(float* x, int64_t n, float scale) {
  float lanes[8];
  std::fill(lanes, lanes + 8, -INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] = std::max(lanes[l], x[j + l] *= scale);
  }
  for (; j < n; ++j) lanes[0] = std::max(lanes[0], x[j] *= scale);
  return *std::max_element(lanes, lanes + 8);
}

// rows[p] = the cache row of positions [0, n) of the run, a page at a time.
void cache_rows(const AttentionRun& run, int64_t n, int64_t* rows) {
  if (!run.pages) {
    for (int64_t p = 0; p < n; ++p) rows[p] = p;
    return;
  }
  for (int64_t first = 0, page = 0; first < n; first += run.page_size, ++page) {
    const int64_t base = int64_t(run.pages[page]) * run.page_size;
    for (int64_t p = first; p < std::min(n, first + run.page_size); ++p) rows[p] = base + (p - first);
  }
}

// `heads` consecutive query heads of one query row, all of KV head kv_head,
// over the run's positions [0, n_ctx), then `extra`. Each head's scores,
// softmax and weighted sum are the one-head arithmetic in its order (so a
// head's numbers do not depend on how many share the call); each K and V
// row is read and converted once for all of them.
void attend_heads(const float* q, int heads, const KvView& k, const KvView& v, const AttentionRun& run, int64_t n_ctx,
                  std::span<const int64_t> extra, int kv_head, const AttentionShape& s, float* out, const Kernels& kn) {
  static thread_local std::vector<float> scores;  // [heads][n]: the scores, then the weights
  static thread_local std::vector<int64_t> rows;
  const int64_t n = n_ctx + int64_t(extra.size());
  if (scores.size() < size_t(heads * n)) scores.resize(size_t(heads * n));
  if (rows.size() < size_t(n)) rows.resize(size_t(n));
  cache_rows(run, n_ctx, rows.data());
  for (size_t i = 0; i < extra.size(); ++i) rows[n_ctx + int64_t(i)] = cache_row(run, extra[i]);
  const int hd = s.head_dim;
  int64_t offsets[kKeyBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int keys = int(std::min<int64_t>(kKeyBlock, n - j0));
    for (int j = 0; j < keys; ++j) offsets[j] = rows[j0 + j] * k.pos_stride + kv_head * k.head_stride;
    dot_rows(kn, k, offsets, keys, q, hd, heads, scores.data() + j0, n);
  }
  for (int h = 0; h < heads; ++h) {
    float* weights = scores.data() + h * n;
    const float inv_sum = 1.0f / kn.exp_sum(weights, n, scale_and_max(weights, n, s.scale));
    for (int64_t j = 0; j < n; ++j) weights[j] *= inv_sum;
  }
  std::fill(out, out + int64_t(heads) * hd, 0.0f);
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int keys = int(std::min<int64_t>(kKeyBlock, n - j0));
    for (int j = 0; j < keys; ++j) offsets[j] = rows[j0 + j] * v.pos_stride + kv_head * v.head_stride;
    axpy_rows(kn, scores.data() + j0, n, v, offsets, keys, out, hd, heads);
  }
}

}  // namespace

void attention(const float* q, const KvView& k, const KvView& v, int64_t n_ctx, const AttentionShape& s, float* out,
               ThreadPool& pool, const Kernels& kn) {
  attention_prefill(q, k, v, n_ctx - 1, 1, s, out, pool, kn);
}

void attention_prefill(const float* q, const KvView& k, const KvView& v, int64_t n_past, int n_tokens,
                       const AttentionShape& s, float* out, ThreadPool& pool, const Kernels& kn) {
  const AttentionRun run{q, out, n_past, n_tokens, nullptr, 0};
  attention_runs({&run, 1}, k, v, s, pool, kn);
}

void attention_runs(std::span<const AttentionRun> runs, const KvView& k, const KvView& v, const AttentionShape& s,
                    ThreadPool& pool, const Kernels& kn) {
  check(k, v, s);
  const int group = s.n_heads / s.n_kv_heads;
  const int64_t width = int64_t(s.n_heads) * s.head_dim;
  int64_t rows = 0;
  for (const AttentionRun& run : runs) rows += run.n_tokens;
  // A task is the query heads of one KV head for one row when that leaves
  // every thread several (prefill, big batches), else one head (decode).
  const int heads_per_task = rows * s.n_kv_heads >= 4 * int64_t(pool.size()) ? group : 1;
  const int per_row = s.n_heads / heads_per_task;
  // Tasks are (run, token, head group) in order; task_start[r] is run r's
  // first. Kept across calls (decode calls this once per layer); the
  // workers read the caller's copy through `start`, not their own thread's.
  static thread_local std::vector<int64_t> task_start;
  task_start.assign(runs.size() + 1, 0);
  for (size_t r = 0; r < runs.size(); ++r) task_start[r + 1] = task_start[r] + int64_t(runs[r].n_tokens) * per_row;
  const int64_t* start = task_start.data();
  const int64_t tasks = task_start.back();
  // Strided so that every thread gets early (short) and late (long) queries.
  pool.run([&](int thread, int n_threads) {
    size_t r = 0;
    for (int64_t i = thread; i < tasks; i += n_threads) {
      while (i >= start[r + 1]) ++r;
      const AttentionRun& run = runs[r];
      const int64_t local = i - start[r];
      const int64_t t = local / per_row;
      const int h = int(local % per_row) * heads_per_task;
      const int64_t offset = t * width + int64_t(h) * s.head_dim;
      if (run.path_start) {
        const std::span<const int64_t> path{run.paths + run.path_start[t], run.paths + run.path_start[t + 1]};
        attend_heads(run.q + offset, heads_per_task, k, v, run, run.tree_start, path, h / group, s, run.out + offset, kn);
      } else {
        attend_heads(run.q + offset, heads_per_task, k, v, run, run.first_pos + t + 1, {}, h / group, s, run.out + offset, kn);
      }
    }
  });
}

}  // namespace nt::cpu
