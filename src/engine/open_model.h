// One model opener for every front end (CLI, batch, a server, a C API):
// file -> tokenizer + runner, with the backend choice, the context default
// and the memory budgets. Front ends include no backend header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "planning/expert_plan.h"
#include "planning/multi_gpu_plan.h"
#include "runtime/model_runner.h"
#include "storage/io_reader.h"
#include "tokenizer/tokenizer.h"

namespace nt {

enum class Device { Auto, Cpu, Cuda };
Device parse_device(const std::string& name, const std::string& flag);

struct OpenModelOptions {
  std::string path;            // empty: the default model
  // The file already open at `path` (the C API's model, opening a context):
  // its mapping is shared instead of mapping the file again. Null: open it.
  std::shared_ptr<const GgufFile> file;
  Device device = Device::Auto;  // Auto: CUDA when a usable GPU is there
  int64_t context = 0;         // positions of one sequence; 0: the model's, at most 4096
  int sequences = 1;           // sequences whose KV caches are held at once
  int64_t kv_pool = 0;         // positions of the KV pool shared by them; 0: each sequence's whole context
  int threads = 0;             // CPU: 0 = physical cores
  bool kv_f32 = false;         // CPU: F32 KV cache
  bool swa_full = false;       // sliding-window layers keep every position (a window's worth otherwise)
  // CUDA tiered streaming; empty: automatic.
  std::optional<uint64_t> vram_budget, ram_budget;
  // CUDA over several GPUs: one stage of a layer split per entry, in layer
  // order (a GPU listed twice holds two stages: one GPU testing the
  // pipeline); a single entry runs on that GPU alone. Empty: GPU 0.
  std::vector<int> gpus;
  std::optional<Split> split;          // with several GPUs: layer or tensor; nullopt: auto
  std::vector<uint64_t> vram_budgets;  // with several GPUs: one per entry of gpus; empty: vram_budget for each, else free VRAM
  // The tensor split with a process per GPU: this process runs rank 0, the
  // others join through the NCCL id written here (serve_tensor_rank).
  std::string nccl_id_file;
  double join_timeout_s = 300;
  IoBackend io = IoBackend::Auto;
  // CUDA: RAM-tier layers the CPU computes (engine/hybrid_split.h); nullopt: auto.
  std::optional<int64_t> cpu_layers;
  std::string trace_path;
  // CUDA: a draft model that will be opened beside this one on its GPU
  // (context and sequences this one's): its VRAM comes out of this one's budget.
  std::string draft_model;
  // CUDA: calibrate-experts' counts for this model (engine/expert_calibration.h); empty: none.
  std::string expert_counts;
  ExpertMisses expert_misses = ExpertMisses::Auto;  // CUDA: where experts missing from VRAM compute
  std::function<void(uint64_t, uint64_t)> on_load_progress;  // weights loaded, total
};

struct OpenedModel {
  std::string path;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ModelRunner> runner;
  std::string hybrid_summary;  // how the CUDA hybrid split was chosen; empty when nothing is in host RAM
  std::string split_summary;   // how --split auto chose among several GPUs; empty otherwise
  std::vector<int> gpus;       // the GPUs the runner uses; none: it runs on the CPU
};

OpenedModel open_model(const OpenModelOptions& options);

// The context a model gets when none is asked for: its trained one, at most 4096.
int64_t default_context(const GgufFile& file);

}  // namespace nt
