// A stepwise tree row's attention (AttentionParams::path_parents): the
// short-context decode of one tree token, reading its ancestors' keys where
// the tree cached them, must give bit for bit what the same launch gives
// when the path's keys lie at consecutive positions, as they do once the
// path is accepted and a one-token step decodes after it. Keys past the
// path are large, so reading a sibling instead would show.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/kernels/attention.h"
#include "core/half.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct PathShape {
  int64_t prefix, nodes;  // keys before the tree, and its entries
  int n_heads, n_kv_heads, head_dim;
};

// Keys and values of `positions` keys at those positions (f16, the cache layout); past them, large ones.
struct Cache {
  std::vector<uint16_t> k, v;
};

Cache make_cache(const PathShape& s, int64_t context, const std::vector<std::vector<float>>& keys,
                 const std::vector<std::vector<float>>& values) {
  Cache c{std::vector<uint16_t>(size_t(s.n_kv_heads * context * s.head_dim)), {}};
  c.v.resize(c.k.size());
  for (int h = 0; h < s.n_kv_heads; ++h) {
    for (int64_t t = 0; t < context; ++t) {
      for (int d = 0; d < s.head_dim; ++d) {
        const bool held = t < int64_t(keys.size());
        const size_t i = size_t(h * s.head_dim + d);
        c.k[size_t(k_cache_index(h, t, d, context, s.head_dim))] = fp32_to_fp16(held ? keys[size_t(t)][i] : 30.0f);
        c.v[size_t(v_cache_index(h, t, d, context, s.head_dim))] = fp32_to_fp16(held ? values[size_t(t)][i] : 1000.0f);
      }
    }
  }
  return c;
}

// Each tree entry's output through path_parents, and (when `follow` is false) without them.
std::vector<float> attend(const PathShape& s, int64_t context, const Cache& cache, const std::vector<float>& q,
                          const std::vector<int32_t>& parents, int32_t self, int64_t path_pos, bool follow) {
  const int64_t width = int64_t(s.n_heads) * s.head_dim;
  const DeviceBuffer dq = test::to_device(q), dk = test::to_device(cache.k), dv = test::to_device(cache.v);
  const DeviceBuffer dparents = test::to_device(parents), dpos = test::to_device(std::vector<int32_t>{int32_t(path_pos)});
  DeviceBuffer out = test::poisoned(size_t(width) * 4);
  AttentionParams p;
  p.q = dq.as<float>();
  p.q_stride = width;
  p.k_cache = dk.as<uint16_t>();
  p.v_cache = dv.as<uint16_t>();
  p.context = context;
  p.out = out.as<float>();
  p.out_stride = width;
  p.pos = dpos.as<int32_t>();
  p.n_tokens = 1;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.max_keys = kShortDecodeMaxKeys;
  if (follow) {
    p.tree_start = s.prefix;
    p.path_parents = dparents.as<int32_t>();
    p.path_self = self;
  }
  attention(p, nullptr);
  return test::to_host<float>(out, size_t(width));
}

TEST(TreePathAttention, EachRowAttendsAsItsPathLaidOutInOrder) {
  for (const PathShape s : {PathShape{37, 40, 9, 3, 64}, PathShape{300, 64, 32, 8, 128}}) {
    SCOPED_TRACE("tree of " + std::to_string(s.nodes) + " after " + std::to_string(s.prefix) + ", head_dim " +
                 std::to_string(s.head_dim));
    AttentionParams shape;
    shape.n_tokens = 1;
    shape.max_keys = kShortDecodeMaxKeys;
    shape.n_heads = s.n_heads;
    shape.n_kv_heads = s.n_kv_heads;
    shape.head_dim = s.head_dim;
    if (!attention_follows_tree_paths(shape)) GTEST_SKIP() << "the short-context decode needs sm_90 or newer";
    const int64_t context = 512;
    const size_t kv_width = size_t(s.n_kv_heads * s.head_dim);
    std::mt19937_64 gen(uint64_t(s.nodes * 7 + s.prefix));
    std::vector<int32_t> parents(size_t(s.nodes), -1);  // a bushy tree: each entry under a random earlier one
    for (int64_t i = 1; i < s.nodes; ++i) parents[size_t(i)] = int32_t(gen() % uint64_t(i));
    std::vector<std::vector<float>> keys, values;
    for (int64_t t = 0; t < s.prefix + s.nodes; ++t) {
      keys.push_back(test::random_floats(kv_width, -1.0f, 1.0f));
      values.push_back(test::random_floats(kv_width, -1.0f, 1.0f));
    }
    const Cache tree = make_cache(s, context, keys, values);
    const auto q = test::random_floats(size_t(s.n_heads * s.head_dim), -2.0f, 2.0f);
    int parted = 0;  // rows whose path is not already consecutive: there the mapping must matter
    for (int32_t row = 0; row < int32_t(s.nodes); ++row) {
      std::vector<int32_t> path;
      for (int32_t a = row; a >= 0; a = parents[size_t(a)]) path.insert(path.begin(), a);
      // The accepted path's layout: the prefix, then the path's entries in order.
      std::vector<std::vector<float>> path_keys(keys.begin(), keys.begin() + s.prefix), path_values(values.begin(), values.begin() + s.prefix);
      for (const int32_t a : path) {
        path_keys.push_back(keys[size_t(s.prefix + a)]);
        path_values.push_back(values[size_t(s.prefix + a)]);
      }
      const int64_t path_pos = s.prefix + int64_t(path.size()) - 1;
      const std::vector<float> want = attend(s, context, make_cache(s, context, path_keys, path_values), q, parents, row, path_pos, false);
      const std::vector<float> got = attend(s, context, tree, q, parents, row, path_pos, true);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "row " << row << " of path length " << path.size();
      bool consecutive = true;
      for (size_t k = 0; k < path.size(); ++k) consecutive = consecutive && path[k] == int32_t(k);
      if (!consecutive) {
        ++parted;
        const std::vector<float> unmapped = attend(s, context, tree, q, parents, row, path_pos, false);
        EXPECT_NE(std::memcmp(unmapped.data(), want.data(), unmapped.size() * 4), 0)
            << "row " << row << ": the tree's own layout gives the path's numbers; this test shows nothing there";
      }
    }
    EXPECT_GT(parted, 0) << "every row's path was consecutive";
  }
}

}  // namespace
}  // namespace nt
