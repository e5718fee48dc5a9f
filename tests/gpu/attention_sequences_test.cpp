// Decode of many sequences in one launch against float64 attention, over a
// paged pool (kv_layout.h) whose books are the engine's (runtime/kv_pages.h):
// each sequence reads its own pages up to its own position (ragged: one key,
// a full page, a page and one, several pages, the whole context), through a
// block table whose rows are in any order; pages freed by one sequence and
// reused by another (their stale keys past the new sequence's length must
// stay unseen) and pages shared by a copied prefix; and the per-token RoPE
// and cache store that fill those pages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/llama_ops.h"
#include "gpu_test_util.h"
#include "runtime/kv_pages.h"

namespace nt {
namespace {

struct Heads {
  int n_heads, n_kv_heads, head_dim;
};

constexpr int64_t kLayers = 2, kLayer = 1;  // the pool holds two layers; the launches read the second

int64_t page_stride(const Heads& h) { return kLayers * h.n_kv_heads * kKvTile * h.head_dim; }
int64_t layer_offset(const Heads& h) { return kLayer * h.n_kv_heads * kKvTile * h.head_dim; }

// The sequences' books, in a pool of n_pages pages for sequences of up to
// `context` positions.
struct Books {
  int64_t context, n_pages, width;
  KvPages pages;
  std::vector<SeqId> seqs;      // in launch order
  std::vector<int32_t> lengths;  // positions each holds
  std::vector<int32_t> table;
  SeqId copy = -1;                   // holds 40 positions of pages that another holds 45 of
  static constexpr int64_t kSharedLength = 45;

  // Short sequences: one that is freed once it has written 100 positions,
  // whose pages the later ones reuse; one prefix copied.
  Books() : Books(128, 24) {
    const SeqId gone = pages.allocate();
    pages.write(gone, 0, 100);
    const SeqId shared = pages.allocate();
    pages.write(shared, 0, kSharedLength);
    pages.free(gone);
    for (const int32_t length : {1, 32, 33, 128, 70}) add(length);
    copy = pages.allocate();
    pages.copy_prefix(shared, copy, 40);  // shares both of shared's pages, the second past its length
    seqs.push_back(copy);
    lengths.push_back(40);
    seqs.push_back(shared);
    lengths.push_back(int32_t(kSharedLength));
    std::swap(seqs[0], seqs[4]);  // table rows out of order
    std::swap(lengths[0], lengths[4]);
    fill_table();
  }

  // Sequences of these lengths, in pages a freed sequence of 600 positions held first.
  Books(int64_t context, std::initializer_list<int32_t> of_lengths) : Books(context, 200) {
    const SeqId gone = pages.allocate();
    pages.write(gone, 0, 600);
    pages.free(gone);
    for (const int32_t length : of_lengths) add(length);
    fill_table();
  }

  KvPaging paging(size_t i, const Heads& h) const { return {table.data() + seqs[i] * width, page_stride(h)}; }

