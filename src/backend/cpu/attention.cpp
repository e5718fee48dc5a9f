#include "backend/cpu/attention.h"

#include <algorithm>
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

// Keys whose V rows one weighted-sum call takes (the outputs stay in
// registers across them).
constexpr int kKeyBlock = 16;

// out[h] = q[h] . row for `heads` query heads hd apart.
void dot_rows(const Kernels& kn, const KvView& c, int64_t offset, const float* q, int hd, int heads, float* out) {
  if (c.type == TensorType::F16) {
    kn.dot_f16_heads(static_cast<const uint16_t*>(c.data) + offset, q, hd, heads, hd, out);
    return;
  }
  for (int h = 0; h < heads; ++h) out[h] = kn.dot_f32(static_cast<const float*>(c.data) + offset, q + h * hd, hd);
}

// out[h] += a[j * heads + h] * row j, for the rows at offsets[0..keys) in
// order and `heads` outputs hd apart.
void axpy_rows(const Kernels& kn, const float* a, const KvView& c, const int64_t* offsets, int keys, float* out, int hd,
               int heads) {
  if (c.type == TensorType::F16) {
    const uint16_t* rows[kKeyBlock];
    for (int j = 0; j < keys; ++j) rows[j] = static_cast<const uint16_t*>(c.data) + offsets[j];
    kn.axpy_f16_heads(a, rows, keys, out, hd, heads, hd);
    return;
  }
  for (int j = 0; j < keys; ++j) {
    for (int h = 0; h < heads; ++h) {
      kn.axpy_f32(a[j * heads + h], static_cast<const float*>(c.data) + offsets[j], out + h * hd, hd);
    }
  }
}

int64_t cache_row(const AttentionRun& run, int64_t pos) {
  if (!run.pages) return pos;
  return int64_t(run.pages[pos / run.page_size]) * run.page_size + pos % run.page_size;
}

// `heads` consecutive query heads of one query row, all of KV head kv_head,
// over the run's positions [0, n_ctx), then `extra`. Each head's scores,
// softmax and weighted sum are the one-head arithmetic in its order (so a
// head's numbers do not depend on how many share the call); each K and V
// row is read and converted once for all of them.
void attend_heads(const float* q, int heads, const KvView& k, const KvView& v, const AttentionRun& run, int64_t n_ctx,
                  std::span<const int64_t> extra, int kv_head, const AttentionShape& s, float* out, const Kernels& kn) {
  static thread_local std::vector<float> scores, per_head;  // scores: [heads][n]
  static thread_local std::vector<int64_t> rows;
  const int64_t n = n_ctx + int64_t(extra.size());
  if (scores.size() < size_t(heads * n)) scores.resize(size_t(heads * n));
  if (rows.size() < size_t(n)) rows.resize(size_t(n));
  per_head.resize(size_t((2 + kKeyBlock) * heads));
  float* dots = per_head.data();
  float* max = dots + heads;
  float* weights = max + heads;  // [kKeyBlock][heads]
  for (int64_t j = 0; j < n_ctx; ++j) rows[j] = cache_row(run, j);
  for (size_t i = 0; i < extra.size(); ++i) rows[n_ctx + int64_t(i)] = cache_row(run, extra[i]);
  const int hd = s.head_dim;
  std::fill(max, max + heads, -INFINITY);
  for (int64_t j = 0; j < n; ++j) {
    dot_rows(kn, k, rows[j] * k.pos_stride + kv_head * k.head_stride, q, hd, heads, dots);
    for (int h = 0; h < heads; ++h) {
      scores[h * n + j] = s.scale * dots[h];
      max[h] = std::max(max[h], scores[h * n + j]);
    }
  }
  float* inv_sum = max;  // each head's max is spent once its sum is taken
  for (int h = 0; h < heads; ++h) inv_sum[h] = 1.0f / kn.exp_sum(scores.data() + h * n, n, max[h]);
  std::fill(out, out + int64_t(heads) * hd, 0.0f);
  int64_t offsets[kKeyBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int keys = int(std::min<int64_t>(kKeyBlock, n - j0));
    for (int j = 0; j < keys; ++j) {
      offsets[j] = rows[j0 + j] * v.pos_stride + kv_head * v.head_stride;
      for (int h = 0; h < heads; ++h) weights[j * heads + h] = scores[h * n + j0 + j] * inv_sum[h];
    }
    axpy_rows(kn, weights, v, offsets, keys, out, hd, heads);
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
