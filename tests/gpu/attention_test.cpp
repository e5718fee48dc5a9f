// Causal GQA attention over the f16 cache against float64 softmax attention,
// for decode and prefill shapes, split and unsplit key ranges, windows and
// sinks, on every path: the decode kernel, the tensor-core prefill kernel and
// the generic one.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/kernels/attention.h"
#include "gpu_test_util.h"
#include "model/arch/model_spec.h"
#include "model/rope.h"

namespace nt {
namespace {

struct Shape {
  int64_t tokens, pos;
  int n_heads, n_kv_heads, head_dim;
  int splits;
  bool odd_q_stride = false;  // rows of q not 16-byte aligned: the f32 kernels take even head_dim 64/128
  int fused_rope_pairs = -1;  // >= 0: one token whose RoPE, cache store and q8 output the launch does
  int64_t max_keys = 0;       // > 0: the caller's bound on the keys (the short-context decode below kShortDecodeMaxKeys)
  bool paged = false;         // the cache in a pool of pages (kv_layout.h), scattered, the unused ones NaN
  int window = 0;             // > 0: a query at p sees keys from p - window + 1 on (AttentionParams::window)
  float scale = 0.0f;         // > 0: the softmax scale instead of 1/sqrt(head_dim)
  // Attention sinks (AttentionParams::sinks): a logit per head in the
  // reference's softmax, and in the launch unless `kernel_sinks` is false
  // (a check that forgetting them would be seen).
  bool sinks = false;
  bool kernel_sinks = true;
};

// `s` with attention sinks.
Shape with_sinks(Shape s, bool in_kernel = true) {
  s.sinks = true;
  s.kernel_sinks = in_kernel;
  return s;
}

// `s` within a sliding window, at another softmax scale.
Shape windowed(Shape s, int window, float scale) {
  s.window = window;
  s.scale = scale;
  return s;
}

// Rotates pair (x0, x1) of dims (2i, 2i + 1) by pos * inv_freq[i], in double.
std::pair<double, double> rotate(double x0, double x1, int64_t pos, float inv_freq) {
  const double a = double(pos) * double(inv_freq);
  return {x0 * std::cos(a) - x1 * std::sin(a), x0 * std::sin(a) + x1 * std::cos(a)};
}

double run_attention(const Shape& s) {
  const int64_t context = (s.pos + s.tokens + 40 + kKvTile - 1) / kKvTile * kKvTile;
  const int64_t q_stride = int64_t(s.n_heads) * s.head_dim + (s.odd_q_stride ? 25 : 24), out_stride = int64_t(s.n_heads) * s.head_dim + 8;
  const auto q = test::random_floats(size_t(s.tokens * q_stride), -2.0f, 2.0f);
  const bool fused = s.fused_rope_pairs >= 0;
  ModelSpec rope_config;
  rope_config.head_dim = s.head_dim;
  rope_config.rope_dim = 2 * std::max(s.fused_rope_pairs, 0);
  rope_config.rope_theta = 500000.0f;
  const auto inv_freq = rope_inv_freqs(rope_config, nullptr);
  // Fused: the raw key and value of the new token; its cache slot starts as
  // NaN, which any use of the stale slot would spread to the output.
  const auto new_kv = test::random_floats(size_t(2 * s.n_kv_heads * s.head_dim), -2.0f, 2.0f);
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
        if (fused && t == s.pos) k[size_t(k_cache_index(h, t, d, context, s.head_dim))] = v[size_t(v_cache_index(h, t, d, context, s.head_dim))] = 0xffff;
      }
    }
  }
  // The reference reads K and V row-major in float; fused, with the new
  // token's rotated key and its value (rounded to f16 as the cache holds them)
  // and rotated queries.
  std::vector<float> kf(k.size()), vf(v.size());
  std::vector<double> new_k_ref(size_t(s.n_kv_heads * s.head_dim));
  for (int h = 0; h < s.n_kv_heads; ++h) {
    for (int d = 0; d < s.head_dim; d += 2) {
      const float* kr = new_kv.data() + h * s.head_dim;
      const auto [r0, r1] = d / 2 < s.fused_rope_pairs ? rotate(kr[d], kr[d + 1], s.pos, inv_freq[size_t(d / 2)])
                                                       : std::pair<double, double>{kr[d], kr[d + 1]};
      new_k_ref[size_t(h * s.head_dim + d)] = r0;
      new_k_ref[size_t(h * s.head_dim + d + 1)] = r1;
    }
    for (int64_t t = 0; t < context; ++t) {
      for (int d = 0; d < s.head_dim; ++d) {
        const size_t i = size_t((h * context + t) * s.head_dim + d);
        kf[i] = fp16_to_fp32(k[size_t(k_cache_index(h, t, d, context, s.head_dim))]);
        vf[i] = fp16_to_fp32(v[size_t(v_cache_index(h, t, d, context, s.head_dim))]);
        if (fused && t == s.pos) {
          kf[i] = fp16_to_fp32(fp32_to_fp16(float(new_k_ref[size_t(h * s.head_dim + d)])));
          vf[i] = fp16_to_fp32(fp32_to_fp16(new_kv[size_t((s.n_kv_heads + h) * s.head_dim + d)]));
        }
      }
    }
  }
  // Paged: logical page i at physical page 2 * (pages - i) of a pool of
  // 2 * pages + 1 (backwards, with a NaN page between any two).
  const int64_t n_pages = context / kKvTile;
  std::vector<int32_t> table;
  for (int64_t i = 0; i < n_pages; ++i) table.push_back(int32_t(2 * (n_pages - i)));
  const KvPaging host_paging{s.paged ? table.data() : nullptr, int64_t(s.n_kv_heads) * kKvTile * s.head_dim};
  const auto k_at = [&](int h, int64_t t, int d) { return size_t(paged_k_index(host_paging, h, t, d, context, s.head_dim)); };
  const auto v_at = [&](int h, int64_t t, int d) { return size_t(paged_v_index(host_paging, h, t, d, context, s.head_dim)); };
  if (s.paged) {
    std::vector<uint16_t> k_pool(size_t((2 * n_pages + 1) * host_paging.page_stride), 0xffff), v_pool(k_pool);
    for (int h = 0; h < s.n_kv_heads; ++h) {
      for (int64_t t = 0; t < context; ++t) {
        for (int d = 0; d < s.head_dim; ++d) {
          k_pool[k_at(h, t, d)] = k[size_t(k_cache_index(h, t, d, context, s.head_dim))];
          v_pool[v_at(h, t, d)] = v[size_t(v_cache_index(h, t, d, context, s.head_dim))];
        }
      }
    }
    k = std::move(k_pool);
    v = std::move(v_pool);
  }
  std::vector<float> q_ref = q;
  if (fused) {
    for (int h = 0; h < s.n_heads; ++h) {
      for (int d = 0; d < 2 * s.fused_rope_pairs; d += 2) {
        float* qr = q_ref.data() + h * s.head_dim;
        const auto [r0, r1] = rotate(qr[d], qr[d + 1], s.pos, inv_freq[size_t(d / 2)]);
        qr[d] = float(r0);
        qr[d + 1] = float(r1);
      }
    }
  }
  // Sinks about as large as the scores' maxima, so that they take a share
  // of every softmax that varies by head and row.
  const auto sinks = test::random_floats(size_t(s.n_heads), 2.0f, 6.0f);
  const DeviceBuffer dsinks = test::to_device(sinks);
  const DeviceBuffer dq = test::to_device(q), dk = test::to_device(k), dv = test::to_device(v), dtable = test::to_device(table);
  const DeviceBuffer dfreq = test::to_device(inv_freq.empty() ? std::vector<float>{0.0f} : inv_freq), dnew = test::to_device(new_kv);
  DeviceBuffer q8 = test::poisoned(size_t(s.n_heads * s.head_dim)), q8_scales = test::poisoned(size_t(s.n_heads * s.head_dim / 32) * 8);
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
  p.max_keys = s.max_keys;
  p.window = s.window;
  p.scale = s.scale;
  if (s.sinks && s.kernel_sinks) p.sinks = dsinks.as<float>();
  if (s.paged) p.paging = {dtable.as<int32_t>(), host_paging.page_stride};
  if (fused) {
    EXPECT_TRUE(attention_decode_fusion_supported(p));
    p.rope = {dfreq.as<float>(), s.fused_rope_pairs, dnew.as<float>(), dnew.as<float>() + s.n_kv_heads * s.head_dim,
              dk.as<uint16_t>(), dv.as<uint16_t>()};
    p.out_q8 = q8.as<int8_t>();
    p.out_q8_scales = q8_scales.as<float2>();
  }
  attention(p, nullptr);
  const auto got_all = test::to_host<float>(out, size_t(s.tokens * out_stride));
  if (fused) {  // the new key and value landed in the cache; the q8 output is the f32 output quantized
    const auto k_out = test::to_host<uint16_t>(dk, k.size()), v_out = test::to_host<uint16_t>(dv, v.size());
    std::vector<float> got_k, got_v;
    std::vector<double> want_v;
    for (int h = 0; h < s.n_kv_heads; ++h) {
      for (int d = 0; d < s.head_dim; ++d) {
        got_k.push_back(fp16_to_fp32(k_out[k_at(h, s.pos, d)]));
        got_v.push_back(fp16_to_fp32(v_out[v_at(h, s.pos, d)]));
        want_v.push_back(new_kv[size_t((s.n_kv_heads + h) * s.head_dim + d)]);
      }
    }
    EXPECT_LT(test::relative_error(got_k, new_k_ref), 1e-3);  // f16 cache
    EXPECT_LT(test::relative_error(got_v, want_v), 1e-3);
    const test::Q8 want = test::quantize_q8(std::vector<float>(got_all.begin(), got_all.begin() + s.n_heads * s.head_dim));
    const auto got_q = test::to_host<int8_t>(q8, want.q.size());
    const auto got_ds = test::to_host<float2>(q8_scales, want.d.size());
    int mismatches = 0;
    for (size_t i = 0; i < want.q.size(); ++i) mismatches += got_q[i] != want.q[i];
    for (size_t b = 0; b < want.d.size(); ++b) mismatches += got_ds[b].x != want.d[b] || got_ds[b].y != want.s[b];
    EXPECT_EQ(mismatches, 0);
  }

  std::vector<float> got;
  std::vector<double> ref;
  const int group = s.n_heads / s.n_kv_heads;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t last = s.pos + t;
    for (int h = 0; h < s.n_heads; ++h) {
      const int kvh = h / group;
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, last - s.window + 1) : 0;
      const double scale = s.scale > 0.0f ? double(s.scale) : 1.0 / std::sqrt(double(s.head_dim));
      std::vector<double> w(size_t(last + 1), -INFINITY);
      double m = -INFINITY, sum = 0.0;
      const float* qr = q_ref.data() + t * q_stride + h * s.head_dim;
      for (int64_t j = first; j <= last; ++j) {
        const float* kr = kf.data() + (kvh * context + j) * s.head_dim;
        double dot = 0.0;
        for (int d = 0; d < s.head_dim; ++d) dot += double(qr[d]) * kr[d];
        w[size_t(j)] = dot * scale;
        m = std::max(m, w[size_t(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - m));
      if (s.sinks) sum += std::exp(double(sinks[size_t(h)]) - m);  // joins the denominator, weighs no value
      std::vector<double> o(size_t(s.head_dim), 0.0);
      for (int64_t j = 0; j <= last; ++j) {
        const float* vr = vf.data() + (kvh * context + j) * s.head_dim;
        for (int d = 0; d < s.head_dim; ++d) o[size_t(d)] += w[size_t(j)] * vr[d];
      }
      for (int d = 0; d < s.head_dim; ++d) {
        ref.push_back(o[size_t(d)] / sum);
        got.push_back(got_all[size_t(t * out_stride + h * s.head_dim + d)]);
      }
    }
  }
  return test::relative_error(got, ref);
}

