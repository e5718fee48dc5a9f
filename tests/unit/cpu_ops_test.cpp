// CPU ops and attention against direct float64 formulas, on every ISA.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "core/half.h"
#include "runtime/kv_pages.h"

namespace nt::cpu {
namespace {

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

class CpuOpsTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& k() const { return kernels_for(GetParam()); }
  std::vector<float> normal(int64_t n, float sigma = 1.0f) {
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng_);
    return v;
  }
  uint64_t seed_ = uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
  std::mt19937_64 rng_{seed_};
};

INSTANTIATE_TEST_SUITE_P(Isas, CpuOpsTest, ::testing::ValuesIn(available_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

TEST_P(CpuOpsTest, RmsNorm) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const int64_t n = 579;
  const auto x = normal(n, 3.0f), w = normal(n);
  std::vector<float> y(n);
  rmsnorm(x.data(), w.data(), y.data(), n, 1e-5f, k());
  double ss = 0;
  for (float v : x) ss += double(v) * v;
  const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], x[i] * inv * w[i], 1e-5 * std::fabs(x[i] * inv * w[i]) + 1e-6);
}

TEST_P(CpuOpsTest, SwigluAndSoftmax) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const int64_t n = 1541;
  auto g = normal(n, 4.0f), u = normal(n);
  g[0] = -100.0f;  // exp overflow territory for silu
  g[1] = 95.0f;
  std::vector<float> y(n);
  swiglu(g.data(), u.data(), y.data(), n, k());
  for (int64_t i = 0; i < n; ++i) {
    const double expect = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
    ASSERT_NEAR(y[i], expect, 2e-6 * std::fabs(expect) + 1e-30) << "g " << g[i];
  }
  auto x = normal(n, 10.0f);
  x[5] = -1e30f;
  const auto orig = x;
  softmax(x.data(), n, k());
  double max = -INFINITY, sum = 0;
  for (float v : orig) max = std::max(max, double(v));
  for (float v : orig) sum += std::exp(double(v) - max);
  // The float sum over n terms carries ~sqrt(n) ulps of relative error.
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(x[i], std::exp(double(orig[i]) - max) / sum, 1e-5 * x[i] + 1e-12);
}

TEST(CpuOps, RopeRotatesAdjacentPairsLikeComplexNumbers) {
  std::mt19937_64 rng(uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count()));
  std::normal_distribution<float> dist;
  const int heads = 3, hd = 64;
  std::vector<float> freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i) freq[i] = float(std::pow(10000.0, -2.0 * i / hd)) * (i % 3 == 0 ? 0.25f : 1.0f);
  for (int64_t pos : {0, 1, 17, 4000, 100000}) {
    std::vector<float> x(heads * hd);
    for (auto& v : x) v = dist(rng);
    const auto orig = x;
    rope(x.data(), heads, {hd, hd, RopeStyle::AdjacentPairs}, pos, freq.data());
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < hd / 2; ++i) {
        const std::complex<double> z(orig[h * hd + 2 * i], orig[h * hd + 2 * i + 1]);
        const std::complex<double> r = z * std::polar(1.0, double(pos) * double(freq[i]));
        ASSERT_NEAR(x[h * hd + 2 * i], r.real(), 1e-5) << "pos " << pos << " pair " << i;
        ASSERT_NEAR(x[h * hd + 2 * i + 1], r.imag(), 1e-5) << "pos " << pos << " pair " << i;
      }
    }
  }
}

// A KV cache filled with random values, in either layout the strides allow.
struct Cache {
  std::vector<float> values;  // as the kernels see them (fp16-rounded for F16)
  std::vector<uint16_t> half;
  KvView view;
};

Cache make_cache(TensorType type, int64_t n_pos, int kv_heads, int hd, bool head_major, std::mt19937_64& rng) {
  std::normal_distribution<float> dist;
  Cache c;
  c.values.resize(n_pos * kv_heads * hd);
  for (auto& v : c.values) v = type == TensorType::F16 ? fp16_to_fp32(fp32_to_fp16(dist(rng))) : dist(rng);
  c.view.type = type;
  c.view.pos_stride = head_major ? hd : int64_t(kv_heads) * hd;
  c.view.head_stride = head_major ? n_pos * hd : hd;
  if (type == TensorType::F16) {
    c.half.resize(c.values.size());
    for (size_t i = 0; i < c.values.size(); ++i) c.half[i] = fp32_to_fp16(c.values[i]);
    c.view.data = c.half.data();
  } else {
    c.view.data = c.values.data();
  }
  return c;
}

