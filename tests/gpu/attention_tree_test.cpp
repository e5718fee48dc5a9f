// Token-tree attention (AttentionParams::tree_mask) against float64 softmax
// attention over each row's own keys: the cached prefix, then its ancestors
// in the tree and itself, nothing else. Tree keys are large, so a sibling or
// cousin leaking through the mask would dominate a row's output. On the
// tensor-core kernel (head_dim 64, SmolLM2's heads, and 128) and the generic
// one (head_dim 8, stories260K's), split and unsplit, for a whole tree and for
// a later piece of one (a chunk whose rows' ancestors came in an earlier one,
// down to a single row, which must not take a decode kernel).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels/attention.h"
#include "gpu_test_util.h"
#include "planning/device_memory_plan.h"

namespace nt {
namespace {

struct TreeShape {
  int64_t prefix, nodes;  // keys before the tree, and its entries
  int64_t first, rows;    // the launch's rows: entries [first, first + rows)
  int n_heads, n_kv_heads, head_dim;
  int splits;
};

// Each entry's parent: a random earlier one (a bushy tree, ancestors far apart).
std::vector<int32_t> random_parents(int64_t nodes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> parents(size_t(nodes), -1);
  for (int64_t i = 1; i < nodes; ++i) parents[size_t(i)] = int32_t(gen() % uint64_t(i));
  return parents;
}

double run_tree_attention(const TreeShape& s) {
  const int64_t keys = s.prefix + s.nodes;
  const int64_t context = (keys + 40 + kKvTile - 1) / kKvTile * kKvTile;
  const int64_t width = int64_t(s.n_heads) * s.head_dim;
  const auto parents = random_parents(s.nodes, uint64_t(s.nodes * 31 + s.prefix));
  const auto q = test::random_floats(size_t(s.rows * width), -2.0f, 2.0f);
  std::vector<uint16_t> k(size_t(s.n_kv_heads * context * s.head_dim)), v(k.size());
  std::vector<float> kf(k.size()), vf(v.size());  // row-major [kv_head][key][d], as the cache rounds them
  const auto kv = test::random_floats(2 * k.size(), -1.0f, 1.0f);
  for (int h = 0; h < s.n_kv_heads; ++h) {
    for (int64_t t = 0; t < context; ++t) {
      for (int d = 0; d < s.head_dim; ++d) {
        const size_t i = size_t((h * context + t) * s.head_dim + d);
        const float scale = t >= s.prefix ? 4.0f : 1.0f;  // tree keys dominate: a leak shows
        const uint16_t kh = fp32_to_fp16(t >= keys ? 30.0f : scale * kv[i]);
        const uint16_t vh = fp32_to_fp16(t >= keys ? 1000.0f : kv[k.size() + i]);
        k[size_t(k_cache_index(h, t, d, context, s.head_dim))] = kh;
        v[size_t(v_cache_index(h, t, d, context, s.head_dim))] = vh;
        kf[i] = fp16_to_fp32(kh);
        vf[i] = fp16_to_fp32(vh);
      }
    }
  }
  // Each launched row's mask: its ancestors' and its own bits.
  const int64_t words = tree_mask_words(s.nodes);
  std::vector<uint32_t> masks(size_t(s.rows * words), 0u);
  std::vector<std::vector<int64_t>> visible(size_t(s.rows));
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t j = 0; j < s.prefix; ++j) visible[size_t(r)].push_back(j);
    for (int32_t a = int32_t(s.first + r); a >= 0; a = parents[size_t(a)]) {
      masks[size_t(r * words + a / 32)] |= 1u << (a % 32);
      visible[size_t(r)].push_back(s.prefix + a);
    }
  }
  const DeviceBuffer dq = test::to_device(q), dk = test::to_device(k), dv = test::to_device(v), dmask = test::to_device(masks);
  const DeviceBuffer dpos = test::to_device(std::vector<int32_t>{int32_t(s.prefix + s.first)});
  DeviceBuffer out = test::poisoned(size_t(s.rows * width) * 4);
  DeviceBuffer partials(std::max<size_t>(4, attention_partials_floats(s.rows, s.n_heads, s.head_dim, s.splits) * 4), "partials");
  const AttentionParams p{.q = dq.as<float>(),
                          .q_stride = width,
                          .k_cache = dk.as<uint16_t>(),
                          .v_cache = dv.as<uint16_t>(),
                          .context = context,
                          .out = out.as<float>(),
                          .out_stride = width,
                          .pos = dpos.as<int32_t>(),
                          .n_tokens = s.rows,
                          .n_heads = s.n_heads,
                          .n_kv_heads = s.n_kv_heads,
                          .head_dim = s.head_dim,
                          .n_splits = s.splits,
                          .partials = partials.as<float>(),
                          .tree_mask = dmask.as<uint32_t>(),
                          .tree_start = s.prefix,
                          .tree_words = int(words)};
  attention(p, nullptr);
  const auto got_all = test::to_host<float>(out, size_t(s.rows * width));

