// Portable kernels: the fallback on any CPU and the baseline the SIMD
// kernels are tested against.
#include <cmath>

#include "backend/cpu/block_decode.h"
#include "backend/cpu/kernels.h"

namespace nt::cpu {

namespace {

float absmax(const float* x, int64_t n) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return amax;
}

// Rounds x[0..n) to int8 with scale d = absmax / 127; returns the unrounded d.
float quantize_block(const float* x, int64_t n, int8_t* q) {
  const float d = absmax(x, n) / 127.0f;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::nearbyint(x[i] * id));
  return d;
}

int block_sum(const int8_t* q, int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += q[i];
  return s;
}

void quantize_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) y[b].d = fp32_to_fp16(quantize_block(x + b * kQK, kQK, y[b].qs));
}

void quantize_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK; ++b) {
    y[b].d = fp32_to_fp16(quantize_block(x + b * kQK, kQK, y[b].qs));
    y[b].s = fp32_to_fp16(fp16_to_fp32(y[b].d) * float(block_sum(y[b].qs, kQK)));
  }
}

void quantize_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    y[b].d = quantize_block(x + b * kQK_K, kQK_K, y[b].qs);
    for (int g = 0; g < kQK_K / 16; ++g) y[b].bsums[g] = int16_t(block_sum(y[b].qs + 16 * g, 16));
  }
}

template <TensorType type>
float vec_dot_legacy(const void* w, const void* act, int64_t n) {
  constexpr bool has_min = type == TensorType::Q4_1 || type == TensorType::Q5_1;
  const size_t block_bytes = tensor_type_info(type).block_bytes;
  const auto* wrow = static_cast<const uint8_t*>(w);
  LegacyBlock b;
  float sum = 0;
  for (int64_t i = 0; i < n / kQK; ++i) {
    decode_legacy(type, wrow + i * block_bytes, b);
    const int8_t* aq;
    float ad, as = 0;
    if constexpr (has_min) {
      const auto& a = static_cast<const BlockQ8_1*>(act)[i];
      aq = a.qs, ad = fp16_to_fp32(a.d), as = fp16_to_fp32(a.s);
    } else {
      const auto& a = static_cast<const BlockQ8_0*>(act)[i];
      aq = a.qs, ad = fp16_to_fp32(a.d);
    }
    int isum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = type == TensorType::Q8_0 ? int(int8_t(b.q[j])) : int(b.q[j]) - b.zero;
      isum += q * aq[j];
    }
    sum += b.d * ad * float(isum) + b.m * as;
  }
  return sum;
}

template <TensorType type>
float vec_dot_k(const void* w, const void* act, int64_t n) {
  const size_t block_bytes = tensor_type_info(type).block_bytes;
  const auto* wrow = static_cast<const uint8_t*>(w);
  const auto* a = static_cast<const BlockQ8_K*>(act);
  KBlock b;
  float sum = 0;
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    decode_k(type, wrow + i * block_bytes, b);
    int isum = 0, msum = 0;
    for (int g = 0; g < 16; ++g) {
      int gsum = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) gsum += (int(b.q[j]) - b.zero) * a[i].qs[j];
      isum += b.sc[g] * gsum;
      msum += b.m[g] * a[i].bsums[g];
    }
    sum += a[i].d * (b.d * float(isum) - b.dmin * float(msum));
  }
  return sum;
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16(const uint16_t* a, const float* b, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(a[i]) * b[i];
  return sum;
}

float vec_dot_f32(const void* w, const void* act, int64_t n) {
  return dot_f32(static_cast<const float*>(w), static_cast<const float*>(act), n);
}

float vec_dot_f16(const void* w, const void* act, int64_t n) {
  return dot_f16(static_cast<const uint16_t*>(w), static_cast<const float*>(act), n);
}

float vec_dot_bf16(const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(act);
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_fp32(a[i]) * b[i];
  return sum;
}

void axpy_f32(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

void axpy_f16(float alpha, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * fp16_to_fp32(x[i]);
}

void dot_f16_heads(const uint16_t* const* a, int keys, const float* b, int64_t b_stride, int heads, int64_t n, float* out,
                   int64_t out_stride) {
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < keys; ++j) out[h * out_stride + j] = dot_f16(a[j], b + h * b_stride, n);
  }
}