double cache_at(const Cache& c, int64_t row, int head, int i) {
  return c.values[row * c.view.pos_stride + head * c.view.head_stride + i];
}

// Naive float64 attention of query row q (position `pos`, sees [0, pos]);
// position j of the sequence is cache row row_of(j).
std::vector<double> naive_attention(const float* q, const Cache& k, const Cache& v, int64_t pos,
                                    const AttentionShape& s,
                                    const std::function<int64_t(int64_t)>& row_of = [](int64_t j) { return j; }) {
  std::vector<double> out(s.n_heads * s.head_dim, 0.0);
  const int group = s.n_heads / s.n_kv_heads;
  for (int h = 0; h < s.n_heads; ++h) {
    std::vector<double> scores(pos + 1);
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= pos; ++j) {
      double d = 0;
      for (int i = 0; i < s.head_dim; ++i) d += double(q[h * s.head_dim + i]) * cache_at(k, row_of(j), h / group, i);
      scores[j] = d * s.scale;
      max = std::max(max, scores[j]);
    }
    for (auto& x : scores) sum += (x = std::exp(x - max));
    for (int64_t j = 0; j <= pos; ++j) {
      for (int i = 0; i < s.head_dim; ++i) out[h * s.head_dim + i] += scores[j] / sum * cache_at(v, row_of(j), h / group, i);
    }
  }
  return out;
}

// The KV cache's f16 stores are fp32_to_fp16's bits (numpy's rounding):
// values at every scale, halfway cases of normals and subnormals, overflow,
// infinities and NaNs, over vector blocks and a scalar tail.
TEST_P(CpuOpsTest, HalfStoresAreFp32ToFp16Bits) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  std::vector<float> x;
  for (float sigma : {1e-7f, 1e-5f, 1e-2f, 1.0f, 1e3f, 7e4f}) {
    for (float v : normal(64, sigma)) x.push_back(v);
  }
  for (uint16_t h : {uint16_t(0x0001), uint16_t(0x03ff), uint16_t(0x0400), uint16_t(0x3c00), uint16_t(0x7bff)}) {
    const uint32_t bits = std::bit_cast<uint32_t>(fp16_to_fp32(h));
    for (uint32_t delta : {0u, 0x1000u, 0x1001u, 0xfffu}) {  // exactly, at and about halfway to the next half
      x.push_back(std::bit_cast<float>(bits + delta));
      x.push_back(-std::bit_cast<float>(bits + delta));
    }
  }
  for (float v : {0.0f, -0.0f, 1e-9f, 3e-8f, 65504.0f, 65520.0f, 1e6f, INFINITY, -INFINITY, NAN,
                  std::bit_cast<float>(0x7fa00001u), std::bit_cast<float>(0xffc12345u)}) {
    x.push_back(v);
  }
  x.resize(x.size() / 8 * 8 + 5);  // a scalar tail
  std::vector<uint16_t> got(x.size());
  k().f32_to_f16(x.data(), got.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(got[i], fp32_to_fp16(x[i])) << "x[" << i << "] = " << x[i] << " (bits " << std::bit_cast<uint32_t>(x[i]) << ")";
  }
}