std::string describe(const Shape& s) {
  return testing::PrintToString(s.tokens) + " tokens at pos " + testing::PrintToString(s.pos) + ", heads " +
         testing::PrintToString(s.n_heads) + "/" + testing::PrintToString(s.n_kv_heads) + ", head_dim " +
         testing::PrintToString(s.head_dim) + ", splits " + testing::PrintToString(s.splits);
}

// Decode kernel and generic kernel: f32 arithmetic on the f16 cache.
TEST(Attention, MatchesReference) {
  for (const Shape s : {
           Shape{1, 0, 8, 2, 64, 1, true},      // first token: one key
           Shape{1, 100, 32, 8, 128, 1, true},  // decode, GQA 4
           Shape{1, 1000, 32, 8, 128, 7, true}, // decode, split key range
           Shape{1, 300, 64, 8, 128, 33, true}, // 70B-like group of 8, more splits than useful
           Shape{1, 77, 9, 3, 64, 1, true},     // SmolLM2 decode: 2 dims per lane, group 3
           Shape{1, 500, 8, 1, 256, 5},         // head_dim 256, group 8: decode's largest shared memory
           Shape{1, 40, 8, 4, 8, 2},            // head_dim 8: decode through the generic kernel
           Shape{13, 5, 8, 4, 8, 1},            // stories260K-sized heads: generic prefill
           Shape{3, 64, 4, 4, 256, 2},          // no GQA, head_dim 256 (large shared memory), generic split prefill
           Shape{40, 9, 6, 2, 32, 1},           // head_dim 32: generic prefill
           Shape{20, 200, 9, 3, 64, 3, true},   // SmolLM2 heads, generic split prefill
       }) {
    SCOPED_TRACE(describe(s));
    EXPECT_LT(run_attention(s), 1e-4);
  }
}

