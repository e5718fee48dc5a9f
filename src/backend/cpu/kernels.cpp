#include "backend/cpu/kernels.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/tuning.h"

namespace nt::cpu {

ActFormat act_format(TensorType weight_type) {
  switch (weight_type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16: return ActFormat::F32;
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::MXFP4: return ActFormat::Q8_0;
    case TensorType::Q4_1:
    case TensorType::Q5_1: return ActFormat::Q8_1;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return ActFormat::Q8_K;
    default: fail("CPU matmul: {} is not a supported weight type", tensor_type_name(weight_type));
  }
}

size_t act_row_bytes(ActFormat format, int64_t n) {
  switch (format) {
    case ActFormat::F32: return size_t(n) * sizeof(float);
    case ActFormat::Q8_0: return size_t(n / kQK) * sizeof(BlockQ8_0);
    case ActFormat::Q8_1: return size_t(n / kQK) * sizeof(BlockQ8_1);
    case ActFormat::Q8_K: return size_t(n / kQK_K) * sizeof(BlockQ8_K);
  }
  return 0;
}

bool takes_split_rows(TensorType weight_type) {
  const ActFormat format = act_format(weight_type);
  return format == ActFormat::Q8_0 || format == ActFormat::Q8_1;
}

size_t split_row_bytes(ActFormat format, int64_t n) {
  return size_t(n) + size_t(n / kQK) * sizeof(float) * (format == ActFormat::Q8_1 ? 2 : 1);
}

void split_row(ActFormat format, const void* blocks, int64_t n, uint8_t* out) {
  auto* scales = reinterpret_cast<float*>(out + n);
  for (int64_t b = 0; b < n / kQK; ++b) {
    if (format == ActFormat::Q8_1) {
      const BlockQ8_1& block = static_cast<const BlockQ8_1*>(blocks)[b];
      std::memcpy(out + b * kQK, block.qs, kQK);
      scales[2 * b] = fp16_to_fp32(block.d);
      scales[2 * b + 1] = fp16_to_fp32(block.s);
    } else {
      const BlockQ8_0& block = static_cast<const BlockQ8_0*>(blocks)[b];
      std::memcpy(out + b * kQK, block.qs, kQK);
      scales[b] = fp16_to_fp32(block.d);
    }
  }
}

Prefetch prefetch_setting() { return {tuning().cpu_prefetch_bytes, tuning().cpu_prefetch_nta}; }

const Kernels& kernels_for(Isa isa) {
  if (!isa_supported(isa)) fail("CPU kernels: this CPU does not support {}", isa_name(isa));
  switch (isa) {
    case Isa::Avx512: return avx512_kernels();
    case Isa::Avx2: return avx2_kernels();
    case Isa::Scalar: break;
  }
  return scalar_kernels();
}

const Kernels& kernels() {
  static const Kernels& active = kernels_for(active_isa());
  return active;
}

}  // namespace nt::cpu