TEST_P(CpuOpsTest, AttentionMatchesNaiveFloat64) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ThreadPool pool(2);
  const AttentionShape shape{9, 3, 64, 0.125f};
  for (TensorType type : {TensorType::F16, TensorType::F32}) {
    for (bool head_major : {false, true}) {
      SCOPED_TRACE(std::string(tensor_type_name(type)) + (head_major ? " head-major" : " pos-major"));
      const int64_t n_past = 37;
      const int n_tokens = 11;
      const Cache kc = make_cache(type, n_past + n_tokens, shape.n_kv_heads, shape.head_dim, head_major, rng_);
      const Cache vc = make_cache(type, n_past + n_tokens, shape.n_kv_heads, shape.head_dim, head_major, rng_);
      const int64_t width = shape.n_heads * shape.head_dim;
      const auto q = normal(width * n_tokens, 1.5f);

      std::vector<float> out(width * n_tokens);
      attention_prefill(q.data(), kc.view, vc.view, n_past, n_tokens, shape, out.data(), pool, k());
      for (int t = 0; t < n_tokens; ++t) {
        const auto ref = naive_attention(q.data() + t * width, kc, vc, n_past + t, shape);
        for (int64_t i = 0; i < width; ++i) ASSERT_NEAR(out[t * width + i], ref[i], 2e-5) << "token " << t << " i " << i;
      }

      // Decode: the last query alone.
      std::vector<float> one(width);
      attention(q.data() + (n_tokens - 1) * width, kc.view, vc.view, n_past + n_tokens, shape, one.data(), pool, k());
      const auto ref = naive_attention(q.data() + (n_tokens - 1) * width, kc, vc, n_past + n_tokens - 1, shape);
      for (int64_t i = 0; i < width; ++i) ASSERT_NEAR(one[i], ref[i], 2e-5) << "i " << i;
    }
  }
}

// The head-group kernels give every number what it gets alone (one head,
// one row a call), bit for bit, for group sizes across the kernels' blocks
// of 4 heads, row counts across the dot's blocks of 8 rows, and rows with a
// scalar tail; and each dot is the float64 dot within float rounding.
TEST_P(CpuOpsTest, HeadGroupKernelsEqualOneCallAHeadBitForBit) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (int64_t n : {int64_t(64), int64_t(72), int64_t(9)}) {
    std::vector<uint16_t> row;
    for (float x : normal(n)) row.push_back(fp32_to_fp16(x));
    for (int heads : {1, 3, 4, 8, 9}) {
      SCOPED_TRACE("n " + std::to_string(n) + " heads " + std::to_string(heads));
      const std::vector<float> q = normal(heads * n);
      constexpr int kRows = 19;
      std::vector<std::vector<uint16_t>> dot_rows(kRows);
      std::vector<const uint16_t*> dot_ptrs;
      for (auto& r : dot_rows) {
        for (float x : normal(n)) r.push_back(fp32_to_fp16(x));
        dot_ptrs.push_back(r.data());
      }
      for (int first : {0, 3}) {
        const int keys = kRows - first;
        std::vector<float> got(size_t(heads * keys), 0.0f);
        k().dot_f16_heads(dot_ptrs.data() + first, keys, q.data(), n, heads, n, got.data(), keys);
        for (int j = 0; j < keys; ++j) {
          for (int h = 0; h < heads; ++h) {
            float want;
            k().dot_f16_heads(dot_ptrs.data() + first + j, 1, q.data() + h * n, n, 1, n, &want, 1);
            const float g = got[size_t(h * keys + j)];
            EXPECT_EQ(std::memcmp(&g, &want, 4), 0) << "row " << first + j << " head " << h << ": " << g << " vs " << want;
            double exact = 0;
            for (int64_t i = 0; i < n; ++i) exact += double(fp16_to_fp32(dot_rows[size_t(first + j)][size_t(i)])) * q[size_t(h * n + i)];
            EXPECT_NEAR(want, exact, 1e-5 * double(n)) << "row " << first + j << " head " << h;
          }
        }
      }
      // Three rows (the same row's values rotated) into every head's output, in order.
      std::vector<std::vector<uint16_t>> rows(3, row);
      for (size_t j = 1; j < rows.size(); ++j) std::rotate(rows[j].begin(), rows[j].begin() + int64_t(j), rows[j].end());
      const uint16_t* keys[3] = {rows[0].data(), rows[1].data(), rows[2].data()};
      const std::vector<float> alpha = normal(3 * heads), start = normal(heads * n);
      std::vector<float> together = start, apart = start;
      k().axpy_f16_heads(alpha.data(), 3, keys, 3, together.data(), n, heads, n);
      for (int j = 0; j < 3; ++j) {
        for (int h = 0; h < heads; ++h) k().axpy_f16_heads(&alpha[size_t(h * 3 + j)], 1, &keys[j], 1, apart.data() + h * n, n, 1, n);
      }
      EXPECT_EQ(std::memcmp(together.data(), apart.data(), together.size() * 4), 0);
    }
  }
}