 private:
  Books(int64_t context_, int64_t n_pages_)
      : context(context_),
        n_pages(n_pages_),
        width(context_ / kKvTile),
        pages(n_pages_, kKvTile, context_, 8),
        table(size_t(8 * width), 0) {}
  void add(int32_t length) {
    const SeqId s = pages.allocate();
    pages.write(s, 0, length);
    seqs.push_back(s);
    lengths.push_back(length);
  }
  void fill_table() {
    for (const SeqId s : seqs) {
      const auto held = pages.pages(s);
      std::copy(held.begin(), held.end(), table.begin() + s * width);
    }
  }
};

// max_keys > 0: the launch says every sequence sees at most that many keys,
// so the short-context decode may take it; where it does, each sequence's
// output must also be, bit for bit, that of a launch for it alone.
// n_splits > 1: each sequence's keys split in the launch; a sequence of one
// chunk (kSequenceSplitMinKeys keys or fewer) must then be, bit for bit, as
// in the unsplit launch, and a second launch (a graph's replay) as the first.
void check_sequences(const Heads& h, const Books& books, int64_t max_keys = 0, int n_splits = 1) {
  SCOPED_TRACE(testing::Message() << h.n_heads << "/" << h.n_kv_heads << " heads of " << h.head_dim << ", max_keys "
                                  << max_keys << ", " << n_splits << " splits");
  const int64_t n = int64_t(books.seqs.size()), width = int64_t(h.n_heads) * h.head_dim, stride = width + 8;
  const auto q = test::random_floats(size_t(n * stride), -2.0f, 2.0f);
  const size_t pool = size_t(books.n_pages * page_stride(h));
  // Every element of the pool random; the keys a sequence must not see (past
  // its length in its last page) large, so that a leak dominates its softmax.
  const auto kv = test::random_floats(2 * pool, -2.0f, 2.0f);
  std::vector<uint16_t> k(pool), v(pool);
  for (size_t i = 0; i < pool; ++i) {
    k[i] = fp32_to_fp16(kv[i]);
    v[i] = fp32_to_fp16(kv[pool + i]);
  }
  for (size_t i = 0; i < books.seqs.size(); ++i) {
    for (int64_t t = books.lengths[i]; t < books.pages.pages_for(books.lengths[i]) * kKvTile; ++t) {
      for (int kvh = 0; kvh < h.n_kv_heads; ++kvh) {
        for (int d = 0; d < h.head_dim; ++d) {
          if (books.seqs[i] == books.copy && t < Books::kSharedLength) continue;  // the sharing sequence's own keys
          k[size_t(layer_offset(h) + paged_k_index(books.paging(i, h), kvh, t, d, 0, h.head_dim))] = fp32_to_fp16(30.0f);
        }
      }
    }
  }
  std::vector<int32_t> positions, rows;
  for (size_t i = 0; i < books.seqs.size(); ++i) {
    positions.push_back(books.lengths[i] - 1);
    rows.push_back(books.seqs[i]);
  }
  const DeviceBuffer dq = test::to_device(q), dk = test::to_device(k), dv = test::to_device(v);
  const DeviceBuffer dpos = test::to_device(positions), drows = test::to_device(rows), dtable = test::to_device(books.table);
  DeviceBuffer out = test::poisoned(size_t(n * stride) * 4);
  AttentionParams p;
  p.q = dq.as<float>();
  p.q_stride = stride;
  p.k_cache = dk.as<uint16_t>() + layer_offset(h);
  p.v_cache = dv.as<uint16_t>() + layer_offset(h);
  p.paging = {dtable.as<int32_t>(), page_stride(h)};
  p.out = out.as<float>();
  p.out_stride = stride;
  p.pos = dpos.as<int32_t>();
  p.n_tokens = 1;
  p.n_heads = h.n_heads;
  p.n_kv_heads = h.n_kv_heads;
  p.head_dim = h.head_dim;
  p.n_seqs = n;
  p.seq_rows = drows.as<int32_t>();
  p.table_width = books.width;
  p.max_keys = max_keys;
  p.keys_just_stored = max_keys > 0;
  ASSERT_TRUE(attention_multi_sequence_supported(h.n_heads, h.n_kv_heads, h.head_dim));
  attention(p, nullptr);
  const auto got_all = test::to_host<float>(out, size_t(n * stride));
  if (n_splits > 1) {
    AttentionParams split = p;
    split.n_splits = n_splits;
    DeviceBuffer partials =
        test::poisoned(size_t(n * attention_sequence_partials_stride(h.n_heads, h.head_dim, n_splits)) * 4);
    split.partials = partials.as<float>();
    ASSERT_TRUE(attention_splits_sequences(split));
    for (int launch = 0; launch < 2; ++launch) {
      DeviceBuffer split_out = test::poisoned(size_t(n * stride) * 4);
      split.out = split_out.as<float>();
      attention(split, nullptr);
      const auto got = test::to_host<float>(split_out, size_t(n * stride));
      for (int64_t i = 0; i < n; ++i) {
        const bool one_chunk = books.lengths[size_t(i)] <= kSequenceSplitMinKeys;
        for (int64_t j = 0; j < int64_t(h.n_heads) * h.head_dim; ++j) {
          const size_t at = size_t(i * stride + j);
          if (one_chunk) {
            ASSERT_EQ(std::memcmp(&got[at], &got_all[at], 4), 0)
                << "sequence of " << books.lengths[size_t(i)] << " keys, element " << j << ": " << got[at] << " unsplit "
                << got_all[at];
          } else {
            EXPECT_NEAR(got[at], got_all[at], 2e-3f) << "sequence of " << books.lengths[size_t(i)] << " keys, element " << j;
          }
        }
      }
      if (launch == 1) continue;
      DeviceBuffer again = test::poisoned(size_t(n * stride) * 4);
      split.out = again.as<float>();
      attention(split, nullptr);
      const auto replay = test::to_host<float>(again, size_t(n * stride));  // the rows' poisoned padding too
      ASSERT_EQ(std::memcmp(replay.data(), got.data(), got.size() * 4), 0) << "a second launch merges as the first";
    }
  }
  if (attention_decodes_short(p)) {
    DeviceBuffer alone = test::poisoned(size_t(n * stride) * 4);
    for (int64_t i = 0; i < n; ++i) {
      AttentionParams one = p;
      one.n_seqs = 1;
      one.q = p.q + i * stride;
      one.out = alone.as<float>() + i * stride;
      one.pos = p.pos + i;
      one.paging.pages = p.paging.pages + rows[size_t(i)] * books.width;
      attention(one, nullptr);
    }
    const auto want = test::to_host<float>(alone, size_t(n * stride));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < int64_t(h.n_heads) * h.head_dim; ++j) {
        const size_t at = size_t(i * stride + j);
        ASSERT_EQ(std::memcmp(&got_all[at], &want[at], 4), 0)
            << "sequence " << rows[size_t(i)] << ", element " << j << ": " << got_all[at] << " alone " << want[at];
      }
    }
  }
  const int group = h.n_heads / h.n_kv_heads;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> got;
    std::vector<double> ref;
    const int64_t last = positions[size_t(i)];
    const KvPaging paging = books.paging(size_t(i), h);
    const auto key = [&](int kvh, int64_t j, int d) {
      return double(fp16_to_fp32(k[size_t(layer_offset(h) + paged_k_index(paging, kvh, j, d, 0, h.head_dim))]));
    };
    const auto value = [&](int kvh, int64_t j, int d) {
      return double(fp16_to_fp32(v[size_t(layer_offset(h) + paged_v_index(paging, kvh, j, d, 0, h.head_dim))]));
    };
    for (int hh = 0; hh < h.n_heads; ++hh) {
      std::vector<double> w(size_t(last + 1));
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j <= last; ++j) {
        double dot = 0.0;
        for (int d = 0; d < h.head_dim; ++d) dot += double(q[size_t(i * stride + hh * h.head_dim + d)]) * key(hh / group, j, d);
        w[size_t(j)] = dot / std::sqrt(double(h.head_dim));
        m = std::max(m, w[size_t(j)]);
      }
      for (double& x : w) sum += (x = std::exp(x - m));
      for (int d = 0; d < h.head_dim; ++d) {
        double o = 0.0;
        for (int64_t j = 0; j <= last; ++j) o += w[size_t(j)] * value(hh / group, j, d);
        ref.push_back(o / sum);
        got.push_back(got_all[size_t(i * stride + hh * h.head_dim + d)]);
      }
    }
    EXPECT_LT(test::relative_error(got, ref), 2e-3) << "sequence " << rows[size_t(i)] << " at position " << last;
  }
}

