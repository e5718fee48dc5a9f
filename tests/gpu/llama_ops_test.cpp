// RMSNorm (+ q8 output), RoPE with the KV-cache write, SwiGLU and argmax
// against float64 CPU versions.
#include <gtest/gtest.h>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "backend/cuda/kernels/quantized_gemm.h"
#include "gpu_test_util.h"
#include "model/rope.h"
#include "runtime/model_runner.h"

namespace nt {
namespace {

// Shapes of prefill (one block per row, its warps looping over 18 groups of
// 32) and of decode (a row in slices of blocks; 800 = 25 groups makes slices
// of 7, 7, 7 and 4).
class RmsNorm : public testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(RmsNorm, MatchesReferenceAndQuantizesItsOutput) {
  const auto [rows, dim] = GetParam();
  const float eps = 1e-5f;
  const auto x = test::random_floats(size_t(rows * dim), -4.0f, 4.0f);
  const auto weight = test::random_floats(size_t(dim), 0.5f, 1.5f);
  const DeviceBuffer dx = test::to_device(x), dw = test::to_device(weight);
  DeviceBuffer out = test::poisoned(x.size() * 4), q8 = test::poisoned(x.size()), scales = test::poisoned(x.size() / 32 * 8);
  rms_norm(dx.as<float>(), dw.as<float>(), rows, dim, eps, out.as<float>(), q8.as<int8_t>(), scales.as<float2>(), nullptr);
  const auto got = test::to_host<float>(out, x.size());
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(r * dim + i)]) * x[size_t(r * dim + i)];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) ref[size_t(r * dim + i)] = x[size_t(r * dim + i)] * inv * weight[size_t(i)];
  }
  EXPECT_LT(test::relative_error(got, ref), 1e-6);
  // The q8 form is the q8 rule applied to exactly the f32 output.
  const auto q = test::to_host<int8_t>(q8, x.size());
  const auto s = test::to_host<float>(scales, x.size() / 32 * 2);
  const auto want = test::quantize_q8(got);
  EXPECT_EQ(q, want.q);
  for (size_t b = 0; b < want.d.size(); ++b) EXPECT_FLOAT_EQ(s[2 * b], want.d[b]);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNorm,
                         testing::Values(std::pair<int64_t, int64_t>{5, 576}, std::pair<int64_t, int64_t>{1, 800},
                                         std::pair<int64_t, int64_t>{1, 4096}, std::pair<int64_t, int64_t>{3, 8192},
                                         std::pair<int64_t, int64_t>{600, 576}),
                         [](const auto& info) { return std::to_string(info.param.first) + "x" + std::to_string(info.param.second); });

// The one-launch RMSNorm to super-block activations writes exactly what the
// two launches it replaces do (rms_norm to f32, then quantize_super_blocks),
// over slices of a decode row, rows of many sequences, and slices whose group
// count rounds up to whole super-blocks (50 x 6144: 10 groups to 16).
TEST(RmsNorm, SuperBlockFormIsTheTwoLaunchesBitForBit) {
  for (const auto& [rows, dim] : {std::pair<int64_t, int64_t>{1, 8192}, {3, 4096}, {64, 8192}, {50, 6144}, {600, 256}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << dim);
    const size_t n = size_t(rows * dim);
    const DeviceBuffer x = test::to_device(test::random_floats(n, -4.0f, 4.0f));
    const DeviceBuffer w = test::to_device(test::random_floats(size_t(dim), 0.5f, 1.5f));
    DeviceBuffer normed(n * 4, "normed");
    DeviceBuffer want_q8 = test::poisoned(n), want_scales = test::poisoned(n / 256 * 4), want_sums = test::poisoned(n / 16 * 2);
    rms_norm(x.as<float>(), w.as<float>(), rows, dim, 1e-5f, normed.as<float>(), nullptr, nullptr, nullptr);
    quantize_super_blocks(normed.as<float>(), rows, dim, want_q8.as<int8_t>(), want_scales.as<float>(),
                          want_sums.as<uint16_t>(), nullptr);
    DeviceBuffer q8 = test::poisoned(n), scales = test::poisoned(n / 256 * 4), sums = test::poisoned(n / 16 * 2);
    rms_norm_super_blocks(x.as<float>(), w.as<float>(), rows, dim, 1e-5f,
                          {q8.as<int8_t>(), scales.as<float>(), sums.as<uint16_t>()}, nullptr);
    EXPECT_EQ(test::to_host<int8_t>(q8, n), test::to_host<int8_t>(want_q8, n));
    EXPECT_EQ(test::to_host<uint32_t>(scales, n / 256), test::to_host<uint32_t>(want_scales, n / 256));
    EXPECT_EQ(test::to_host<uint16_t>(sums, n / 16), test::to_host<uint16_t>(want_sums, n / 16));
  }
}