// Tensor cores (head_dim 64 and 128, prefill and decode): queries and
// probabilities are rounded to f16 (relative 2^-11 each), so outputs carry
// ~1e-3 relative error against the float64 reference; a leak through the
// causal mask or a lost tile costs far more than 5e-3.
TEST(Attention, TensorCoresMatchReference) {
  for (const Shape s : {
           Shape{1, 0, 8, 2, 64, 1},        // first token: one key
           Shape{1, 100, 32, 8, 128, 1},    // 8B decode, GQA 4
           Shape{1, 1000, 32, 8, 128, 7},   // decode, split key range, merged in the launch
           Shape{1, 300, 64, 8, 128, 33},   // 70B-like group of 8, more splits than useful
           Shape{1, 77, 9, 3, 64, 1},       // SmolLM2 decode
           Shape{1, 50, 16, 1, 64, 1},      // decode, group 16
           Shape{7, 0, 8, 8, 64, 1},        // no GQA, a part of one query tile
           Shape{37, 0, 8, 2, 64, 1},       // prefill from empty
           Shape{64, 0, 32, 8, 128, 1},     // 8B heads: exactly 4 query tiles of 16 tokens
           Shape{100, 37, 9, 3, 64, 1},     // SmolLM2 heads, group 3: 21 tokens (63 rows) per tile
           Shape{70, 50, 16, 2, 128, 1},    // group 8: 8 tokens per tile, after a prefix
           Shape{300, 200, 16, 2, 128, 1},  // many key tiles, the causal edge inside tiles
           Shape{300, 0, 32, 8, 128, 3},    // split key ranges
           Shape{100, 500, 16, 2, 128, 7},  // long prefix, 7 splits
           Shape{7, 1000, 32, 8, 128, 5},   // few tokens after a long prefix
           Shape{20, 0, 8, 2, 64, 9},       // more splits than key tiles: empty ranges
           Shape{65, 31, 4, 4, 128, 2},     // a last tile of one token, split
           Shape{20, 200, 9, 3, 64, 3},     // SmolLM2 heads, split prefill
           Shape{3, 10, 64, 1, 128, 1},     // group 64: one token per tile
       }) {
    SCOPED_TRACE(describe(s));
    EXPECT_LT(run_attention(s), 5e-3);
  }
}

