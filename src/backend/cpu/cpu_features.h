// Which x86 SIMD level the CPU kernels run at. Detected once;
// Tuning::cpu_isa (NT_CPU_ISA = scalar | avx2 | avx512) forces a lower level
// for tests and comparisons.
#pragma once

#include <string_view>

namespace nt::cpu {

enum class Isa {
  Scalar,  // portable C++, always available
  Avx2,    // AVX2 + FMA + F16C
  Avx512,  // Avx2 plus AVX-512 F/BW/VL/VNNI: 32 vector registers and vpdpbusd
};

std::string_view isa_name(Isa isa);

// True if this CPU can run kernels of `isa`.
bool isa_supported(Isa isa);

// The best level this CPU supports.
Isa best_isa();

// The level the kernels use: best_isa(), or Tuning::cpu_isa when set.
// Throws nt::Error when it names a level this CPU lacks.
Isa active_isa();

}  // namespace nt::cpu
