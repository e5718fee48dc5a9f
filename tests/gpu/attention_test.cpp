// Causal GQA attention over the f16 cache against float64 softmax attention,
// for decode and prefill shapes, split and unsplit key ranges.
#include <gtest/gtest.h>

#include "backend/cuda/attention.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct Shape {
  int64_t tokens, pos;
  int n_heads, n_kv_heads, head_dim;
  int splits;
};

double run_attention(const Shape& s) {
  const int64_t context = (s.pos + s.tokens + 40 + kKvTile - 1) / kKvTile * kKvTile;
  const int64_t q_stride = int64_t(s.n_heads) * s.head_dim + 24, out_stride = int64_t(s.n_heads) * s.head_dim + 8;
  const auto q = test::random_floats(size_t(s.tokens * q_stride), -2.0f, 2.0f);
  // Positions past the last visible key hold large values: any leak through
  // the causal mask dominates the softmax.
  std::vector<uint16_t> k(size_t(s.n_kv_heads * context * s.head_dim)), v(k.size());
  const auto kv = test::random_floats(2 * k.size(), -2.0f, 2.0f);
  for (int h = 0; h < s.n_kv_heads; ++h) {
    for (int64_t t = 0; t < context; ++t) {
      for (int d = 0; d < s.head_dim; ++d) {
        const size_t i = size_t((h * context + t) * s.head_dim + d);
        const bool hidden = t >= s.pos + s.tokens;
        k[size_t(k_cache_index(h, t, d, context, s.head_dim))] = fp32_to_fp16(hidden ? 30.0f : kv[i]);
        v[size_t(v_cache_index(h, t, d, context, s.head_dim))] = fp32_to_fp16(hidden ? 1000.0f : kv[k.size() + i]);
      }
    }
  }
  const DeviceBuffer dq = test::to_device(q), dk = test::to_device(k), dv = test::to_device(v);
  const DeviceBuffer dpos = test::to_device(std::vector<int32_t>{int32_t(s.pos)});
  DeviceBuffer out = test::poisoned(size_t(s.tokens * out_stride) * 4);
  DeviceBuffer partials(std::max<size_t>(4, attention_partials_floats(s.tokens, s.n_heads, s.head_dim, s.splits) * 4), "partials");
  AttentionParams p;
  p.q = dq.as<float>();
  p.q_stride = q_stride;
  p.k_cache = dk.as<uint16_t>();
  p.v_cache = dv.as<uint16_t>();
  p.context = context;
  p.out = out.as<float>();
  p.out_stride = out_stride;
  p.pos = dpos.as<int32_t>();
  p.n_tokens = s.tokens;
  p.n_heads = s.n_heads;
  p.n_kv_heads = s.n_kv_heads;
  p.head_dim = s.head_dim;
  p.n_splits = s.splits;
  p.partials = partials.as<float>();
  attention(p, nullptr);
  const auto got_all = test::to_host<float>(out, size_t(s.tokens * out_stride));

  std::vector<float> got;
  std::vector<double> ref;
  const int group = s.n_heads / s.n_kv_heads;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t last = s.pos + t;
    for (int h = 0; h < s.n_heads; ++h) {
      const int kvh = h / group;
      std::vector<double> w(size_t(last + 1));
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j <= last; ++j) {
        double dot = 0.0;
        for (int d = 0; d < s.head_dim; ++d) {
          dot += double(q[size_t(t * q_stride + h * s.head_dim + d)]) *
                 fp16_to_fp32(k[size_t(k_cache_index(kvh, j, d, context, s.head_dim))]);
        }
        w[size_t(j)] = dot / std::sqrt(double(s.head_dim));
        m = std::max(m, w[size_t(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - m));
      for (int d = 0; d < s.head_dim; ++d) {
        double o = 0.0;
        for (int64_t j = 0; j <= last; ++j) o += w[size_t(j)] * fp16_to_fp32(v[size_t(v_cache_index(kvh, j, d, context, s.head_dim))]);
        ref.push_back(o / sum);
        got.push_back(got_all[size_t(t * out_stride + h * s.head_dim + d)]);
      }
    }
  }
  return test::relative_error(got, ref);
}

TEST(Attention, MatchesReference) {
  for (const Shape s : {
           Shape{1, 0, 8, 2, 64, 1},      // first token: one key
           Shape{1, 100, 32, 8, 128, 1},  // decode, GQA 4
           Shape{1, 1000, 32, 8, 128, 7}, // decode, split key range
           Shape{1, 300, 64, 8, 128, 33}, // 70B-like group of 8, more splits than useful
           Shape{1, 77, 9, 3, 64, 1},     // SmolLM2 decode: 2 dims per lane, group 3
           Shape{1, 500, 8, 1, 256, 5},   // head_dim 256, group 8: decode's largest shared memory
           Shape{1, 40, 8, 4, 8, 2},      // head_dim 8: decode through the generic kernel
           Shape{37, 0, 8, 2, 64, 1},     // prefill from empty
           Shape{70, 50, 16, 2, 128, 1},  // prefill after a prefix, group 8: 4 tokens per tile
           Shape{20, 200, 9, 3, 64, 3},   // SmolLM2 heads, split prefill
           Shape{13, 5, 8, 4, 8, 1},      // stories260K-sized heads
           Shape{3, 64, 4, 4, 256, 2},    // no GQA, head_dim 256 (large shared memory)
       }) {
    SCOPED_TRACE(testing::Message() << "tokens=" << s.tokens << " pos=" << s.pos << " heads=" << s.n_heads << "/"
                                    << s.n_kv_heads << " head_dim=" << s.head_dim << " splits=" << s.splits);
    EXPECT_LT(run_attention(s), 1e-4);
  }
}

TEST(Attention, SplitsFillTheGpuAndStayUseful) {
  EXPECT_GT(attention_splits(1, 32, 8, 128, 8192, 132), 8);
  EXPECT_EQ(attention_splits(1, 32, 8, 128, 10, 132), 1);
  EXPECT_EQ(attention_splits(512, 32, 8, 128, 8192, 132), 1);
}

}  // namespace
}  // namespace nt
