// CPU dot-product kernels and matmul against float64 references built from
// the reference dequantizer (quant/quant.h), on every ISA this CPU runs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace nt::cpu {
namespace {

uint64_t fresh_seed() { return uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count()); }

std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

const TensorType kWeightTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q4_0,
                                   TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                                   TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                   TensorType::Q6_K, TensorType::MXFP4};

void put_half(uint8_t* p, float v) {
  const uint16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Random bytes everywhere (every bit pattern of quants and sub-scales), with
// the fp16 super-scales set to finite values of either sign.
std::vector<uint8_t> random_rows(TensorType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  const size_t rb = row_bytes(type, cols);
  std::vector<uint8_t> data(rb * rows);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = normal(rng);
      if (type == TensorType::F32) std::memcpy(&data[4 * i], &v, 4);
      const uint16_t h = type == TensorType::F16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      if (type != TensorType::F32) std::memcpy(&data[2 * i], &h, 2);
    }
    return data;
  }
  for (auto& b : data) b = uint8_t(rng());
  const TensorTypeInfo& info = tensor_type_info(type);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / info.block_elems; ++b) {
      uint8_t* blk = &data[r * rb + b * info.block_bytes];
      switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q5_0:
        case TensorType::Q8_0: put_half(blk, 0.05f * uni(rng)); break;
        case TensorType::Q4_1:
        case TensorType::Q5_1:
          put_half(blk, 0.05f * uni(rng));
          put_half(blk + 2, 0.3f * uni(rng));
          break;
        case TensorType::Q2_K: put_half(blk + offsetof(BlockQ2_K, d), 0.02f * uni(rng));
                               put_half(blk + offsetof(BlockQ2_K, dmin), 0.02f * uni(rng)); break;
        case TensorType::Q3_K: put_half(blk + offsetof(BlockQ3_K, d), 0.02f * uni(rng)); break;
        case TensorType::Q4_K:
          put_half(blk + offsetof(BlockQ4_K, d), 0.01f * uni(rng));
          put_half(blk + offsetof(BlockQ4_K, dmin), 0.01f * uni(rng));
          break;
        case TensorType::Q5_K:
          put_half(blk + offsetof(BlockQ5_K, d), 0.005f * uni(rng));
          put_half(blk + offsetof(BlockQ5_K, dmin), 0.01f * uni(rng));
          break;
        case TensorType::Q6_K: put_half(blk + offsetof(BlockQ6_K, d), 0.0005f * uni(rng)); break;
        case TensorType::MXFP4: blk[0] = uint8_t(116 + rng() % 8); break;  // scales 2^-12 .. 2^-5
        default: ADD_FAILURE() << "no generator for " << tensor_type_name(type);
      }
    }
  }
  return data;
}

// Activations with a few outliers, as LLM hidden states have.
std::vector<float> random_activations(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  for (int i = 0; i < 3; ++i) x[rng() % n] *= 20.0f;
  return x;
}

std::vector<float> dequantized(TensorType type, const void* data, int64_t n) {
  std::vector<float> out(n);
  dequantize_row(type, data, out.data(), n);
  return out;
}

TensorType act_tensor_type(ActFormat f) {
  switch (f) {
    case ActFormat::Q8_0: return TensorType::Q8_0;
    case ActFormat::Q8_1: return TensorType::Q8_1;
    case ActFormat::Q8_K: return TensorType::Q8_K;
    case ActFormat::F32: break;
  }
  return TensorType::F32;
}

std::vector<uint8_t> quantize_activations(const Kernels& k, ActFormat f, const std::vector<float>& x) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> out(act_row_bytes(f, n));
  switch (f) {
    case ActFormat::F32: std::memcpy(out.data(), x.data(), out.size()); break;
    case ActFormat::Q8_0: k.quantize_q8_0(x.data(), reinterpret_cast<BlockQ8_0*>(out.data()), n); break;
    case ActFormat::Q8_1: k.quantize_q8_1(x.data(), reinterpret_cast<BlockQ8_1*>(out.data()), n); break;
    case ActFormat::Q8_K: k.quantize_q8_k(x.data(), reinterpret_cast<BlockQ8_K*>(out.data()), n); break;
  }
  return out;
}

