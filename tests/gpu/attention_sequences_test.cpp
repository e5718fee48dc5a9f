// Decode of many sequences in one launch against float64 attention: each
// sequence reads its own KV slot up to its own position (ragged: one key, a
// whole tile, a tile and one, a full slot), slots in any order, a slot freed
// by one sequence and reused by another (its stale keys past the new
// sequence's length must stay unseen); and the per-token RoPE and cache store
// that fill those slots.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/llama_ops.h"
#include "gpu_test_util.h"

namespace nt {
namespace {

struct Heads {
  int n_heads, n_kv_heads, head_dim;
};

constexpr int64_t kContext = 128;

// Per slot: [kv_head][context][head_dim] in the f16 cache layouts.
int64_t slot_elems(const Heads& h) { return int64_t(h.n_kv_heads) * kContext * h.head_dim; }

void check_sequences(const Heads& h, const std::vector<int32_t>& positions, const std::vector<int32_t>& slots, int n_slots) {
  SCOPED_TRACE(testing::Message() << h.n_heads << "/" << h.n_kv_heads << " heads of " << h.head_dim);
  const int64_t n = int64_t(positions.size()), width = int64_t(h.n_heads) * h.head_dim, stride = width + 8;
  const auto q = test::random_floats(size_t(n * stride), -2.0f, 2.0f);
  std::vector<uint16_t> k(size_t(n_slots * slot_elems(h))), v(k.size());
  std::vector<float> kf(k.size()), vf(v.size());  // row-major [slot][kv_head][pos][d], as the cache rounds them
  const auto kv = test::random_floats(2 * k.size(), -2.0f, 2.0f);
  for (int s = 0; s < n_slots; ++s) {
    for (int kvh = 0; kvh < h.n_kv_heads; ++kvh) {
      for (int64_t t = 0; t < kContext; ++t) {
        for (int d = 0; d < h.head_dim; ++d) {
          const size_t i = size_t(((s * h.n_kv_heads + kvh) * kContext + t) * h.head_dim + d);
          const int64_t base = s * slot_elems(h);
          k[size_t(base + k_cache_index(kvh, t, d, kContext, h.head_dim))] = fp32_to_fp16(kv[i]);
          v[size_t(base + v_cache_index(kvh, t, d, kContext, h.head_dim))] = fp32_to_fp16(kv[k.size() + i]);
          kf[i] = fp16_to_fp32(fp32_to_fp16(kv[i]));
          vf[i] = fp16_to_fp32(fp32_to_fp16(kv[k.size() + i]));
        }
      }
    }
  }
  // Keys past each sequence's position are large: a leak through the mask dominates its softmax.
  for (int64_t i = 0; i < n; ++i) {
    for (int kvh = 0; kvh < h.n_kv_heads; ++kvh) {
      for (int64_t t = positions[size_t(i)] + 1; t < kContext; ++t) {
        for (int d = 0; d < h.head_dim; ++d) {
          k[size_t(slots[size_t(i)] * slot_elems(h) + k_cache_index(kvh, t, d, kContext, h.head_dim))] = fp32_to_fp16(30.0f);
        }
      }
    }
  }
  const DeviceBuffer dq = test::to_device(q), dk = test::to_device(k), dv = test::to_device(v);
  const DeviceBuffer dpos = test::to_device(positions), dslots = test::to_device(slots);
  DeviceBuffer out = test::poisoned(size_t(n * stride) * 4);
  AttentionParams p;
  p.q = dq.as<float>();
  p.q_stride = stride;
  p.k_cache = dk.as<uint16_t>();
  p.v_cache = dv.as<uint16_t>();
  p.context = kContext;
  p.out = out.as<float>();
  p.out_stride = stride;
  p.pos = dpos.as<int32_t>();
  p.n_tokens = 1;
  p.n_heads = h.n_heads;
  p.n_kv_heads = h.n_kv_heads;
  p.head_dim = h.head_dim;
  p.n_seqs = n;
  p.seq_slots = dslots.as<int32_t>();
  p.slot_stride = slot_elems(h);
  ASSERT_TRUE(attention_multi_sequence_supported(h.n_heads, h.n_kv_heads, h.head_dim));
  attention(p, nullptr);
  const auto got_all = test::to_host<float>(out, size_t(n * stride));
  const int group = h.n_heads / h.n_kv_heads;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> got;
    std::vector<double> ref;
    const int64_t last = positions[size_t(i)], slot = slots[size_t(i)];
    for (int hh = 0; hh < h.n_heads; ++hh) {
      const int64_t row0 = (slot * h.n_kv_heads + hh / group) * kContext;
      std::vector<double> w(size_t(last + 1));
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j <= last; ++j) {
        double dot = 0.0;
        for (int d = 0; d < h.head_dim; ++d) dot += double(q[size_t(i * stride + hh * h.head_dim + d)]) * kf[size_t((row0 + j) * h.head_dim + d)];
        w[size_t(j)] = dot / std::sqrt(double(h.head_dim));
        m = std::max(m, w[size_t(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - m));
      for (int d = 0; d < h.head_dim; ++d) {
        double o = 0.0;
        for (int64_t j = 0; j <= last; ++j) o += w[size_t(j)] * vf[size_t((row0 + j) * h.head_dim + d)];
        ref.push_back(o / sum);
        got.push_back(got_all[size_t(i * stride + hh * h.head_dim + d)]);
      }
    }
    EXPECT_LT(test::relative_error(got, ref), 2e-3) << "sequence " << i << " at position " << last << " in slot " << slot;
  }
}

TEST(AttentionSequences, EachSequenceReadsItsOwnSlotUpToItsPosition) {
  // Positions: one key, a whole tile, a tile and one, mid-slot, the slot's last.
  // Slots out of order; slot 1 held a longer sequence before (its stale keys are the large ones past position 5).
  const std::vector<int32_t> positions{0, 31, 32, 70, int32_t(kContext - 1), 5};
  const std::vector<int32_t> slots{3, 0, 4, 2, 5, 1};
  for (const Heads h : {Heads{9, 3, 64}, Heads{32, 8, 128}, Heads{64, 8, 128}, Heads{8, 2, 256}}) {
    check_sequences(h, positions, slots, 6);
  }
}

TEST(AttentionSequences, UnsupportedShapesAreRefused) {
  EXPECT_FALSE(attention_multi_sequence_supported(8, 4, 8));   // stories260K's heads: per-sequence launches
  EXPECT_FALSE(attention_multi_sequence_supported(32, 2, 128));  // a group of 16
  AttentionParams p;
  p.n_tokens = 1;
  p.n_heads = 8;
  p.n_kv_heads = 4;
  p.head_dim = 64;
  p.context = kContext;
  p.n_seqs = 2;
  p.n_splits = 2;  // splits are not merged across sequences
  EXPECT_THROW(attention(p, nullptr), Error);
}

// RoPE and the cache store of tokens of several sequences in one launch:
// each token's key and value land at its own position in its own slot.
TEST(AttentionSequences, PerTokenRopeStoresEachTokenInItsSlot) {
  const Heads h{4, 2, 64};
  const std::vector<int32_t> positions{0, 17, 33, 34}, slots{2, 0, 1, 1};
  const int64_t n = int64_t(positions.size()), qkv_width = int64_t(h.n_heads + 2 * h.n_kv_heads) * h.head_dim;
  const auto qkv = test::random_floats(size_t(n * qkv_width), -2.0f, 2.0f);
  std::vector<float> inv_freq(size_t(h.head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / h.head_dim));
  DeviceBuffer dqkv = test::to_device(qkv);
  const DeviceBuffer dpos = test::to_device(positions), dslots = test::to_device(slots), dfreq = test::to_device(inv_freq);
  const size_t cache = size_t(3 * slot_elems(h));
  DeviceBuffer dk = test::poisoned(cache * 2), dv = test::poisoned(cache * 2);
  RopeKvParams r;
  r.qkv = dqkv.as<float>();
  r.qkv_stride = qkv_width;
  r.n_tokens = n;
  r.inv_freq = dfreq.as<float>();
  r.rope_pairs = h.head_dim / 2;
  r.n_heads = h.n_heads;
  r.n_kv_heads = h.n_kv_heads;
  r.head_dim = h.head_dim;
  r.k_cache = dk.as<uint16_t>();
  r.v_cache = dv.as<uint16_t>();
  r.context = kContext;
  r.token_pos = dpos.as<int32_t>();
  r.token_slot = dslots.as<int32_t>();
  r.slot_stride = slot_elems(h);
  rope_and_store_kv(r, nullptr);
  const auto k = test::to_host<uint16_t>(dk, cache), v = test::to_host<uint16_t>(dv, cache);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> got_k, got_v;
    std::vector<double> want_k, want_v;
    const int64_t base = slots[size_t(t)] * slot_elems(h), pos = positions[size_t(t)];
    for (int kvh = 0; kvh < h.n_kv_heads; ++kvh) {
      const float* key = qkv.data() + t * qkv_width + (h.n_heads + kvh) * h.head_dim;
      const float* value = qkv.data() + t * qkv_width + (h.n_heads + h.n_kv_heads + kvh) * h.head_dim;
      for (int d = 0; d < h.head_dim; d += 2) {
        const double a = double(pos) * inv_freq[size_t(d / 2)];
        want_k.push_back(key[d] * std::cos(a) - key[d + 1] * std::sin(a));
        want_k.push_back(key[d] * std::sin(a) + key[d + 1] * std::cos(a));
        for (int e = 0; e < 2; ++e) {
          got_k.push_back(fp16_to_fp32(k[size_t(base + k_cache_index(kvh, pos, d + e, kContext, h.head_dim))]));
          got_v.push_back(fp16_to_fp32(v[size_t(base + v_cache_index(kvh, pos, d + e, kContext, h.head_dim))]));
          want_v.push_back(value[d + e]);
        }
      }
    }
    EXPECT_LT(test::relative_error(got_k, want_k), 1e-3) << "token " << t;
    EXPECT_LT(test::relative_error(got_v, want_v), 1e-3) << "token " << t;
  }
}

}  // namespace
}  // namespace nt
