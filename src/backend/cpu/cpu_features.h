// Which x86 SIMD level the CPU kernels run at. Detected once; NT_CPU_ISA
// (scalar | avx2 | avx512) forces a lower level for tests and comparisons.
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

// The level the kernels use: best_isa(), or NT_CPU_ISA when set. Throws
// nt::Error when NT_CPU_ISA names an unknown or unsupported level.
Isa active_isa();

}  // namespace nt::cpu
