// Round trips and error handling of the reference codecs. Bit-exactness with
// gguf-py is checked in tests/python/test_quant_oracle.py; these tests guard
// the basics without Python.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "quant/tensor_type.h"

namespace nt {
namespace {

std::vector<float> gaussian(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist;
  std::vector<float> x(n);
  for (auto& v : x) v = dist(gen);
  return x;
}

double relative_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += double(a[i] - b[i]) * double(a[i] - b[i]);
    ref += double(b[i]) * double(b[i]);
  }
  return std::sqrt(err / ref);
}

std::vector<float> round_trip(TensorType type, const std::vector<float>& x, const float* importance = nullptr) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> packed(row_bytes(type, n));
  quantize_row(type, x.data(), packed.data(), n, importance);
  std::vector<float> back(x.size());
  dequantize_row(type, packed.data(), back.data(), n);
  return back;
}

struct Bound {
  TensorType type;
  double max_relative_rms;  // measured on N(0,1) data + 25%; the oracle test is tighter
};

class RoundTrip : public ::testing::TestWithParam<Bound> {};

TEST_P(RoundTrip, ErrorWithinBound) {
  const auto [type, bound] = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  const auto x = gaussian(8 * kQK_K * 16, seed);
  const double err = relative_rms(round_trip(type, x), x);
  EXPECT_LE(err, bound) << tensor_type_name(type);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, RoundTrip,
                         ::testing::Values(Bound{TensorType::F32, 0.0}, Bound{TensorType::F16, 3e-4},
                                           Bound{TensorType::BF16, 2.5e-3}, Bound{TensorType::Q8_0, 0.007},
                                           Bound{TensorType::Q8_1, 0.007}, Bound{TensorType::Q8_K, 0.009},
                                           Bound{TensorType::Q5_0, 0.055}, Bound{TensorType::Q5_1, 0.05},
                                           Bound{TensorType::Q4_0, 0.11}, Bound{TensorType::Q4_1, 0.10},
                                           Bound{TensorType::Q6_K, 0.021}, Bound{TensorType::Q5_K, 0.044},
                                           Bound{TensorType::Q4_K, 0.088}, Bound{TensorType::Q3_K, 0.18},
                                           Bound{TensorType::Q2_K, 0.33}),
                         [](const auto& info) { return std::string(tensor_type_name(info.param.type)); });

TEST(QuantCodec, ZerosStayZero) {
  const std::vector<float> zeros(kQK_K * 2, 0.0f);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                          TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                          TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_K}) {
    for (float v : round_trip(type, zeros)) ASSERT_EQ(v, 0.0f) << tensor_type_name(type);
  }
}

TEST(QuantCodec, KQuantsKeepPerBlockMagnitude) {
  // Super-blocks far apart in scale must not share precision.
  auto x = gaussian(kQK_K * 3, 7);
  for (int i = 0; i < kQK_K; ++i) {
    x[i] *= 1e-3f;
    x[2 * kQK_K + i] *= 1e3f;
  }
  for (TensorType type : {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                          TensorType::Q6_K}) {
    const auto back = round_trip(type, x);
    for (int b = 0; b < 3; ++b) {
      const std::vector<float> xs(x.begin() + b * kQK_K, x.begin() + (b + 1) * kQK_K);
      const std::vector<float> ys(back.begin() + b * kQK_K, back.begin() + (b + 1) * kQK_K);
      EXPECT_LT(relative_rms(ys, xs), 0.4) << tensor_type_name(type) << " block " << b;
    }
  }
}

TEST(QuantCodec, ImportanceShiftsErrorToUnweightedElements) {
  const auto x = gaussian(kQK_K * 32, 11);
  std::vector<float> importance(x.size(), 1.0f);
  for (size_t i = 0; i < x.size(); i += 8) importance[i] = 50.0f;
  for (TensorType type : {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                          TensorType::Q6_K}) {
    const auto plain = round_trip(type, x);
    const auto weighted = round_trip(type, x, importance.data());
    double err_plain = 0, err_weighted = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err_plain += importance[i] * (plain[i] - x[i]) * (plain[i] - x[i]);
      err_weighted += importance[i] * (weighted[i] - x[i]) * (weighted[i] - x[i]);
    }
    EXPECT_LT(err_weighted, 0.9 * err_plain) << tensor_type_name(type);
  }
}

TEST(QuantCodec, Q8KBlockSumsMatchCodes) {
  const auto x = gaussian(kQK_K * 4, 3);
  std::vector<BlockQ8_K> blocks(4);
  quantize_row(TensorType::Q8_K, x.data(), blocks.data(), int64_t(x.size()));
  for (const auto& blk : blocks) {
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += blk.qs[16 * g + i];
      EXPECT_EQ(blk.bsums[g], sum);
    }
  }
}

TEST(QuantCodec, Q8_1SumTracksInputSum) {
  const auto x = gaussian(kQK * 8, 5);
  std::vector<BlockQ8_1> blocks(8);
  quantize_row(TensorType::Q8_1, x.data(), blocks.data(), int64_t(x.size()));
  for (int b = 0; b < 8; ++b) {
    float input_sum = 0;
    for (int i = 0; i < kQK; ++i) input_sum += x[b * kQK + i];
    // s = d * sum(codes); each code is off by at most half a step.
    const float d = fp16_to_fp32(blocks[b].d);
    EXPECT_NEAR(fp16_to_fp32(blocks[b].s), input_sum, kQK * d / 2 + std::fabs(input_sum) * 1e-3f);
  }
}

TEST(QuantCodec, PartialBlocksAreRejected) {
  std::vector<float> x(300, 1.0f);
  std::vector<uint8_t> out(4096);
  EXPECT_THROW(quantize_row(TensorType::Q4_K, x.data(), out.data(), 300), Error);
  EXPECT_THROW(quantize_row(TensorType::Q4_0, x.data(), out.data(), 33), Error);
  EXPECT_THROW(dequantize_row(TensorType::Q6_K, out.data(), x.data(), 128), Error);
  EXPECT_THROW(row_bytes(TensorType::Q8_0, 31), Error);
  EXPECT_EQ(row_bytes(TensorType::Q4_K, 512), 288u);
  EXPECT_EQ(row_bytes(TensorType::Q4_0, 64), 36u);
}

TEST(QuantCodec, IntegerTypesHaveNoCodec) {
  EXPECT_FALSE(can_quantize(TensorType::I32));
  EXPECT_FALSE(can_quantize(TensorType::F64));
  EXPECT_TRUE(can_quantize(TensorType::Q3_K));
  float x[4] = {};
  int32_t out[4];
  EXPECT_THROW(quantize_row(TensorType::I32, x, out, 4), Error);
  EXPECT_THROW(dequantize_row(TensorType::I32, out, x, 4), Error);
}

}  // namespace
}  // namespace nt
