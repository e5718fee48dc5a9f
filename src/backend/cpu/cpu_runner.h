// The forward pass on the CPU, every architecture a ModelSpec describes: the correctness reference for every other
// backend, and fast enough to be the default everywhere.
#pragma once

#include <memory>

#include "gguf/gguf_file.h"
#include "runtime/model_runner.h"

namespace nt {

struct CpuRunnerOptions {
  int64_t context = 0;     // positions one sequence holds; 0 = the model's trained context (capped at 4096)
  int64_t sequences = 1;   // the KV pool holds this many sequences of the whole context (or more shorter ones)
  int64_t kv_pool = 0;     // or, when set, this many positions shared by all sequences
  int threads = 0;         // 0 = physical cores
  bool kv_f32 = false;     // F16 KV cache by default
  int64_t max_batch = 256; // prompt tokens per matrix-matrix pass (bounds scratch memory)
  bool swa_full = false;   // sliding-window layers keep every position, not only their window (state saves need it)
};

std::unique_ptr<ModelRunner> make_cpu_runner(std::shared_ptr<const GgufFile> file, const CpuRunnerOptions& options);

}  // namespace nt