// Split decodes merge in their last block through a counter that must return
// to 0 after each launch: back-to-back launches of several shapes stay exact,
// on the tensor-core path and the decode kernel.
TEST(Attention, SplitDecodeRepeats) {
  for (int i = 0; i < 3; ++i) {
    for (const Shape s : {Shape{1, 1000, 32, 8, 128, 16}, Shape{1, 4000, 9, 3, 64, 40}, Shape{1, 100, 8, 8, 128, 3}}) {
      SCOPED_TRACE(describe(s));
      EXPECT_LT(run_attention(s), 5e-3);
      Shape f32 = s;
      f32.odd_q_stride = true;
      EXPECT_LT(run_attention(f32), 1e-4);
    }
  }
}

// One-token launches that also rotate the raw query and new key, store the
// new key and value in the cache (the slot starts as NaN) and write the
// output as q8: split (merged in the launch) and unsplit, full and partial
// rotation, repeated so the split counters are seen to reset.
TEST(Attention, DecodeFoldsRopeCacheStoreAndQ8Output) {
  for (int i = 0; i < 2; ++i) {
    for (const Shape s : {Shape{1, 0, 8, 2, 64, 1, false, 32},      // first token, one split
                          Shape{1, 100, 32, 8, 128, 1, false, 64},  // 8B decode, unsplit
                          Shape{1, 520, 32, 8, 128, 33, false, 64}, // 8B decode graph at 512+: 33 splits, 9 with keys
                          Shape{1, 63, 32, 8, 128, 4, false, 64},   // the new key is a tile's last
                          Shape{1, 64, 32, 8, 128, 4, false, 64},   // and a tile's first
                          Shape{1, 1000, 64, 8, 128, 20, false, 60},// group 8, partial rotation
                          Shape{1, 77, 9, 3, 64, 3, false, 32}}) {  // SmolLM2 heads, group 3
      SCOPED_TRACE(describe(s));
      EXPECT_LT(run_attention(s), 5e-3);
    }
  }
}

