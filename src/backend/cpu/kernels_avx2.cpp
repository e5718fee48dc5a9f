// AVX2 + FMA + F16C kernels; built without -mavx2, so the targets are set here.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/block_decode.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#define NT_VNNI 0
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace nt::cpu {
namespace {
#include "backend/cpu/kernels_x86.inc"
}  // namespace
}  // namespace nt::cpu
#pragma GCC pop_options
#define NT_KERNELS_NAME avx2_kernels
#define NT_KERNELS_ISA Isa::Avx2
#include "backend/cpu/kernels_x86_table.inc"
#else
namespace nt::cpu {
const Kernels& avx2_kernels() { return scalar_kernels(); }
}  // namespace nt::cpu
#endif