// An activation row as the several-token dots of `type` take it: split for
// the legacy formats (split_row), act_format's blocks otherwise.
std::vector<uint8_t> tokens_row(TensorType type, const std::vector<uint8_t>& blocks, int64_t n) {
  if (!takes_split_rows(type)) return blocks;
  std::vector<uint8_t> out(split_row_bytes(act_format(type), n));
  split_row(act_format(type), blocks.data(), n, out.data());
  return out;
}

// Q4_1/Q5_1 dots take sum(a) per block from the fp16 field s of BlockQ8_1, so
// their min term m * s carries up to half an fp16 ulp of s: this bounds it.
double min_term_rounding(TensorType type, const uint8_t* row, const float* a, int64_t n) {
  if (type != TensorType::Q4_1 && type != TensorType::Q5_1) return 0;
  const size_t block_bytes = tensor_type_info(type).block_bytes;
  double bound = 0;
  for (int64_t b = 0; b < n / kQK; ++b) {
    uint16_t m;
    std::memcpy(&m, row + b * block_bytes + 2, 2);
    double sum = 0;
    for (int64_t i = b * kQK; i < (b + 1) * kQK; ++i) sum += a[i];
    bound += std::fabs(fp16_to_fp32(m)) * (std::fabs(sum) * 1.01 + 1e-3) / 2048;
  }
  return bound;
}

class CpuKernelTest : public ::testing::TestWithParam<Isa> {
 protected:
  const Kernels& k() const { return kernels_for(GetParam()); }
  uint64_t seed_ = fresh_seed();
  std::mt19937_64 rng_{seed_};
};

std::string isa_param_name(const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); }

INSTANTIATE_TEST_SUITE_P(Isas, CpuKernelTest, ::testing::ValuesIn(available_isas()), isa_param_name);

TEST_P(CpuKernelTest, ActivationQuantizersRoundToTheNearestStep) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  const int64_t n = 1024;
  const std::vector<float> x = random_activations(n, rng_);
  for (ActFormat f : {ActFormat::Q8_0, ActFormat::Q8_1, ActFormat::Q8_K}) {
    const TensorType t = act_tensor_type(f);
    SCOPED_TRACE(std::string(tensor_type_name(t)));
    const std::vector<uint8_t> q = quantize_activations(k(), f, x);
    const std::vector<float> back = dequantized(t, q.data(), n);
    const int64_t block = f == ActFormat::Q8_K ? kQK_K : kQK;
    for (int64_t b = 0; b < n / block; ++b) {
      float amax = 0;
      for (int64_t i = b * block; i < (b + 1) * block; ++i) amax = std::max(amax, std::fabs(x[i]));
      // The step is amax / 127 (stored as fp16 for Q8_0/Q8_1: 1e-3 relative).
      const double step = amax / 127.0 * (f == ActFormat::Q8_K ? 1.0 : 1.001);
      for (int64_t i = b * block; i < (b + 1) * block; ++i) {
        ASSERT_LE(std::fabs(double(back[i]) - x[i]), 0.5 * step + 1e-3 * std::fabs(x[i]) + 1e-7) << "element " << i;
      }
    }
    if (f == ActFormat::Q8_1) {
      const auto* blocks = reinterpret_cast<const BlockQ8_1*>(q.data());
      for (int64_t b = 0; b < n / kQK; ++b) {
        int sum = 0;
        for (int8_t v : blocks[b].qs) sum += v;
        const double expect = double(fp16_to_fp32(blocks[b].d)) * sum;
        EXPECT_NEAR(fp16_to_fp32(blocks[b].s), expect, std::fabs(expect) * 1e-3 + 1e-6) << "block " << b;
      }
    }
    if (f == ActFormat::Q8_K) {
      const auto* blocks = reinterpret_cast<const BlockQ8_K*>(q.data());
      for (int64_t b = 0; b < n / kQK_K; ++b) {
        for (int g = 0; g < 16; ++g) {
          int sum = 0;
          for (int i = 0; i < 16; ++i) sum += blocks[b].qs[16 * g + i];
          EXPECT_EQ(blocks[b].bsums[g], sum) << "block " << b << " group " << g;
        }
      }
    }
  }
}

