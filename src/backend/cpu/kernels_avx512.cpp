// AVX-512 (F/BW/VL/VNNI) kernels: the AVX2 code on 256-bit vectors, with
// vpdpbusd for the int8 dot products and 32 registers for wider GEMM tiles,
// and 512-bit dot products for the K-quant formats that gain from them.
#include <immintrin.h>

#include <algorithm>
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
// GCC 12's own 512-bit casts, extracts and reductions start from deliberately
// undefined vectors (avx512fintrin.h), which its warnings flag once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace nt::cpu {
namespace {
#include "backend/cpu/kernels_x86.inc"
}  // namespace
}  // namespace nt::cpu
#pragma GCC diagnostic pop
#pragma GCC pop_options
#define NT_KERNELS_NAME avx512_kernels
#define NT_KERNELS_ISA Isa::Avx512
#include "backend/cpu/kernels_x86_table.inc"
#else
namespace nt::cpu {
const Kernels& avx512_kernels() { return scalar_kernels(); }
}  // namespace nt::cpu
#endif
