// Per-block timelines of the decode kernels, for a diagnostic build only
// (cmake -DNT_CUDA_BLOCK_TRACE=ON; `cuda_bench trace` records one decode step
// and bench/block_trace_summary.py reads it). Thread 0 of every block stamps
// %globaltimer when the block starts, when its wait for the previous kernel
// returns (wait_for_inputs) and at an optional mid point, and on exit writes
// one Record to a per-multiprocessor slice of the armed buffer. What a kernel
// costs inside the PDL-overlapped graph is the distance from the previous
// kernel's last block end to its own, and the stamps say where it goes: the
// release latency, the wave spread, the tail. Without the option the macros
// expand to nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nt::trace {

struct Record {
  uint64_t grid;       // %gridid: one value per launch
  uint32_t kind;       // NT_TRACE_BLOCK's argument, per kernel
  uint32_t block;      // blockIdx.x + 65536 * (blockIdx.y + 256 * blockIdx.z)
  uint32_t smid, pad;
  uint64_t t[4];       // ns: start, wait returned (0: none), mid point (0: none), end
};

enum Kind : uint32_t { kRmsNorm = 1, kRope, kQuantize, kMatvec, kMatvecParts, kAttention };

constexpr uint32_t kRecordsPerSm = 16384;
constexpr uint32_t kMaxSms = 256;

// Arms every kernel file's stamps (buffer of kMaxSms * kRecordsPerSm records,
// kMaxSms counters, zeroed); nullptrs disarm them.
void arm(Record* records, uint32_t* counters);

using ArmFunction = void (*)(Record*, uint32_t*);
bool register_kernel_file(ArmFunction arm_file);

#ifdef __CUDACC__
// Each kernel file (translation unit) has its own copy of these, armed through the registry.
static __device__ Record* g_records;
static __device__ uint32_t* g_counters;
static void arm_this_file(Record* records, uint32_t* counters) {
  cudaMemcpyToSymbol(g_records, &records, sizeof(records));
  cudaMemcpyToSymbol(g_counters, &counters, sizeof(counters));
}
[[maybe_unused]] static const bool g_registered = register_kernel_file(&arm_this_file);

__device__ __forceinline__ uint64_t now() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ uint64_t& waited_slot() {
  __shared__ uint64_t t;
  return t;
}
__device__ __forceinline__ uint64_t& mid_slot() {
  __shared__ uint64_t t;
  return t;
}

// Lives for the whole kernel: the destructor writes the record at any return.
struct BlockStamps {
  uint32_t kind;
  uint64_t start;
  __device__ explicit BlockStamps(uint32_t k) : kind(k), start(now()) {
    if (threadIdx.x == 0) waited_slot() = mid_slot() = 0;
  }
  __device__ ~BlockStamps() {
    if (threadIdx.x != 0 || !g_records) return;
    const uint64_t end = now();  // before the record's own atomic
    uint32_t sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const uint32_t i = atomicAdd(&g_counters[sm], 1u);
    if (i >= kRecordsPerSm) return;
    Record& r = g_records[sm * kRecordsPerSm + i];
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(r.grid));
    r.kind = kind;
    r.block = blockIdx.x + 65536u * (blockIdx.y + 256u * blockIdx.z);
    r.smid = sm;
    r.t[0] = start;
    r.t[1] = waited_slot();
    r.t[2] = mid_slot();
    r.t[3] = end;
  }
};
#endif

}  // namespace nt::trace

#ifdef __CUDACC__
#define NT_TRACE_BLOCK(kind) const ::nt::trace::BlockStamps nt_block_stamps_(::nt::trace::kind)
#define NT_TRACE_MID() (threadIdx.x == 0 ? void(::nt::trace::mid_slot() = ::nt::trace::now()) : void())
#define NT_TRACE_WAITED() (threadIdx.x == 0 ? void(::nt::trace::waited_slot() = ::nt::trace::now()) : void())
#endif