// vec_dot against sum(dequantized weights * dequantized activations) in
// float64. The error budget: float rounding relative to sum |w * a|, plus the
// fp16 rounding of the Q8_1 block sums that feed the min term.
TEST_P(CpuKernelTest, VecDotMatchesFloat64Reference) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  for (TensorType type : kWeightTypes) {
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const ActFormat f = act_format(type);
    const int64_t block = tensor_type_info(type).block_elems;
    for (int64_t n : {block == kQK_K ? kQK_K : kQK, block == kQK_K ? 5 * kQK_K : 19 * kQK, int64_t(block == 1 ? 103 : 0)}) {
      if (n == 0) continue;
      SCOPED_TRACE("n " + std::to_string(n));
      for (int rep = 0; rep < 20; ++rep) {
        const std::vector<uint8_t> w = random_rows(type, 1, n, rng_);
        const std::vector<float> x = random_activations(n, rng_);
        const std::vector<uint8_t> a = quantize_activations(k(), f, x);
        const std::vector<float> wf = dequantized(type, w.data(), n);
        const std::vector<float> af = f == ActFormat::F32 ? x : dequantized(act_tensor_type(f), a.data(), n);
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          ref += double(wf[i]) * af[i];
          mag += std::fabs(double(wf[i]) * af[i]);
        }
        const double tol = 2e-5 * mag + min_term_rounding(type, w.data(), af.data(), n) + 1e-30;
        const float got = k().vec_dot[size_t(type)](w.data(), a.data(), n);
        ASSERT_NEAR(got, ref, tol) << "rep " << rep;
      }
    }
  }
}

// The several-token form (a batch's decode rows) against one-token calls:
// the same numbers bit for bit, for every count it takes, rows of an odd
// number of blocks (the tail block) and scattered activation rows.
TEST_P(CpuKernelTest, VecDotTokensEqualsOneTokenCallsBitForBit) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  int formats = 0;
  for (TensorType type : kWeightTypes) {
    const VecDotTokensFn dots = k().vec_dot_tokens[size_t(type)];
    if (!dots) continue;
    ++formats;
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const ActFormat f = act_format(type);
    const int64_t block = tensor_type_info(type).block_elems;
    for (int64_t n : {block, 5 * block, 19 * block}) {
      const std::vector<uint8_t> w = random_rows(type, 1, n, rng_);
      const int max = k().vec_dot_tokens_max;
      const size_t bytes = act_row_bytes(f, n);
      // The dots' rows lie apart, not packed; the one-token calls take the blocks.
      const size_t stride = tokens_row(type, std::vector<uint8_t>(bytes), n).size() + 64;
      std::vector<uint8_t> acts(bytes * size_t(max)), token_acts(stride * size_t(max));
      for (int t = 0; t < max; ++t) {
        const std::vector<uint8_t> a = quantize_activations(k(), f, random_activations(n, rng_));
        std::copy(a.begin(), a.end(), acts.begin() + ptrdiff_t(t * bytes));
        const std::vector<uint8_t> row = tokens_row(type, a, n);
        std::copy(row.begin(), row.end(), token_acts.begin() + ptrdiff_t(t * stride));
      }
      for (int tokens = 1; tokens <= max; ++tokens) {
        SCOPED_TRACE("n " + std::to_string(n) + " tokens " + std::to_string(tokens));
        std::vector<float> got(size_t(2 * tokens), NAN);
        dots(w.data(), token_acts.data(), stride, tokens, n, got.data(), 2);
        for (int t = 0; t < tokens; ++t) {
          const float want = k().vec_dot[size_t(type)](w.data(), acts.data() + t * bytes, n);
          ASSERT_EQ(std::memcmp(&got[size_t(2 * t)], &want, 4), 0) << "token " << t << ": " << got[size_t(2 * t)] << " vs " << want;
          ASSERT_TRUE(std::isnan(got[size_t(2 * t + 1)])) << "wrote past its stride";
        }
      }
    }
  }
  if (GetParam() != Isa::Scalar) {
    EXPECT_EQ(formats, 10) << "every quantized format but MXFP4";
  }
}