TEST(RopeAndStoreKv, RotatesAdjacentPairsAndFillsTheCache) {
  ModelSpec c;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.rope_dim = 12;  // partial rotation: the last two pairs pass through
  c.rope_theta = 10000.0f;
  const int64_t tokens = 5, context = 64, pos = 37;
  const int64_t width = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, stride = width + 8;
  const auto inv_freq = rope_inv_freqs(c, nullptr);
  const auto qkv = test::random_floats(size_t(tokens * stride));
  DeviceBuffer dqkv = test::to_device(qkv);
  const DeviceBuffer dfreq = test::to_device(inv_freq), dpos = test::to_device(std::vector<int32_t>{int32_t(pos)});
  const size_t cache_elems = size_t(c.n_kv_heads * context * c.head_dim);
  DeviceBuffer kc = test::poisoned(cache_elems * 2), vc = test::poisoned(cache_elems * 2);
  RopeKvParams p;
  p.qkv = dqkv.as<float>();
  p.qkv_stride = stride;
  p.n_tokens = tokens;
  p.pos = dpos.as<int32_t>();
  p.inv_freq = dfreq.as<float>();
  p.rope_pairs = int(c.rope_dim / 2);
  p.n_heads = int(c.n_heads);
  p.n_kv_heads = int(c.n_kv_heads);
  p.head_dim = int(c.head_dim);
  p.k_cache = kc.as<uint16_t>();
  p.v_cache = vc.as<uint16_t>();
  p.context = context;
  rope_and_store_kv(p, nullptr);
  const auto q_out = test::to_host<float>(dqkv, qkv.size());
  const auto k_out = test::to_host<uint16_t>(kc, cache_elems), v_out = test::to_host<uint16_t>(vc, cache_elems);

  auto rotated = [&](int64_t t, int64_t offset, int64_t d) {  // element d of the head at `offset` in token t
    const double x0 = qkv[size_t(t * stride + offset + (d & ~1))], x1 = qkv[size_t(t * stride + offset + (d | 1))];
    if (d / 2 >= c.rope_dim / 2) return d % 2 ? x1 : x0;
    const double angle = double(pos + t) * double(inv_freq[size_t(d / 2)]);
    return d % 2 ? x0 * std::sin(angle) + x1 * std::cos(angle) : x0 * std::cos(angle) - x1 * std::sin(angle);
  };
  std::vector<float> got_q, got_k, got_v;
  std::vector<double> want_q, want_k, want_v;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < c.n_heads * c.head_dim; ++i) {
      got_q.push_back(q_out[size_t(t * stride + i)]);
      want_q.push_back(rotated(t, (i / c.head_dim) * c.head_dim, i % c.head_dim));
    }
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      for (int64_t d = 0; d < c.head_dim; ++d) {
        got_k.push_back(fp16_to_fp32(k_out[size_t(k_cache_index(h, pos + t, d, context, c.head_dim))]));
        got_v.push_back(fp16_to_fp32(v_out[size_t(v_cache_index(h, pos + t, d, context, c.head_dim))]));
        want_k.push_back(rotated(t, (c.n_heads + h) * c.head_dim, d));
        want_v.push_back(qkv[size_t(t * stride + (c.n_heads + c.n_kv_heads + h) * c.head_dim + d)]);
      }
    }
  }
  EXPECT_LT(test::relative_error(got_q, want_q), 1e-5);
  EXPECT_LT(test::relative_error(got_k, want_k), 1e-3);  // f16 cache
  EXPECT_LT(test::relative_error(got_v, want_v), 1e-3);
  // Columns after the q/k/v block (the stride padding) are untouched.
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = width; i < stride; ++i) EXPECT_EQ(q_out[size_t(t * stride + i)], qkv[size_t(t * stride + i)]);
  }
}