TEST(AttentionSequences, EachSequenceReadsItsOwnPagesUpToItsPosition) {
  const Books books;
  for (const Heads h : {Heads{9, 3, 64}, Heads{32, 8, 128}, Heads{64, 8, 128}, Heads{8, 2, 256}}) check_sequences(h, books);
}

// Long sequences split their keys in the launch (a decode step of a few
// sequences at long contexts): ragged lengths below, at and past one chunk,
// a whole context, split counts beyond the useful ones.
TEST(AttentionSequences, SplitSequencesMergeTheirOwnKeyRanges) {
  const Books books(2048, {1, 256, 257, 2048, 700, 64, 1500, 1024});
  for (const Heads h : {Heads{9, 3, 64}, Heads{32, 8, 128}, Heads{64, 8, 128}}) {
    for (const int splits : {2, 5, 16}) check_sequences(h, books, 0, splits);
  }
  EXPECT_EQ(attention_sequence_splits(64, 32, 8, 128, 8192, 132), 1);    // the sequences fill the GPU
  EXPECT_EQ(attention_sequence_splits(4, 32, 8, 128, 8192, 132), 8);     // one wave: 264 blocks
  EXPECT_EQ(attention_sequence_splits(4, 32, 8, 128, 300, 132), 2);      // no more than the keys fill
  EXPECT_EQ(attention_sequence_splits(4, 32, 8, 256, 8192, 132), 1);     // head_dim 256: not the tensor-core kernel
}