// The legacy formats' dots give the same bits on AVX2 and AVX-512 machines
// (the 512-bit kernel holds the 256-bit one's two accumulator sets as its
// halves), so a host's CPU layers compute what the development machine's do.
TEST(CpuKernels, LegacyDotsAreTheSameBitsOnAvx2AndAvx512) {
  if (!isa_supported(Isa::Avx2) || !isa_supported(Isa::Avx512)) GTEST_SKIP() << "needs AVX2 and AVX-512";
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const Kernels& narrow = kernels_for(Isa::Avx2);
  const Kernels& wide = kernels_for(Isa::Avx512);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0}) {
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const ActFormat f = act_format(type);
    for (int64_t n : {int64_t(kQK), 5 * int64_t(kQK), 18 * int64_t(kQK), 19 * int64_t(kQK)}) {
      const std::vector<uint8_t> w = random_rows(type, 1, n, rng);
      const size_t stride = act_row_bytes(f, n), split_stride = split_row_bytes(f, n);
      std::vector<uint8_t> acts, split_acts;
      for (int t = 0; t < wide.vec_dot_tokens_max; ++t) {
        const std::vector<uint8_t> a = quantize_activations(narrow, f, random_activations(n, rng));
        acts.insert(acts.end(), a.begin(), a.end());
        const std::vector<uint8_t> split = tokens_row(type, a, n);
        split_acts.insert(split_acts.end(), split.begin(), split.end());
      }
      for (int tokens = 1; tokens <= wide.vec_dot_tokens_max; ++tokens) {
        SCOPED_TRACE("n " + std::to_string(n) + " tokens " + std::to_string(tokens));
        std::vector<float> got(static_cast<size_t>(tokens)), narrow_got(static_cast<size_t>(tokens));
        wide.vec_dot_tokens[size_t(type)](w.data(), split_acts.data(), split_stride, tokens, n, got.data(), 1);
        for (int t = 0; t < tokens; t += narrow.vec_dot_tokens_max) {
          narrow.vec_dot_tokens[size_t(type)](w.data(), split_acts.data() + size_t(t) * split_stride, split_stride,
                                              std::min(narrow.vec_dot_tokens_max, tokens - t), n, &narrow_got[size_t(t)], 1);
        }
        for (int t = 0; t < tokens; ++t) {
          const float want = narrow.vec_dot[size_t(type)](w.data(), acts.data() + size_t(t) * stride, n);
          ASSERT_EQ(std::memcmp(&narrow_got[size_t(t)], &want, 4), 0) << "AVX2 token " << t;
          ASSERT_EQ(std::memcmp(&got[size_t(t)], &want, 4), 0) << "token " << t << ": " << got[size_t(t)] << " vs " << want;
        }
      }
    }
  }
}

