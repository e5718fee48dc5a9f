// After a decode test, the rate the step reached against the memory path that
// bounds it, measured right after the test:
// - layers not all in VRAM (streamed, or computed on the host): the
//   host-side weights against the link's copies plus the host's own reads,
//   the two paths that serve them;
// - every layer resident on one GPU: weights and KV against that GPU's
//   device-to-device copy (each byte read and written);
// - on the CPU: weights and KV against the host's memory read rate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "runtime/model_runner.h"

namespace nt::cli {

// The memory path every layer's weights are read over when all are resident:
// the GPU's device-to-device copy, or on the CPU the host's memory read;
// nullopt for several GPUs (no one ceiling) or layers not all resident.
struct MemoryCeiling {
  std::string what;  // "GPU 0's device-to-device copy", "host memory read (16 threads)"
  double gbps = 0;
};
std::optional<MemoryCeiling> measure_memory_ceiling(const ModelRunner& runner, const std::vector<int>& gpus, int threads);

struct DecodeStep {
  double seconds = 0;  // a token's, the decode test's mean
  double bytes = 0;    // read a step: the weights and the KV entries it attends to
};

// Prints one line; `gpus` the GPUs the runner uses (none: the CPU; several:
// only the host-side line, when it applies). threads: the host read probe's
// (0: one a core).
void print_decode_ceiling(const ModelRunner& runner, const GgufFile& file, const std::vector<int>& gpus,
                          const DecodeStep& step, int threads);

}  // namespace nt::cli
