// Options shared by the commands that load a model: model path, context,
// threads, device, and the sampling flags (named as the common CLI tools name them).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/progress.h"
#include "engine/open_model.h"
#include "gguf/gguf_file.h"
#include "runtime/model_runner.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace nt::cli {

struct ModelOptions {
  std::string model;       // -m; empty = the default model
  int64_t context = 0;     // -c; positions of one sequence, 0 = min(trained context, 4096)
  int sequences = 1;       // sequences whose KV caches are held at once (batch --parallel)
  int64_t kv_pool = 0;     // --kv-pool; positions shared by them, 0 = each sequence's whole context
  int threads = 0;         // -t; 0 = physical cores
  std::string device = "auto";
  bool kv_f32 = false;
  bool swa_full = false;
  // CUDA tiered streaming (see plan_cuda_placement); empty = automatic.
  std::string vram_budget, ram_budget;
  std::string io = "auto";
  std::string cpu_layers = "auto";  // CUDA: RAM-tier layers the CPU computes: N, 0 or auto
  std::string trace;  // Chrome-trace JSON of streamed layers' reads, copies and compute
  std::string expert_counts;  // calibrate-experts' counts: a mixture of experts' placement in VRAM
  std::string expert_misses = "auto";  // CUDA: where experts missing from VRAM compute: auto, link or cpu
  // CUDA over several GPUs: --gpus 0,1 (a GPU may repeat: stages sharing it)
  // and --split layer|tensor|auto; empty: GPU 0 alone.
  std::string gpus, split;
  // --nccl-id: the tensor split's ranks past the first run as `ntransformer rank` processes.
  std::string nccl_id;
  double join_timeout_s = 300;
  // A --draft-model loaded after this model: on CUDA its VRAM comes out of this model's budget.
  std::string draft_model;
  std::string gpu_layers;  // -ngl: a count, all or auto; empty: not given
};

void add_model_options(CLI::App& cmd, ModelOptions& options);
// The sampling flags, checked against the shared table (sampling/setting_limits.h).
// -s/--seed: -1 or none picks a random seed; announce_seed prints it when the run samples.
void add_sampling_options(CLI::App& cmd, SamplingParams& params);
void announce_seed(const SamplingParams& params);

// The flags as the engine's open options; errors name the flag.
OpenModelOptions open_options(const ModelOptions& options);

// A load progress line on `open` (and the tensor split's wait for its ranks);
// done() ends it and logs where the model went.
class LoadProgress {
 public:
  LoadProgress(const ModelOptions& options, OpenModelOptions& open);
  void done(const OpenedModel& opened) const;

 private:
  mutable ProgressLine line_;
};

// Opens the model (engine/open_model.h) with a load progress line; logs where it went.
OpenedModel load_model(const ModelOptions& options);

}  // namespace nt::cli