  std::vector<float> got;
  std::vector<double> ref;
  const int group = s.n_heads / s.n_kv_heads;
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int h = 0; h < s.n_heads; ++h) {
      const int kvh = h / group;
      const float* qr = q.data() + r * width + h * s.head_dim;
      std::vector<double> w;
      double m = -INFINITY, sum = 0.0;
      for (const int64_t j : visible[size_t(r)]) {
        const float* kr = kf.data() + (kvh * context + j) * s.head_dim;
        double dot = 0.0;
        for (int d = 0; d < s.head_dim; ++d) dot += double(qr[d]) * kr[d];
        w.push_back(dot / std::sqrt(double(s.head_dim)));
        m = std::max(m, w.back());
      }
      for (double& x : w) sum += (x = std::exp(x - m));
      std::vector<double> o(size_t(s.head_dim), 0.0);
      for (size_t i = 0; i < w.size(); ++i) {
        const float* vr = vf.data() + (kvh * context + visible[size_t(r)][i]) * s.head_dim;
        for (int d = 0; d < s.head_dim; ++d) o[size_t(d)] += w[i] * vr[d];
      }
      for (int d = 0; d < s.head_dim; ++d) {
        ref.push_back(o[size_t(d)] / sum);
        got.push_back(got_all[size_t(r * width + h * s.head_dim + d)]);
      }
    }
  }
  return test::relative_error(got, ref);
}

std::string describe(const TreeShape& s) {
  return "tree of " + std::to_string(s.nodes) + " after " + std::to_string(s.prefix) + ", rows " +
         std::to_string(s.first) + ".." + std::to_string(s.first + s.rows - 1) + ", heads " + std::to_string(s.n_heads) +
         "/" + std::to_string(s.n_kv_heads) + " of " + std::to_string(s.head_dim) + ", splits " + std::to_string(s.splits);
}

// Tensor cores: f16 queries and probabilities, ~1e-3 relative error; a leak costs far more.
TEST(TreeAttention, TensorCoresSeeEachRowsAncestorsOnly) {
  for (const TreeShape s : {
           TreeShape{37, 40, 0, 40, 9, 3, 64, 1},     // SmolLM2 heads, a whole tree
           TreeShape{37, 40, 0, 40, 9, 3, 64, 3},     // split
           TreeShape{200, 70, 30, 40, 9, 3, 64, 1},   // a later piece: ancestors cached by an earlier chunk
           TreeShape{200, 70, 69, 1, 9, 3, 64, 2},    // one row of a tree, split
           TreeShape{5, 100, 0, 100, 32, 8, 128, 1},  // 8B heads, bits past the first mask words
           TreeShape{900, 64, 0, 64, 64, 8, 128, 5},  // 70B-like heads after a long prefix
       }) {
    SCOPED_TRACE(describe(s));
    EXPECT_LT(run_tree_attention(s), 5e-3);
  }
}

// The generic kernel: f32 arithmetic on the f16 cache.
TEST(TreeAttention, GenericKernelSeesEachRowsAncestorsOnly) {
  for (const TreeShape s : {
           TreeShape{7, 16, 0, 16, 8, 8, 8, 1},      // stories260K heads
           TreeShape{50, 60, 0, 60, 8, 8, 8, 3},     // split
           TreeShape{50, 60, 20, 40, 8, 8, 8, 1},    // a later piece
           TreeShape{50, 60, 59, 1, 8, 8, 8, 1},     // one row
           TreeShape{20, 33, 0, 33, 4, 4, 256, 2},   // head_dim 256
       }) {
    SCOPED_TRACE(describe(s));
    EXPECT_LT(run_tree_attention(s), 1e-4);
  }
}

TEST(TreeAttention, RefusesTreesOfSeveralSequencesOrWithoutMaskWords) {
  const uint32_t word = 1;
  const AttentionParams one{.context = kKvTile, .n_tokens = 1, .n_heads = 8, .n_kv_heads = 8, .head_dim = 64,
                            .tree_mask = &word, .tree_words = 1};
  AttentionParams several = one;
  several.n_seqs = 2;
  EXPECT_THROW(attention(several, nullptr), Error);
  AttentionParams no_words = one;
  no_words.tree_words = 0;
  EXPECT_THROW(attention(no_words, nullptr), Error);
}

}  // namespace
}  // namespace nt