// Every ISA's vectorised panel unpacking writes what the scalar reference
// writes, bit for bit, including the zero rows of a partial panel.
TEST_P(CpuKernelTest, GemmUnpackEqualsTheScalarPanelBitForBit) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  constexpr int R = kGemmRows;
  const int64_t n = 2 * kQK_K;
  for (TensorType type : kWeightTypes) {
    if (act_format(type) == ActFormat::F32) continue;
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const std::vector<uint8_t> w = random_rows(type, R, n, rng_);
    for (int rows : {R, 1}) {
      SCOPED_TRACE("rows " + std::to_string(rows));
      struct Buffers {
        std::vector<uint8_t> q = std::vector<uint8_t>(size_t(n) * R, 0xAB);
        std::vector<float> scale = std::vector<float>(size_t(n / 32) * R * 2, NAN);
        std::vector<float> offset = std::vector<float>(size_t(n / 16) * R, NAN);
        GemmPanel panel{q.data(), scale.data(), offset.data(), false, false};
      } want, got;
      gemm_unpack_panel(type, w.data(), row_bytes(type, n), rows, n, k().gemm_unsigned_q8, want.panel);
      k().gemm_unpack(type, w.data(), row_bytes(type, n), rows, n, k().gemm_unsigned_q8, got.panel);
      EXPECT_EQ(got.q, want.q);
      EXPECT_EQ(std::memcmp(got.scale.data(), want.scale.data(), want.scale.size() * 4), 0) << "scales";
      EXPECT_EQ(std::memcmp(got.offset.data(), want.offset.data(), want.offset.size() * 4), 0) << "offsets";
      EXPECT_EQ(got.panel.signed_q, want.panel.signed_q);
      EXPECT_EQ(got.panel.uniform_scale, want.panel.uniform_scale);
    }
  }
}

// matmul on f32 inputs: the reference uses the exact f32 activations, so the
// budget adds the int8 activation rounding, an error of independent terms
// |w_i| * step_i / 2 * U(-1, 1): bounded here at 6 standard deviations.
void check_matmul(const Kernels& k, TensorType type, int64_t rows, int64_t cols, int n_tokens, std::mt19937_64& rng,
                  ThreadPool& pool) {
  SCOPED_TRACE(std::string(tensor_type_name(type)) + " rows " + std::to_string(rows) + " cols " +
               std::to_string(cols) + " tokens " + std::to_string(n_tokens));
  const std::vector<uint8_t> w = random_rows(type, rows, cols, rng);
  const std::vector<float> x = random_activations(cols * n_tokens, rng);
  std::vector<float> y(rows * n_tokens, NAN);
  matmul(WeightView::dense(w.data(), type, rows, cols, "test"), x.data(), y.data(), n_tokens, pool, k);
  const bool quantized_acts = act_format(type) != ActFormat::F32;
  const int64_t step_block = act_format(type) == ActFormat::Q8_K ? kQK_K : kQK;
  const size_t rb = row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> wf = dequantized(type, w.data() + r * rb, cols);
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x.data() + t * cols;
      double ref = 0, mag = 0, var = 0;
      const int64_t span = quantized_acts ? step_block : cols;  // elements sharing one activation scale
      for (int64_t lo = 0; lo < cols; lo += span) {
        const int64_t hi = lo + span;
        double amax = 0;
        for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(double(xt[i])));
        const double half_step = quantized_acts ? amax / 127.0 / 2 : 0;
        for (int64_t i = lo; i < hi; ++i) {
          ref += double(wf[i]) * xt[i];
          mag += std::fabs(double(wf[i]) * xt[i]);
          var += double(wf[i]) * wf[i] * half_step * half_step / 3;
        }
      }
      const double tol =
          6 * std::sqrt(var) + 1e-4 * mag + 2 * min_term_rounding(type, w.data() + r * rb, xt, cols) + 1e-30;
      ASSERT_NEAR(y[t * rows + r], ref, tol) << "row " << r << " token " << t;
    }
  }
}

// 1 and 3 tokens take the fused per-row dot path, 9 that path for K-quants
// (several calls of the several-token dot) and the GEMM for the others, 17,
// 27 and 64 the blocked GEMM (with token counts that leave partial 8- and
// 16-token tiles).
TEST_P(CpuKernelTest, MatmulMatchesFloat64Reference) {
  SCOPED_TRACE("seed " + std::to_string(seed_));
  ThreadPool pool(3);
  for (TensorType type : kWeightTypes) {
    for (int n_tokens : {1, 3, 9, 17, 27, 64}) check_matmul(k(), type, 37, 512, n_tokens, rng_, pool);
  }
  check_matmul(k(), TensorType::Q4_1, 5, 96, 9, rng_, pool);
  check_matmul(k(), TensorType::Q8_0, 1, 32, 5, rng_, pool);
}

