#include "backend/cpu/kernels.h"

#include "core/env_setting.h"
#include "core/error.h"

namespace nt::cpu {

ActFormat act_format(TensorType weight_type) {
  switch (weight_type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16: return ActFormat::F32;
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0: return ActFormat::Q8_0;
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

Prefetch prefetch_setting() {
  static const Prefetch setting{int(env_setting("NT_CPU_PREFETCH_BYTES", 2048, 0, 1 << 20)),
                                env_setting("NT_CPU_PREFETCH_NTA", 0, 0, 1) != 0};
  return setting;
}

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