// A prefill's rows attend in tasks of a KV head's query heads; a decode step
// in tasks of one head. A row's numbers must not depend on which: each row of
// a prefill equals that row attending alone, bit for bit.
TEST_P(CpuOpsTest, PrefillRowsAttendAsTheyDoAlone) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ThreadPool pool(2);
  const AttentionShape shape{12, 3, 64, 0.125f};
  for (TensorType type : {TensorType::F16, TensorType::F32}) {
    SCOPED_TRACE(tensor_type_name(type));
    const int64_t n_past = 21;
    const int n_tokens = 9;
    const Cache kc = make_cache(type, n_past + n_tokens, shape.n_kv_heads, shape.head_dim, false, rng_);
    const Cache vc = make_cache(type, n_past + n_tokens, shape.n_kv_heads, shape.head_dim, false, rng_);
    const int64_t width = shape.n_heads * shape.head_dim;
    const auto q = normal(width * n_tokens, 1.5f);
    std::vector<float> out(width * n_tokens), one(width);
    attention_prefill(q.data(), kc.view, vc.view, n_past, n_tokens, shape, out.data(), pool, k());
    for (int t = 0; t < n_tokens; ++t) {
      attention(q.data() + t * width, kc.view, vc.view, n_past + t + 1, shape, one.data(), pool, k());
      EXPECT_EQ(std::memcmp(one.data(), out.data() + t * width, size_t(width) * 4), 0) << "token " << t;
    }
  }
}

// Several sequences in one pass over a paged pool: ragged lengths, a run that
// ends on a full page, one that starts a page, a prefill chunk beside decode
// queries, and a sequence freed and its pages reused by another.
TEST_P(CpuOpsTest, PagedAttentionOverSequencesMatchesNaiveFloat64) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ThreadPool pool(2);
  const AttentionShape shape{8, 2, 64, 0.125f};
  constexpr int64_t kPage = 8;
  KvPages pages(12, kPage, 64);
  const SeqId a = pages.allocate(), gone = pages.allocate(), b = pages.allocate();
  pages.write(gone, 0, 30);
  pages.write(a, 0, 5);
  pages.write(b, 0, 3);
  pages.free(gone);  // its pages go to the next writes
  const SeqId c = pages.allocate();
  pages.write(a, 5, 16);  // ends on a full page
  pages.write(b, 3, 8);   // a prefill chunk of 3 at positions 5..7, ending its first page
  pages.write(c, 0, 17);  // its last query starts a page
  const int64_t rows = pages.page_count() * kPage;
  for (TensorType type : {TensorType::F16, TensorType::F32}) {
    SCOPED_TRACE(tensor_type_name(type));
    const Cache kc = make_cache(type, rows, shape.n_kv_heads, shape.head_dim, false, rng_);
    const Cache vc = make_cache(type, rows, shape.n_kv_heads, shape.head_dim, false, rng_);
    const int64_t width = shape.n_heads * shape.head_dim;
    struct Query {
      SeqId seq;
      int64_t first_pos;
      int n;
    };
    const std::vector<Query> queries{{a, 15, 1}, {b, 5, 3}, {c, 16, 1}};
    const auto q = normal(width * 5, 1.5f);
    std::vector<float> out(width * 5);
    std::vector<AttentionRun> runs;
    int64_t row = 0;
    for (const Query& x : queries) {
      runs.push_back({&q[row * width], &out[row * width], x.first_pos, x.n, pages.pages(x.seq).data(), kPage});
      row += x.n;
    }
    attention_runs(runs, kc.view, vc.view, shape, pool, k());
    row = 0;
    for (const Query& x : queries) {
      for (int t = 0; t < x.n; ++t, ++row) {
        const auto ref = naive_attention(&q[row * width], kc, vc, x.first_pos + t, shape,
                                         [&](int64_t j) { return pages.slot(x.seq, j); });
        for (int64_t i = 0; i < width; ++i) ASSERT_NEAR(out[row * width + i], ref[i], 2e-5) << "seq " << x.seq << " t " << t;
      }
    }
  }
}