// Each group's tokens get, bit for bit, what a matmul call of its `alone`
// tokens gives them, whatever else shares the call: the property that lets a
// batched sequence reproduce its single-sequence output exactly.
TEST(CpuMatmul, TokenGroupsGetTheNumbersOfTheirOwnCallsBitForBit) {
  std::mt19937_64 rng(fresh_seed());
  ThreadPool pool(2);
  const int64_t rows = 37, cols = 512;
  for (TensorType type : {TensorType::Q4_1, TensorType::Q4_K, TensorType::F32}) {
    SCOPED_TRACE(std::string(tensor_type_name(type)));
    const std::vector<uint8_t> w = random_rows(type, rows, cols, rng);
    const WeightView view = WeightView::dense(w.data(), type, rows, cols, "test");
    // A decode step, a prompt of 5, one of 2, two tokens cut from a call of 9, a decode step,
    // then prompts of 20 and 27 whose tokens fall in other 16-token tiles than in their own calls
    // (a last tile partly padding on both sides).
    const std::vector<TokenGroup> groups = {{0, 1, 1}, {1, 5, 5}, {6, 2, 2}, {8, 2, 9}, {10, 1, 1}, {11, 20, 20}, {31, 27, 27}};
    const int64_t tokens = 58;
    const std::vector<float> x = random_activations(cols * tokens, rng);
    std::vector<float> y(size_t(rows * tokens), NAN);
    matmul_groups(view, x.data(), y.data(), groups, pool);
    for (const TokenGroup& g : groups) {
      SCOPED_TRACE("group at " + std::to_string(g.first));
      // The group's own call: its tokens first, then the rest of its `alone`.
      std::vector<float> own(x.begin() + g.first * cols, x.begin() + (g.first + g.count) * cols);
      if (g.alone > g.count) {
        const std::vector<float> rest = random_activations(cols * (g.alone - g.count), rng);
        own.insert(own.end(), rest.begin(), rest.end());
      }
      std::vector<float> want(size_t(rows * g.alone));
      matmul(view, own.data(), want.data(), int(g.alone), pool);
      for (int64_t i = 0; i < rows * g.count; ++i) ASSERT_EQ(y[size_t(g.first * rows + i)], want[size_t(i)]) << i;
    }
  }
}

TEST(CpuMatmul, RejectsBadShapes) {
  ThreadPool pool(1);
  std::vector<uint8_t> w(1024);
  std::vector<float> x(64), y(64);
  WeightView bad{w.data(), TensorType::Q4_K, 1, 100, 100, "blk.0.bad"};
  EXPECT_THROW(matmul(bad, x.data(), y.data(), 1, pool), Error);
  WeightView i32{w.data(), TensorType::I32, 1, 4, 16, "blk.0.int"};
  EXPECT_THROW(matmul(i32, x.data(), y.data(), 1, pool), Error);
}

TEST(CpuMatmul, EmbeddingRowDecodesOneRow) {
  std::mt19937_64 rng(fresh_seed());
  const std::vector<uint8_t> w = random_rows(TensorType::Q8_0, 7, 64, rng);
  const WeightView view = WeightView::dense(w.data(), TensorType::Q8_0, 7, 64, "token_embd");
  std::vector<float> out(64);
  embedding_row(view, 5, out.data());
  EXPECT_EQ(out, dequantized(TensorType::Q8_0, w.data() + 5 * row_bytes(TensorType::Q8_0, 64), 64));
  EXPECT_THROW(embedding_row(view, 7, out.data()), Error);
}

}  // namespace
}  // namespace nt::cpu