// Short contexts: a cluster of blocks per query head, no split partials;
// fused and not, the first and last positions it takes, tile edges, head_dim
// 128 (group 4 and 8, partial rotation) and 64 (SmolLM2's group 3). f32
// arithmetic on the f16 cache: 1e-4 unfused; fused, the RoPE angle
// float(pos) * inv_freq (as every RoPE path of the engine computes it)
// costs up to ~3e-4 against the float64 rotation.
TEST(Attention, ShortContextDecodeMatchesReference) {
  if (!cuda::device_is_hopper_or_newer()) GTEST_SKIP() << "thread-block clusters need sm_90; older GPUs decode with the split kernel";
  const int64_t m = kShortDecodeMaxKeys;
  for (int i = 0; i < 2; ++i) {
    for (const Shape s : {Shape{1, 0, 32, 8, 128, 1, false, 64, m}, Shape{1, 63, 32, 8, 128, 1, false, 64, m},
                          Shape{1, 64, 32, 8, 128, 1, false, 64, m}, Shape{1, 520, 32, 8, 128, 1, false, 64, m},
                          Shape{1, m - 1, 32, 8, 128, 1, false, 64, m}, Shape{1, 300, 64, 8, 128, 1, false, 60, m},
                          Shape{1, 77, 9, 3, 64, 1, false, 32, m}, Shape{1, 700, 9, 3, 64, 1, false, 32, m},
                          Shape{1, 200, 32, 8, 128, 1, false, -1, m}, Shape{1, 33, 9, 3, 64, 1, false, -1, 64}}) {
      SCOPED_TRACE(describe(s) + ", fused rope pairs " + testing::PrintToString(s.fused_rope_pairs));
      EXPECT_LT(run_attention(s), s.fused_rope_pairs >= 0 ? 1e-3 : 1e-4);
    }
  }
}

// Sliding windows (Gemma 3's local layers) and a softmax scale other than
// 1/sqrt(head_dim), on every kernel: the decode kernel (f32 queries), the
// generic one, the tensor cores (prefill with whole key tiles before the
// window skipped, split decode, fused decode) and the short-context decode.
// A key leaking in from before a window moves the output far past these bounds.
TEST(Attention, WindowsAndScalesMatchReference) {
  const int64_t m = kShortDecodeMaxKeys;
  const bool hopper = cuda::device_is_hopper_or_newer();
  struct Case {
    Shape s;
    double bound;
  };
  std::vector<Case> cases = {
      {windowed(Shape{1, 100, 32, 8, 128, 1, true}, 16, 0.05f), 1e-4},   // decode kernel
      {windowed(Shape{1, 500, 8, 1, 256, 5}, 100, 0.0f), 1e-4},          // decode kernel, head_dim 256, split
      {windowed(Shape{13, 40, 8, 4, 8, 1}, 7, 0.3f), 1e-4},              // generic prefill
      {windowed(Shape{40, 9, 6, 2, 32, 1}, 16, 0.0f), 1e-4},             // generic prefill, head_dim 32
      {windowed(Shape{1, 300, 8, 4, 64, 3}, 16, 0.1f), 5e-3},            // tensor-core decode, split
      {windowed(Shape{200, 150, 8, 2, 64, 1}, 16, 0.0f), 5e-3},          // tensor-core prefill, tiles skipped
      {windowed(Shape{300, 0, 16, 2, 128, 3}, 100, 0.07f), 5e-3},        // split prefill
      {windowed(Shape{37, 0, 8, 2, 64, 1}, 1000, 0.0f), 5e-3},           // a window wider than the keys
      {windowed(Shape{1, 100, 32, 8, 128, 1, false, 64}, 16, 0.0f), 5e-3},  // fused RoPE and cache store
  };
  if (hopper) {
    cases.push_back({windowed(Shape{1, 700, 9, 3, 64, 1, false, 32, m}, 16, 0.1f), 1e-3});  // short-context, fused
    cases.push_back({windowed(Shape{1, 200, 32, 8, 128, 1, false, -1, m}, 64, 0.0f), 1e-4});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.s) + ", window " + testing::PrintToString(c.s.window));
    EXPECT_LT(run_attention(c.s), c.bound);
  }
}

