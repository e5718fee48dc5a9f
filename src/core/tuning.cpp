#include "core/tuning.h"

#include <cstdlib>

#include "core/env_setting.h"
#include "core/error.h"

namespace nt {

Tuning tuning_from_environment(const Tuning& defaults) {
  Tuning t = defaults;
  const auto flag = [](const char* name, bool value) { return env_setting(name, value, 0, 1) != 0; };
  t.cpu_prefetch_bytes = int(env_setting("NT_CPU_PREFETCH_BYTES", t.cpu_prefetch_bytes, 0, 1 << 20));
  t.cpu_prefetch_nta = flag("NT_CPU_PREFETCH_NTA", t.cpu_prefetch_nta);
  t.cpu_pieces_per_thread = int(env_setting("NT_CPU_PIECES_PER_THREAD", t.cpu_pieces_per_thread, 1, 64));
  t.cpu_gemm_min_tokens = int(env_setting("NT_CPU_GEMM_MIN_TOKENS", t.cpu_gemm_min_tokens, 1, 1 << 20));
  if (const char* isa = std::getenv("NT_CPU_ISA"); isa && *isa) {
    t.cpu_isa = isa;
    if (t.cpu_isa != "scalar" && t.cpu_isa != "avx2" && t.cpu_isa != "avx512") {
      fail("NT_CPU_ISA={}: expected scalar, avx2 or avx512", t.cpu_isa);
    }
  }
  t.cuda_pdl = flag("NT_CUDA_PDL", t.cuda_pdl);
  t.cuda_columns_apart_waves = int(env_setting("NT_CUDA_COLUMNS_APART", t.cuda_columns_apart_waves, 0, 64));
  t.hybrid_ring_slots = int(env_setting("NT_HYBRID_RING_SLOTS", t.hybrid_ring_slots, 2, 8));
  return t;
}

const Tuning& tuning() {
  static const Tuning fixed = tuning_from_environment();
  return fixed;
}

}  // namespace nt