// A decode step of one or two sequences with many keys spreads each row's
// attention over the threads in phases (keys, heads, elements); in a batch
// of more rows the same rows attend in one task per KV head. A row's output
// must have the same bits either way, whatever the thread count, over
// non-contiguous pages, for both cache types and a head size with a scalar tail.
TEST_P(CpuOpsTest, FewLongRowsSpreadOverThreadsAttendAsInTasks) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  constexpr int64_t kPage = 16;
  KvPages pages(96, kPage, 1024);
  const SeqId a = pages.allocate(), b = pages.allocate();
  for (int64_t pos = 0; pos < 700; pos += kPage) {  // interleaved, so each sequence's pages are scattered
    if (pos < 600) pages.write(a, pos, std::min<int64_t>(pos + kPage, 600));
    pages.write(b, pos, pos + kPage);
  }
  const int64_t rows = pages.page_count() * kPage;
  for (int hd : {64, 68}) {
    const AttentionShape shape{9, 3, hd, 1.0f / std::sqrt(float(hd))};
    const int64_t width = shape.n_heads * hd;
    for (TensorType type : {TensorType::F16, TensorType::F32}) {
      SCOPED_TRACE(std::string(tensor_type_name(type)) + " head_dim " + std::to_string(hd));
      const Cache kc = make_cache(type, rows, shape.n_kv_heads, hd, false, rng_);
      const Cache vc = make_cache(type, rows, shape.n_kv_heads, hd, false, rng_);
      const auto q = normal(width * 3, 1.5f);
      // a's step at 599, then b's chunk of two at 698 and 699.
      const auto run_a = [&](std::vector<float>& out) {
        return AttentionRun{&q[0], &out[0], 599, 1, pages.pages(a).data(), kPage};
      };
      const auto run_b = [&](std::vector<float>& out) {
        return AttentionRun{&q[width], &out[width], 698, 2, pages.pages(b).data(), kPage};
      };
      std::vector<float> together(width * 3);
      ThreadPool two(2);
      const AttentionRun both[2] = {run_a(together), run_b(together)};  // 3 rows x 3 KV heads: a task each
      attention_runs(both, kc.view, vc.view, shape, two, k());
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> apart(width * 3);
        const AttentionRun alone_a = run_a(apart), alone_b = run_b(apart);
        attention_runs({&alone_a, 1}, kc.view, vc.view, shape, pool, k());
        attention_runs({&alone_b, 1}, kc.view, vc.view, shape, pool, k());
        EXPECT_EQ(std::memcmp(apart.data(), together.data(), apart.size() * 4), 0) << threads << " threads";
      }
      const std::pair<SeqId, int64_t> row_pos[3] = {{a, 599}, {b, 698}, {b, 699}};
      for (int r = 0; r < 3; ++r) {
        const auto [seq, pos] = row_pos[r];
        const auto ref = naive_attention(&q[r * width], kc, vc, pos, shape, [&](int64_t j) { return pages.slot(seq, j); });
        for (int64_t i = 0; i < width; ++i) ASSERT_NEAR(together[r * width + i], ref[i], 2e-5) << "row " << r << " i " << i;
      }
    }
  }
}


// Qwen and Gemma pair dimension i with i + rope_dim/2; a partial rope_dim
// leaves the head's remaining values as they were.
TEST(CpuOps, RopeRotatesHalvesAndLeavesThePastRopeDim) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> dist;
  const int heads = 2, hd = 32, rot = 16;
  std::vector<float> freq(rot / 2);
  for (int i = 0; i < rot / 2; ++i) freq[i] = float(std::pow(10000.0, -2.0 * i / rot));
  for (int64_t pos : {0, 3, 5000}) {
    std::vector<float> x(heads * hd);
    for (auto& v : x) v = dist(rng);
    const auto orig = x;
    rope(x.data(), heads, {hd, rot, RopeStyle::Halves}, pos, freq.data());
    for (int h = 0; h < heads; ++h) {
      for (int i = 0; i < rot / 2; ++i) {
        const std::complex<double> z(orig[h * hd + i], orig[h * hd + i + rot / 2]);
        const std::complex<double> r = z * std::polar(1.0, double(pos) * double(freq[i]));
        ASSERT_NEAR(x[h * hd + i], r.real(), 1e-5) << "pos " << pos << " pair " << i;
        ASSERT_NEAR(x[h * hd + i + rot / 2], r.imag(), 1e-5) << "pos " << pos << " pair " << i;
      }
      for (int d = rot; d < hd; ++d) ASSERT_EQ(x[h * hd + d], orig[h * hd + d]);
    }
  }
}

}  // namespace
}  // namespace nt::cpu
