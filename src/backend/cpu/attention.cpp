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

float dot_row(const Kernels& kn, const KvView& c, int64_t offset, const float* x, int n) {
  if (c.type == TensorType::F16) return kn.dot_f16(static_cast<const uint16_t*>(c.data) + offset, x, n);
  return kn.dot_f32(static_cast<const float*>(c.data) + offset, x, n);
}

void axpy_row(const Kernels& kn, float a, const KvView& c, int64_t offset, float* y, int n) {
  if (c.type == TensorType::F16) {
    kn.axpy_f16(a, static_cast<const uint16_t*>(c.data) + offset, y, n);
  } else {
    kn.axpy_f32(a, static_cast<const float*>(c.data) + offset, y, n);
  }
}

int64_t cache_row(const AttentionRun& run, int64_t pos) {
  if (!run.pages) return pos;
  return int64_t(run.pages[pos / run.page_size]) * run.page_size + pos % run.page_size;
}

// One head of one query over the run's positions [0, n_ctx), then `extra`.
void attend_head(const float* q, const KvView& k, const KvView& v, const AttentionRun& run, int64_t n_ctx,
                 std::span<const int64_t> extra, int kv_head, const AttentionShape& s, float* out, const Kernels& kn) {
  static thread_local std::vector<float> scores;
  static thread_local std::vector<int64_t> rows;
  const int64_t n = n_ctx + int64_t(extra.size());
  if (scores.size() < size_t(n)) {
    scores.resize(n);
    rows.resize(n);
  }
  for (int64_t j = 0; j < n_ctx; ++j) rows[j] = cache_row(run, j);
  for (size_t i = 0; i < extra.size(); ++i) rows[n_ctx + int64_t(i)] = cache_row(run, extra[i]);
  const int hd = s.head_dim;
  float max = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = s.scale * dot_row(kn, k, rows[j] * k.pos_stride + kv_head * k.head_stride, q, hd);
    max = std::max(max, scores[j]);
  }
  const float inv_sum = 1.0f / kn.exp_sum(scores.data(), n, max);
  std::fill(out, out + hd, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    axpy_row(kn, scores[j] * inv_sum, v, rows[j] * v.pos_stride + kv_head * v.head_stride, out, hd);
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
  // Tasks are (run, token, head) in order; task_start[r] is run r's first.
  // Kept across calls (decode calls this once per layer); the workers read
  // the caller's copy through `start`, not their own thread's.
  static thread_local std::vector<int64_t> task_start;
  task_start.assign(runs.size() + 1, 0);
  for (size_t r = 0; r < runs.size(); ++r) task_start[r + 1] = task_start[r] + int64_t(runs[r].n_tokens) * s.n_heads;
  const int64_t* start = task_start.data();
  const int64_t tasks = task_start.back();
  // Strided so that every thread gets early (short) and late (long) queries.
  pool.run([&](int thread, int n_threads) {
    size_t r = 0;
    for (int64_t i = thread; i < tasks; i += n_threads) {
      while (i >= start[r + 1]) ++r;
      const AttentionRun& run = runs[r];
      const int64_t local = i - start[r];
      const int64_t t = local / s.n_heads;
      const int h = int(local % s.n_heads);
      const int64_t offset = t * width + int64_t(h) * s.head_dim;
      if (run.path_start) {
        const std::span<const int64_t> path{run.paths + run.path_start[t], run.paths + run.path_start[t + 1]};
        attend_head(run.q + offset, k, v, run, run.tree_start, path, h / group, s, run.out + offset, kn);
      } else {
        attend_head(run.q + offset, k, v, run, run.first_pos + t + 1, {}, h / group, s, run.out + offset, kn);
      }
    }
  });
}

}  // namespace nt::cpu
