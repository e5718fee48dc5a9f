#include "backend/cpu/block_decode.h"
#include "backend/cpu/kernels.h"
#include "core/error.h"

namespace nt::cpu {

namespace {

constexpr int R = kGemmRows;

void zero_row(int r, int64_t n, GemmPanel& p) {
  for (int64_t c = 0; c < n / 32; ++c) {
    for (int i = 0; i < 32; ++i) p.q[(c * R + r) * 32 + i] = 0;
    for (int i = 0; i < 2; ++i) p.scale[(c * R + r) * 2 + i] = 0;
  }
  for (int64_t g = 0; g < n / 16; ++g) p.offset[r * (n / 16) + g] = 0;
}

void unpack_legacy_row(TensorType type, const uint8_t* row, int r, int64_t n, bool unsigned_q8,
                       GemmPanel& p) {
  const size_t block_bytes = tensor_type_info(type).block_bytes;
  LegacyBlock b;
  for (int64_t c = 0; c < n / 32; ++c) {
    decode_legacy(type, row + c * block_bytes, b);
    uint8_t* q = p.q + (c * R + r) * 32;
    float offset = b.m - b.d * float(b.zero);
    if (type == TensorType::Q8_0 && unsigned_q8) {  // q + 128 as uint8, undone by the offset
      for (int i = 0; i < 32; ++i) q[i] = b.q[i] ^ 0x80;
      offset = -128.0f * b.d;
    } else {
      for (int i = 0; i < 32; ++i) q[i] = b.q[i];
    }
    p.scale[(c * R + r) * 2] = p.scale[(c * R + r) * 2 + 1] = b.d;
    p.offset[r * (n / 16) + 2 * c] = p.offset[r * (n / 16) + 2 * c + 1] = offset;
  }
}

void unpack_k_row(TensorType type, const uint8_t* row, int r, int64_t n, GemmPanel& p) {
  const size_t block_bytes = tensor_type_info(type).block_bytes;
  KBlock b;
  for (int64_t s = 0; s < n / kQK_K; ++s) {
    decode_k(type, row + s * block_bytes, b);
    for (int k = 0; k < 8; ++k) {
      const int64_t c = s * 8 + k;
      for (int i = 0; i < 32; ++i) p.q[(c * R + r) * 32 + i] = b.q[32 * k + i];
      for (int half = 0; half < 2; ++half) {
        const int g = 2 * k + half;
        const float scale = b.d * float(b.sc[g]);
        p.scale[(c * R + r) * 2 + half] = scale;
        p.offset[r * (n / 16) + s * 16 + g] = -scale * float(b.zero) - b.dmin * float(b.m[g]);
      }
    }
  }
}

}  // namespace

void gemm_unpack_panel(TensorType type, const uint8_t* first_row, size_t row_stride, int rows,
                       int64_t n, bool unsigned_q8, GemmPanel& panel) {
  panel.signed_q = type == TensorType::Q8_0 && !unsigned_q8;
  // Q4_K and Q5_K scale per 32 elements; Q2_K, Q3_K and Q6_K per 16.
  panel.uniform_scale = !is_k_quant(type) || type == TensorType::Q4_K || type == TensorType::Q5_K;
  for (int r = 0; r < R; ++r) {
    if (r >= rows) {
      zero_row(r, n, panel);
    } else if (is_k_quant(type)) {
      unpack_k_row(type, first_row + r * row_stride, r, n, panel);
    } else {
      unpack_legacy_row(type, first_row + r * row_stride, r, n, unsigned_q8, panel);
    }
  }
}

}  // namespace nt::cpu
