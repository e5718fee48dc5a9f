// The CPU backend's rate on a model's own layers: GB of weights per second
// that the matmul kernel computes with the available threads, at one token
// per pass and at a batch, for the four-tier planner (planning/hybrid_plan.h).
#pragma once

#include <cstdint>

#include "gguf/gguf_file.h"

namespace nt {

struct CpuRateProbe {
  double gbps = 0;           // weight bytes over seconds
  uint64_t working_set = 0;  // bytes of layer matrices cycled through
  uint64_t bytes = 0;        // bytes computed while timed
  double seconds = 0;
  int threads = 0;
};

// Times cpu::matmul with `tokens` tokens per call over the file's layer
// matrices, whole and in order, for about `seconds` after one untimed
// one-token pass. The working set is the first whole layers that reach
// min_working_set (every layer of a smaller model), so a big model is read
// from DRAM in its layers' mix of formats, as its CPU layers would be; a
// model smaller than the caches measures the caches. threads 0: one a core.
constexpr uint64_t kCpuProbeWorkingSet = 256ull << 20;
CpuRateProbe measure_cpu_rate(const GgufFile& file, int64_t tokens, double seconds, int threads = 0,
                              uint64_t min_working_set = kCpuProbeWorkingSet);

// Host memory's read rate: `threads` threads (0: one a core) summing their
// slices of a `bytes` buffer, whole passes, for about `seconds` after one
// untimed pass. The ceiling the CPU layers' weight reads share with the copy
// engine's DMA from pinned memory.
CpuRateProbe measure_host_read(uint64_t bytes, double seconds, int threads = 0);

}  // namespace nt
