#include "backend/cpu/cpu_features.h"

#include <string>

#include "core/error.h"
#include "core/tuning.h"

namespace nt::cpu {

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("f16c");
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return avx2;
    case Isa::Avx512:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
#else
  return isa == Isa::Scalar;
#endif
}

Isa best_isa() {
  static const Isa best = isa_supported(Isa::Avx512) ? Isa::Avx512
                          : isa_supported(Isa::Avx2) ? Isa::Avx2
                                                     : Isa::Scalar;
  return best;
}

static Isa tuned_isa() {
  const std::string& name = tuning().cpu_isa;  // empty, or a level's name (tuning_from_environment checks it)
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    if (name != isa_name(isa)) continue;
    if (!isa_supported(isa)) fail("NT_CPU_ISA={}: this CPU does not support {}", name, name);
    return isa;
  }
  return best_isa();
}

Isa active_isa() {
  static const Isa active = tuned_isa();
  return active;
}

}  // namespace nt::cpu
