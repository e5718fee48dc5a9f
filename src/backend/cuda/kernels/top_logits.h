// The highest logits of a row, selected on the GPU: a sampler with a top-k
// then gets a few hundred bytes across the bus and scans k entries, instead of
// copying and scanning the row (512 KB for a 128K vocabulary).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/kernel_shapes.h"  // kMaxTopLogits, TopLogit, top_logits_scratch_bytes

namespace nt {

// Whether top_logits takes the top k of n logits: k <= kMaxTopLogits and the
// final block holds k per 4096 logits in its registers (8192: a 128K
// vocabulary at k 256, 256K at k 128).
bool top_logits_fits(int64_t n, int64_t k);

// out[0..k) = the k highest of x[0..n), highest first, equal values lowest
// index first: what Candidates::assign(row, k) keeps. *poisoned = the lowest
// index of a NaN or +inf value, or -1 (the sampler refuses such rows). k is
// read from device memory when the kernels run, so a captured graph serves
// every k. PRECOND top_logits_fits(n, *k) (a kernel traps otherwise). Two
// launches: the top k of every 4096 logits in parallel, then the top k of
// those in one block.
void top_logits(const float* x, int64_t n, const int32_t* k, TopLogit* out, int32_t* poisoned, void* scratch,
                cudaStream_t stream);

}  // namespace nt
