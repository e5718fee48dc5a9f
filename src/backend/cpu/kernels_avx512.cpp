// AVX-512 (F/BW/VL/VNNI) kernels: the AVX2 code on 256-bit vectors, with
// vpdpbusd for the int8 dot products and 32 registers for wider GEMM tiles.
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/block_decode.h"
#include "backend/cpu/kernels.h"

#if defined(__x86_64__)
#define NT_VNNI 1
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
namespace nt::cpu {
namespace {
#include "backend/cpu/kernels_x86.inc"
}  // namespace
}  // namespace nt::cpu
#pragma GCC pop_options
#define NT_KERNELS_NAME avx512_kernels
#define NT_KERNELS_ISA Isa::Avx512
#include "backend/cpu/kernels_x86_table.inc"
#else
namespace nt::cpu {
const Kernels& avx512_kernels() { return scalar_kernels(); }
}  // namespace nt::cpu
#endif