void axpy_f16_heads(const float* alpha, int64_t alpha_stride, const uint16_t* const* x, int keys, float* y,
                    int64_t y_stride, int heads, int64_t n) {
  for (int j = 0; j < keys; ++j) {
    for (int h = 0; h < heads; ++h) axpy_f16(alpha[h * alpha_stride + j], x[j], y + h * y_stride, n);
  }
}

float exp_sum(float* x, int64_t n, float shift) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void silu_mul(const float* g, const float* u, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void gemm_quantize(const float* x, int64_t n, int8_t* q, float* scale, float* gsum) {
  for (int64_t c = 0; c < n / 32; ++c) {
    scale[c] = quantize_block(x + 32 * c, 32, q + 32 * c);
    gsum[2 * c] = scale[c] * float(block_sum(q + 32 * c, 16));
    gsum[2 * c + 1] = scale[c] * float(block_sum(q + 32 * c + 16, 16));
  }
}

void gemm_tile(const GemmPanel& p, const GemmActs* groups, int64_t n, int rows, int tokens, float* y,
               int64_t y_stride) {
  constexpr int G = kGemmTokenGroup;
  const int64_t chunks = n / 32, n_groups = n / 16;
  for (int t = 0; t < tokens; ++t) {
    const GemmActs& a = groups[t / G];
    const int lane = t % G;
    for (int r = 0; r < rows; ++r) {
      float sum = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        const uint8_t* wq = p.q + (c * kGemmRows + r) * 32;
        for (int half = 0; half < 2; ++half) {
          int isum = 0;
          for (int i = 16 * half; i < 16 * half + 16; ++i) {
            const int8_t x = a.q[((32 * c + i) / 4 * G + lane) * 4 + i % 4];
            isum += (p.signed_q ? int(int8_t(wq[i])) : int(wq[i])) * x;
          }
          sum += a.scale[c * G + lane] * p.scale[(c * kGemmRows + r) * 2 + half] * float(isum);
        }
      }
      for (int64_t g = 0; g < n_groups; ++g) sum += p.offset[r * n_groups + g] * a.gsum[g * G + lane];
      y[t * y_stride + r] = sum;
    }
  }
}

Kernels make_scalar_kernels() {
  Kernels k{};
  k.isa = Isa::Scalar;
  k.quantize_q8_0 = quantize_q8_0;
  k.quantize_q8_1 = quantize_q8_1;
  k.quantize_q8_k = quantize_q8_k;
  auto set = [&](TensorType t, VecDotFn fn) { k.vec_dot[size_t(t)] = fn; };
  set(TensorType::F32, vec_dot_f32);
  set(TensorType::F16, vec_dot_f16);
  set(TensorType::BF16, vec_dot_bf16);
  set(TensorType::Q4_0, vec_dot_legacy<TensorType::Q4_0>);
  set(TensorType::Q4_1, vec_dot_legacy<TensorType::Q4_1>);
  set(TensorType::Q5_0, vec_dot_legacy<TensorType::Q5_0>);
  set(TensorType::Q5_1, vec_dot_legacy<TensorType::Q5_1>);
  set(TensorType::Q8_0, vec_dot_legacy<TensorType::Q8_0>);
  set(TensorType::MXFP4, vec_dot_legacy<TensorType::MXFP4>);
  set(TensorType::Q2_K, vec_dot_k<TensorType::Q2_K>);
  set(TensorType::Q3_K, vec_dot_k<TensorType::Q3_K>);
  set(TensorType::Q4_K, vec_dot_k<TensorType::Q4_K>);
  set(TensorType::Q5_K, vec_dot_k<TensorType::Q5_K>);
  set(TensorType::Q6_K, vec_dot_k<TensorType::Q6_K>);
  k.gemm_quantize = gemm_quantize;
  k.gemm_tile = gemm_tile;
  k.gemm_unsigned_q8 = false;
  k.gemm_unpack = gemm_unpack_panel;
  k.dot_f32 = dot_f32;
  k.axpy_f32 = axpy_f32;
  k.dot_f16_heads = dot_f16_heads;
  k.axpy_f16_heads = axpy_f16_heads;
  k.exp_sum = exp_sum;
  k.f32_to_f16 = f32_to_f16;
  k.silu_mul = silu_mul;
  return k;
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels table = make_scalar_kernels();
  return table;
}

}  // namespace nt::cpu