TEST(Swiglu, MatchesReference) {
  const auto g = test::random_floats(1000, -6.0f, 6.0f), u = test::random_floats(1000);
  const DeviceBuffer dg = test::to_device(g), du = test::to_device(u);
  DeviceBuffer h = test::poisoned(4000);
  swiglu(dg.as<float>(), du.as<float>(), 1000, h.as<float>(), nullptr);
  const auto got = test::to_host<float>(h, 1000);
  std::vector<double> ref;
  for (size_t i = 0; i < g.size(); ++i) ref.push_back(double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i]);
  EXPECT_LT(test::relative_error(got, ref), 1e-5);
}

// Against argmax_first (the CPU backend's greedy rule): ties across and
// within the first pass's chunks, rows shorter and longer than a chunk,
// NaN, and rows with nothing above -inf.
TEST(Argmax, MatchesTheFirstLargestRule) {
  const int64_t rows = 6, n = 50000;  // 13 chunks of 4096, the last partial
  auto x = test::random_floats(size_t(rows * n));
  x[size_t(0 * n + 777)] = 5.0f;
  x[size_t(1 * n + 12)] = 5.0f;  // a tie in different chunks: the first wins
  x[size_t(1 * n + 40000)] = 5.0f;
  x[size_t(2 * n + n - 1)] = 7.0f;   // the last element, in the partial chunk
  x[size_t(2 * n + 4095)] = 6.0f;
  x[size_t(2 * n + 4096)] = 6.0f;
  x[size_t(3 * n + 0)] = 2.0f;
  x[size_t(3 * n + 1)] = NAN;
  x[size_t(4 * n + 300)] = 3.0f;  // a tie inside one chunk, on different threads
  x[size_t(4 * n + 299)] = 3.0f;
  std::fill(x.begin() + 5 * n, x.end(), -INFINITY);
  x[size_t(5 * n + 9)] = NAN;
  for (const int64_t len : {n, int64_t(4096), int64_t(100), int64_t(1)}) {
    SCOPED_TRACE(testing::Message() << "row length " << len);
    std::vector<float> xs;
    for (int64_t r = 0; r < rows; ++r) xs.insert(xs.end(), x.begin() + r * n, x.begin() + r * n + len);
    std::vector<int32_t> want;
    for (int64_t r = 0; r < rows; ++r) want.push_back(argmax_first(std::span(xs).subspan(size_t(r * len), size_t(len))));
    const DeviceBuffer dx = test::to_device(xs);
    DeviceBuffer out = test::poisoned(rows * 4), scratch(argmax_scratch_bytes(rows, len), "argmax scratch");
    argmax_rows(dx.as<float>(), rows, len, out.as<int32_t>(), scratch.get(), nullptr);
    EXPECT_EQ(test::to_host<int32_t>(out, rows), want);
  }
  EXPECT_EQ(argmax_first(std::span(x).first(size_t(n))), 777);
  EXPECT_EQ(argmax_first(std::span(x).subspan(size_t(n), size_t(n))), 12);
  EXPECT_EQ(argmax_first(std::span(x).subspan(size_t(2 * n), size_t(n))), int32_t(n - 1));
  EXPECT_EQ(argmax_first(std::span(x).subspan(size_t(5 * n), size_t(n))), 0);
}

}  // namespace
}  // namespace nt