// The stepwise rows' launch (LayerPass::stepwise_layer): every sequence short
// enough for the short-context decode, which then computes each as alone.
TEST(AttentionSequences, ShortContextLaunchComputesEachSequenceAsAlone) {
  const Books books;
  AttentionParams probe;
  probe.n_tokens = 1;
  probe.n_heads = 32;
  probe.n_kv_heads = 8;
  probe.head_dim = 128;
  probe.max_keys = books.context;
  if (!attention_decodes_short(probe)) GTEST_SKIP() << "the short-context decode needs sm_90 or newer";
  for (const Heads h : {Heads{9, 3, 64}, Heads{32, 8, 128}, Heads{64, 8, 128}}) {
    check_sequences(h, books, books.context);
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
  p.context = 128;
  p.n_seqs = 2;  // and no block table
  EXPECT_THROW(attention(p, nullptr), Error);
  const int32_t row = 0;  // never read: refused before any launch
  p.paging = {&row, 1};
  p.seq_rows = &row;
  p.table_width = 1;
  p.head_dim = 256;  // the decode kernel's shape, which merges no splits of several sequences
  p.n_splits = 2;
  EXPECT_THROW(attention(p, nullptr), Error);
}

// RoPE and the cache store of tokens of several sequences in one launch:
// each token's key and value land at its own position in its own pages.
TEST(AttentionSequences, PerTokenRopeStoresEachTokenInItsPages) {
  const Heads h{4, 2, 64};
  const Books books;
  // Tokens of the second, fourth and fifth sequences of the books (lengths 32, 128, 70), table rows as they are.
  const std::vector<size_t> of{1, 3, 3, 4};
  const std::vector<int32_t> positions{0, 17, 127, 69};
  std::vector<int32_t> rows;
  for (const size_t i : of) rows.push_back(books.seqs[i]);
  const int64_t n = int64_t(positions.size()), qkv_width = int64_t(h.n_heads + 2 * h.n_kv_heads) * h.head_dim;
  const auto qkv = test::random_floats(size_t(n * qkv_width), -2.0f, 2.0f);
  std::vector<float> inv_freq(size_t(h.head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * double(i) / h.head_dim));
  DeviceBuffer dqkv = test::to_device(qkv);
  const DeviceBuffer dpos = test::to_device(positions), drows = test::to_device(rows), dfreq = test::to_device(inv_freq);
  const DeviceBuffer dtable = test::to_device(books.table);
  const size_t cache = size_t(books.n_pages * page_stride(h));
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
  r.k_cache = dk.as<uint16_t>() + layer_offset(h);
  r.v_cache = dv.as<uint16_t>() + layer_offset(h);
  r.paging = {dtable.as<int32_t>(), page_stride(h)};
  r.token_pos = dpos.as<int32_t>();
  r.token_row = drows.as<int32_t>();
  r.table_width = books.width;
  rope_and_store_kv(r, nullptr);
  const auto k = test::to_host<uint16_t>(dk, cache), v = test::to_host<uint16_t>(dv, cache);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> got_k, got_v;
    std::vector<double> want_k, want_v;
    const int64_t pos = positions[size_t(t)];
    const KvPaging paging = books.paging(of[size_t(t)], h);
    for (int kvh = 0; kvh < h.n_kv_heads; ++kvh) {
      const float* key = qkv.data() + t * qkv_width + (h.n_heads + kvh) * h.head_dim;
      const float* value = qkv.data() + t * qkv_width + (h.n_heads + h.n_kv_heads + kvh) * h.head_dim;
      for (int d = 0; d < h.head_dim; d += 2) {
        const double a = double(pos) * inv_freq[size_t(d / 2)];
        want_k.push_back(key[d] * std::cos(a) - key[d + 1] * std::sin(a));
        want_k.push_back(key[d] * std::sin(a) + key[d + 1] * std::cos(a));
        for (int e = 0; e < 2; ++e) {
          got_k.push_back(fp16_to_fp32(k[size_t(layer_offset(h) + paged_k_index(paging, kvh, pos, d + e, 0, h.head_dim))]));
          got_v.push_back(fp16_to_fp32(v[size_t(layer_offset(h) + paged_v_index(paging, kvh, pos, d + e, 0, h.head_dim))]));
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