// Attention sinks (gpt-oss) on every kernel: the decode kernel, unsplit and
// split (merged in its launch), the generic prefill, the tensor cores'
// decode and prefill, split prefill (merged by the combine kernel), and the
// short-context decode; with windows, as gpt-oss's sliding layers have them.
TEST(Attention, SinksMatchReference) {
  const int64_t m = kShortDecodeMaxKeys;
  struct Case {
    Shape s;
    double bound;
  };
  std::vector<Case> cases = {
      {with_sinks(Shape{1, 100, 32, 8, 128, 1, true}), 1e-4},                  // decode kernel
      {with_sinks(Shape{1, 1000, 32, 8, 128, 7, true}), 1e-4},                 // decode kernel, split
      {with_sinks(windowed(Shape{13, 40, 8, 4, 8, 1}, 7, 0.3f)), 1e-4},        // generic prefill, windowed
      {with_sinks(Shape{1, 300, 8, 4, 64, 3}), 5e-3},                          // tensor-core decode, split
      {with_sinks(windowed(Shape{200, 150, 8, 2, 64, 1}, 16, 0.125f)), 5e-3},  // tensor-core prefill, gpt-oss's shape
      {with_sinks(Shape{300, 0, 16, 2, 128, 3}), 5e-3},                        // split prefill
  };
  if (cuda::device_is_hopper_or_newer()) {
    cases.push_back({with_sinks(windowed(Shape{1, 200, 8, 2, 64, 1, false, -1, m}, 16, 0.125f)), 1e-3});  // short-context
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c.s) + ", window " + testing::PrintToString(c.s.window));
    EXPECT_LT(run_attention(c.s), c.bound);
  }
  // A launch without the sinks is far from the reference that has them.
  EXPECT_GT(run_attention(with_sinks(Shape{1, 300, 8, 4, 64, 3}, false)), 0.05);
  EXPECT_GT(run_attention(with_sinks(Shape{200, 150, 8, 2, 64, 1}, false)), 0.05);
}

// The last position of Llama 3.1's 131072-token context, as the 8B decode
// graph runs it: fused, 33 splits of which 32 hold 4096 keys each and the
// last none, merged over 131072 keys (a 268 MB K cache for 8 KV heads).
TEST(Attention, DecodeAtTheFullLlama31Context) {
  const Shape s{1, 131071, 32, 8, 128, 33, false, 64};
  SCOPED_TRACE(describe(s));
  EXPECT_LT(run_attention(s), 5e-3);
}

// Each kernel reading a paged cache (pages scattered backwards through a pool
// whose other pages are NaN) gives what it gives on the contiguous cache:
// decode split and unsplit, fused, short-context, tensor-core and generic prefill.
TEST(Attention, PagedCachesMatchReference) {
  const int64_t m = kShortDecodeMaxKeys;
  const bool hopper = cuda::device_is_hopper_or_newer();
  for (Shape s : {Shape{1, 0, 8, 2, 64, 1, true},        Shape{1, 1000, 32, 8, 128, 7, true},
                  Shape{1, 77, 9, 3, 64, 1, true},       Shape{13, 5, 8, 4, 8, 1},
                  Shape{20, 200, 9, 3, 64, 3, true},     Shape{1, 1000, 32, 8, 128, 7},
                  Shape{300, 200, 16, 2, 128, 1},        Shape{100, 500, 16, 2, 128, 7},
                  Shape{65, 31, 4, 4, 128, 2},           Shape{1, 64, 32, 8, 128, 4, false, 64},
                  Shape{1, 520, 32, 8, 128, 33, false, 64}, Shape{1, 63, 32, 8, 128, 1, false, 64, m},
                  Shape{1, 700, 9, 3, 64, 1, false, 32, m},  Shape{1, 200, 32, 8, 128, 1, false, -1, m}}) {
    if (s.max_keys > 0 && !hopper) continue;
    s.paged = true;
    SCOPED_TRACE(describe(s) + ", paged");
    EXPECT_LT(run_attention(s), 5e-3);  // a wrong page reads other keys or NaN
  }
}

TEST(Attention, SplitsFillTheGpuAndStayUseful) {
  EXPECT_GT(attention_splits(1, 32, 8, 128, 8192, 132), 8);
  EXPECT_EQ(attention_splits(1, 32, 8, 128, 10, 132), 1);
  EXPECT_EQ(attention_splits(512, 32, 8, 128, 8192, 132), 1);
}

}  // namespace
}  // namespace nt
