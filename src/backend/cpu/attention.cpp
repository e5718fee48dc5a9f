#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/align.h"
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

// out[h] += a[h * a_stride + j] * row j, elements [0, elems), for the rows
// at offsets[0..keys) in order and `heads` outputs hd apart.
void axpy_rows(const Kernels& kn, const float* a, int64_t a_stride, const KvView& c, const int64_t* offsets, int keys,
               float* out, int hd, int heads, int64_t elems) {
  if (c.type == TensorType::F16) {
    const uint16_t* rows[kKeyBlock];
    for (int j = 0; j < keys; ++j) rows[j] = static_cast<const uint16_t*>(c.data) + offsets[j];
    kn.axpy_f16_heads(a, a_stride, rows, keys, out, hd, heads, elems);
    return;
  }
  for (int j = 0; j < keys; ++j) {
    for (int h = 0; h < heads; ++h) {
      kn.axpy_f32(a[h * a_stride + j], static_cast<const float*>(c.data) + offsets[j], out + h * hd, elems);
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

// rows[p - from] = the cache row of positions [from, to) of the run, a page at a time.
void cache_rows(const AttentionRun& run, int64_t from, int64_t to, int64_t* rows) {
  if (!run.pages) {
    for (int64_t p = from; p < to; ++p) rows[p - from] = p;
    return;
  }
  for (int64_t p = from; p < to;) {
    const int64_t page = p / run.page_size, end = std::min(to, (page + 1) * run.page_size);
    const int64_t shift = (int64_t(run.pages[page]) - page) * run.page_size;
    for (; p < end; ++p) rows[p - from] = p + shift;
  }
}

// The first position a query at `pos` sees.
int64_t first_key(const AttentionShape& s, int64_t pos) { return s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0; }

// Scores of `heads` query heads (q, hd apart) against the K rows of cache
// rows rows[j0..j1) of KV head kv_head, into scores[h * n + j].
void score_keys(const float* q, int heads, const KvView& k, const int64_t* rows, int64_t j0, int64_t j1, int kv_head,
                const AttentionShape& s, float* scores, int64_t n, const Kernels& kn) {
  int64_t offsets[kKeyBlock];
  for (; j0 < j1; j0 += kKeyBlock) {
    const int keys = int(std::min<int64_t>(kKeyBlock, j1 - j0));
    for (int j = 0; j < keys; ++j) offsets[j] = rows[j0 + j] * k.pos_stride + kv_head * k.head_stride;
    dot_rows(kn, k, offsets, keys, q, s.head_dim, heads, scores + j0, n);
  }
}

// Query head `head`'s n scores into its softmax weights, in place; its sink,
// if any, joins the max and the sum.
void softmax_weights(float* scores, int64_t n, int head, const AttentionShape& s, const Kernels& kn) {
  float max = scale_and_max(scores, n, s.scale);
  if (s.sinks) max = std::max(max, s.sinks[head]);
  float sum = kn.exp_sum(scores, n, max);
  if (s.sinks) sum += std::exp(s.sinks[head] - max);
  const float inv_sum = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) scores[j] *= inv_sum;
}

// Elements [d0, d1) of `heads` outputs (hd apart) = the weighted sums of the
// V rows of cache rows rows[0..n) of KV head kv_head, in key order (the
// weights at weights[h * n + j]). d0 a multiple of 8, and d1 too unless it is
// the head's end: an element then takes the same instructions however the
// elements are split (axpy_f16_heads' chunks of 8, its scalar tail).
void weigh_values(const float* weights, int heads, const KvView& v, const int64_t* rows, int64_t n, int kv_head,
                  const AttentionShape& s, float* out, int64_t d0, int64_t d1, const Kernels& kn) {
  const int hd = s.head_dim;
  for (int h = 0; h < heads; ++h) std::fill(out + h * hd + d0, out + h * hd + d1, 0.0f);
  int64_t offsets[kKeyBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kKeyBlock) {
    const int keys = int(std::min<int64_t>(kKeyBlock, n - j0));
    for (int j = 0; j < keys; ++j) offsets[j] = rows[j0 + j] * v.pos_stride + kv_head * v.head_stride + d0;
    axpy_rows(kn, weights + j0, n, v, offsets, keys, out + d0, hd, heads, d1 - d0);
  }
}

// `heads` consecutive query heads of one query row from head `first_head`,
// all of KV head kv_head, over the run's positions [from, n_ctx), then `extra`. Each head's scores,
// softmax and weighted sum are the one-head arithmetic in its order (so a
// head's numbers do not depend on how many share the call); each K and V
// row is read and converted once for all of them.
void attend_heads(const float* q, int first_head, int heads, const KvView& k, const KvView& v, const AttentionRun& run,
                  int64_t from, int64_t n_ctx, std::span<const int64_t> extra, int kv_head, const AttentionShape& s, float* out,
                  const Kernels& kn) {
  static thread_local std::vector<float> scores;  // [heads][n]: the scores, then the weights
  static thread_local std::vector<int64_t> rows;
  const int64_t prefix = n_ctx - from, n = prefix + int64_t(extra.size());
  if (scores.size() < size_t(heads * n)) scores.resize(size_t(heads * n));
  if (rows.size() < size_t(n)) rows.resize(size_t(n));
  cache_rows(run, from, n_ctx, rows.data());
  for (size_t i = 0; i < extra.size(); ++i) rows[prefix + int64_t(i)] = cache_row(run, extra[i]);
  score_keys(q, heads, k, rows.data(), 0, n, kv_head, s, scores.data(), n, kn);
  for (int h = 0; h < heads; ++h) softmax_weights(scores.data() + h * n, n, first_head + h, s, kn);
  weigh_values(scores.data(), heads, v, rows.data(), n, kv_head, s, out, 0, s.head_dim, kn);
}

// Keys of one scoring task and elements of one weighted-sum task when a few
// rows spread their attention over the threads (attend_spread).
constexpr int64_t kSpreadKeys = 256;
constexpr int64_t kSpreadElems = 32;
// Below this many keys the three dispatches cost more than the spread saves.
constexpr int64_t kSpreadMinKeys = 512;

// A few causal rows with many keys (a decode step of one or two sequences):
// their heads are too few tasks for the threads, so each row attends in
// three parallel phases: the scores of a KV head's query heads for a range
// of keys, each head's softmax, and a range of elements of a KV head's
// weighted sums. Every number takes attend_heads' operations (the K and V
// rows converted once per KV head instead of once per head, and the
// threads evenly loaded), so a row's output has the same bits either way.
// `most_keys`: the most any row sees.
void attend_spread(std::span<const AttentionRun> runs, int64_t most_keys, const KvView& k, const KvView& v,
                   const AttentionShape& s, ThreadPool& pool, const Kernels& kn) {
  struct Row {
    const float* q;
    float* out;
    const int64_t* cache_rows;
    int64_t keys;
    float* scores;  // [n_heads][keys]
  };
  static thread_local std::vector<Row> rows;
  static thread_local std::vector<int64_t> cache;
  static thread_local std::vector<float> scores;
  int64_t cache_size = 0, score_size = 0;
  for (const AttentionRun& run : runs) {
    cache_size += run.first_pos + run.n_tokens;
    for (int t = 0; t < run.n_tokens; ++t) score_size += s.n_heads * (run.first_pos + t + 1);
  }
  cache.resize(size_t(cache_size));
  scores.resize(size_t(score_size));
  rows.clear();
  int64_t* cache_at = cache.data();
  float* scores_at = scores.data();
  const int64_t width = int64_t(s.n_heads) * s.head_dim;
  for (const AttentionRun& run : runs) {
    cache_rows(run, 0, run.first_pos + run.n_tokens, cache_at);
    for (int t = 0; t < run.n_tokens; ++t) {
      const int64_t pos = run.first_pos + t, from = first_key(s, pos);
      rows.push_back({run.q + t * width, run.out + t * width, cache_at + from, pos + 1 - from, scores_at});
      scores_at += s.n_heads * (pos + 1 - from);
    }
    cache_at += run.first_pos + run.n_tokens;
  }
  const Row* row = rows.data();
  const int64_t n_rows = int64_t(rows.size());
  const int group = s.n_heads / s.n_kv_heads;
  const int64_t key_blocks = ceil_div(most_keys, kSpreadKeys);
  pool.parallel_for(n_rows * s.n_kv_heads * key_blocks, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Row& r = row[i / (s.n_kv_heads * key_blocks)];
      const int kv = int(i / key_blocks % s.n_kv_heads);
      const int64_t j0 = i % key_blocks * kSpreadKeys, j1 = std::min(r.keys, j0 + kSpreadKeys);
      if (j0 >= j1) continue;
      score_keys(r.q + kv * group * s.head_dim, group, k, r.cache_rows, j0, j1, kv, s, r.scores + kv * group * r.keys,
                 r.keys, kn);
    }
  });
  pool.parallel_for(n_rows * s.n_heads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Row& r = row[i / s.n_heads];
      softmax_weights(r.scores + i % s.n_heads * r.keys, r.keys, int(i % s.n_heads), s, kn);
    }
  });
  const int64_t elem_blocks = ceil_div(s.head_dim, kSpreadElems);
  pool.parallel_for(n_rows * s.n_kv_heads * elem_blocks, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const Row& r = row[i / (s.n_kv_heads * elem_blocks)];
      const int kv = int(i / elem_blocks % s.n_kv_heads);
      const int64_t d0 = i % elem_blocks * kSpreadElems, d1 = std::min<int64_t>(s.head_dim, d0 + kSpreadElems);
      weigh_values(r.scores + kv * group * r.keys, group, v, r.cache_rows, r.keys, kv, s, r.out + kv * group * s.head_dim,
                   d0, d1, kn);
    }
  });
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
  int64_t most_keys = 0;
  for (const AttentionRun& run : runs) most_keys = std::max(most_keys, run.first_pos + run.n_tokens);
  if (s.window > 0) most_keys = std::min(most_keys, s.window);
  const bool few_tasks = rows * s.n_kv_heads < 4 * int64_t(pool.size());
  const bool causal = std::none_of(runs.begin(), runs.end(), [](const AttentionRun& r) { return r.path_start; });
  if (few_tasks && causal && most_keys >= kSpreadMinKeys) {
    return attend_spread(runs, most_keys, k, v, s, pool, kn);
  }
  const int heads_per_task = few_tasks ? 1 : group;
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
        // The path holds the row's ancestors and itself at depths 0, 1, ...
        // after the prefix: a window cuts the prefix first, then the path.
        std::span<const int64_t> path{run.paths + run.path_start[t], run.paths + run.path_start[t + 1]};
        const int64_t from = first_key(s, run.tree_start + int64_t(path.size()) - 1);
        path = path.subspan(size_t(std::max<int64_t>(0, from - run.tree_start)));
        attend_heads(run.q + offset, h, heads_per_task, k, v, run, std::min(from, run.tree_start), run.tree_start, path,
                     h / group, s, run.out + offset, kn);
      } else {
        const int64_t pos = run.first_pos + t;
        attend_heads(run.q + offset, h, heads_per_task, k, v, run, first_key(s, pos), pos + 1, {}, h / group, s,
                     run.out + offset, kn);
      }
    }
  });
}

}  // namespace nt::cpu
