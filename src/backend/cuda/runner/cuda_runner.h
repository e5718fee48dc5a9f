// Entry point to the CUDA backend for code built without CUDA headers: the
// engine calls make_cuda_runner when NT_HAVE_CUDA is defined.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "planning/device_memory_plan.h"
#include "planning/expert_plan.h"
#include "planning/hybrid_plan.h"
#include "planning/placement.h"
#include "runtime/model_runner.h"
#include "runtime/tensor_shard.h"
#include "storage/io_reader.h"

namespace nt {

class ResidualReducer;  // backend/cuda/multi_gpu/residual_reducer.h

// A rank of the tensor split (tensor_parallel_runner.h): every layer cut to
// its shard. Rank 0 embeds the tokens, adds the residual to its partial
// products and holds the head; `reducer` (the split's, outliving the rank)
// sums the ranks' residual streams after attn_output and ffn_down.
struct TensorRank {
  int rank = 0;
  TensorShard shard;
  ResidualReducer* reducer = nullptr;
};

// A stage of a layer-split pipeline (pipeline_runner.h): the layers
// [first_layer, end_layer) with the tiers the multi-GPU plan gave them
// (tiers[i] is layer first_layer + i); the token embedding when it starts at
// layer 0, the final norm and the head when it ends at the last. Or a rank
// of the tensor split, over every layer.
struct StageLayers {
  int64_t first_layer = 0, end_layer = 0;
  std::vector<Tier> tiers;
  std::optional<TensorRank> tensor;
};

struct CudaRunnerOptions {
  int device = 0;
  std::optional<StageLayers> stage;  // unset: the whole model, placed within the budgets below
  int64_t max_batch = kDefaultMaxBatch;  // tokens per prefill chunk (bounds activation memory)
  int max_sequences = 1;         // sequences whose KV caches are held at once (the paged pool holds each's whole context)
  int64_t kv_pool = 0;           // or, when set, the pool holds this many positions shared by all of them
  // Chunks at least gemm_min_tokens long use the dequantize + cuBLAS GEMM
  // (f16 activations), shorter ones the mat-vec (q8), 8 tokens a launch. A
  // decode batch (every run one token) takes cuBLAS from
  // decode_gemm_min_tokens and, from int8_gemm_min_tokens up to there,
  // multiplies q8 activations on the int8 tensor cores where the format has
  // a kernel (quantized_gemm.h). decode_gemm_min_tokens 0: by the layers'
  // formats: from 9 tokens (past the mat-vec's 8 columns) when every matrix
  // is F16 or BF16, which have no int8 kernel, else from 65.
  int64_t gemm_min_tokens = 16;
  int64_t decode_gemm_min_tokens = 0;
  // 0: from each format's crossover (quantized_gemm_min_tokens); N >= 2: from N
  // tokens for every format (A/B runs: NT_CUDA_INT8_GEMM=N).
  int64_t int8_gemm_min_tokens = 0;
  // Its widest token tile (32 or 64; QuantizedGemmParams::widest_tile). 64:
  // 32-token tiles measured 8% slower on the 70B at 64 sequences (H100,
  // docs/PERFORMANCE.md), though Q6_K's 64-token tile holds 189 registers,
  // one block a multiprocessor; NT_CUDA_INT8_TILE=32 for A/B runs.
  int int8_gemm_widest_tile = 64;
  // Q4_K, Q5_K and Q6_K matrices in those batches multiply super-block activations
  // (quantized_gemm.h: one scale per 256 elements, the CPU's Q8_K rounding)
  // instead of per-32 q8: fewer instructions a weight. On the H200, batch 16 / 64:
  // 8B 3,735 / 6,821 -> 4,321 / 9,285 tok/s, 70B 470 / 752 -> 599 / 1,036.
  // NT_CUDA_SUPER_BLOCKS=0 turns it off for A/B runs.
  bool super_block_activations = true;
  // Ungated mat-vecs of 2 to 4 columns (decode batches of 2-3 sequences,
  // short prompt chunks, speculative passes) pair rows over two warps: on
  // the H200 at 4 columns 5-63% faster on every 8B and 70B shape (`cuda_bench
  // columns`, docs/PERFORMANCE.md). Off until measured in the runner;
  // NT_CUDA_MATVEC_PAIRS=1 turns it on for A/B runs.
  bool matvec_row_pairs = false;
  // Decode steps of several sequences split each long sequence's keys over
  // more blocks, so that a few sequences at long contexts fill the GPU
  // (attention_sequence_splits). NT_CUDA_SEQUENCE_SPLITS=0 turns it off for A/B runs.
  bool sequence_splits = true;
  // Decode steps of up to this many sequences (every run one token, no tree)
  // run their rows stepwise (BatchEntry::stepwise): each sequence computed as
  // its one-token step alone, so batched greedy output is plain decoding's.
  // -1: by the model, where it is the faster step (CudaLlamaRunner::
  // stepwise_steps_apart: small models, short contexts); 0: off. On the
  // 8B it costs 0.87x at 2 sequences, 0.65x at 4 and 0.36x at 8 (H100,
  // docs/PERFORMANCE.md "Small models decode batches stepwise"). For A/B
  // runs NT_CUDA_STEPWISE_STEPS=N sets it.
  int64_t stepwise_steps_max = -1;
  bool decode_graph = true;      // replay single-token steps from a captured CUDA graph (resident models only)
  // A tensor-split rank whose sums are NCCL's replays decode graphs too
  // (a graph captures NCCL's launches); NT_CUDA_TENSOR_GRAPHS=0 turns it off for A/B runs.
  bool tensor_graphs = true;
  bool fold_norms = true;        // single-token steps fold the RMSNorms into the mat-vecs where they can
  // Tiered streaming: layers beyond the VRAM budget stream from pinned RAM,
  // those beyond the RAM budget from storage.
  std::optional<uint64_t> vram_budget;  // default: free VRAM less the runner's margin
  std::optional<uint64_t> ram_budget;   // default: automatic_ram_budget(MemAvailable)
  // A mixture of experts' experts in VRAM: all that the budget leaves room
  // for (0), or at most this many, the rest cached from pinned RAM.
  int64_t max_vram_experts = 0;
  // How often calibration saw each expert chosen, [layer * experts + expert]
  // (engine/expert_calibration.h): the most chosen start in VRAM. Empty: the
  // first experts of every layer alike.
  std::vector<uint64_t> expert_counts;
  ExpertMisses expert_misses = ExpertMisses::Auto;  // where the experts that miss the VRAM cache compute
  // A resident mixture's wider passes (prompt chunks, batches) compute each
  // (row, expert) pair as a one-token step does, every expert in one launch a
  // matrix, a chunk of rows reading its expert once, where that costs fewer
  // bytes than each expert's launches apart (expert_ffn.h); off: each expert's
  // products apart, as a partial cache's passes take them.
  bool expert_chunks = true;
  IoBackend io = IoBackend::Auto;       // storage reader of disk-tier layers
  int ring_slots = 2;                   // GPU layer slots and pinned storage staging slots
  // The last streamed layers of a pass start copying the next pass's first
  // RAM-tier layers into the slots they free, assuming it repeats this one
  // (decode steps do), so the link does not idle from the last copy of one
  // step to the first of the next (6.2 ms of a 238 ms hybrid 70B step on the
  // H200). Off until measured; NT_STREAM_RUN_AHEAD=1 turns it on for A/B runs.
  bool stream_run_ahead = false;
  // The CPU as a fourth tier (engine/hybrid_split.h): this many of the RAM
  // tier's layers, spread among the streamed ones, are computed by the host
  // from their pinned copy: all of them in passes of up to
  // cpu_passes.all_up_to tokens, a share of them (cpu_share_paths) in the
  // wider passes it lists; passes wider still stream them like the rest.
  int64_t cpu_layers = 0;
  CpuPassPlan cpu_passes = {.all_up_to = 1, .wider = {}};
  // Sliding-window layers keep every position, not only their window and a
  // margin (runtime/kv_window.h); a layer split, a tensor split and CPU
  // layers keep every position anyway (keeps_kv_windows).
  bool swa_full = false;
  int cpu_threads = 0;  // 0: one a physical core
  // A --draft-model that will be resident beside this runner on its GPU,
  // holding max_sequences sequences of this context: its weights, KV cache
  // and buffers come out of the VRAM budget first (planning/device_memory_plan.h).
  std::string draft_model;
  std::string trace_path;               // Chrome-trace JSON of streaming, written when the runner is destroyed
  // Called as the weights load: the resident ones onto the GPU, then the RAM
  // tier's into pinned memory; (file bytes so far, their total).
  std::function<void(uint64_t, uint64_t)> on_load_progress;
};

// Whether a runner of these options keeps only the window of its
// sliding-window layers: a whole model on one GPU, with no CPU layers (whose
// host caches hold whole contexts).
inline bool keeps_kv_windows(const CudaRunnerOptions& o) { return !o.stage && o.cpu_layers == 0 && !o.swa_full; }

// Where the runner would put each layer, with the sizes it planned from (CUDA
// device-layout bytes). Needs a GPU for its SM count and, when no VRAM budget
// is given, its free memory.
using CudaPlacement = DevicePlacement;
CudaPlacement plan_cuda_placement(const GgufFile& file, int64_t context, const CudaRunnerOptions& options = {});

// Uploads the weights of the Llama model in `file` to the GPU (the layers that
// fit; the rest stream per pass, see plan_cuda_placement) and allocates a KV
// cache of `context` tokens. Throws nt::Error when there is no usable GPU,
// when the model and cache do not fit (saying how much is needed and free), or
// for weight formats the backend cannot run. `file` must outlive nothing: the
// runner keeps no pointer into it.
std::unique_ptr<ModelRunner> make_cuda_runner(const GgufFile& file, int64_t context, const CudaRunnerOptions& options = {});

}  // namespace nt
