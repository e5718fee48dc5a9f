// The CUDA runner's device memory, planned on the host: the activation
// arena's layout, the layers' device-layout sizes, the buffers beside the
// weights (KV pool, GEMM scratch, activations, staging) and the placement of
// layers in VRAM, pinned RAM and storage. The runner allocates from these
// numbers and `ntransformer plan` prints them, in every build, so the two
// cannot disagree. Device facts (the SM count, the budgets) are parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/arch/model_spec.h"
#include "model/model_weights.h"
#include "planning/multi_gpu_plan.h"
#include "planning/placement.h"
#include "runtime/device_layout.h"
#include "runtime/kv_window.h"
#include "storage/layer_reads.h"

namespace nt {

inline constexpr uint64_t kUploadStagingBytes = 64ull << 20;  // the weight upload's landing buffer (and each pinned slot)
inline constexpr uint64_t kGemmScratchMaxBytes = 256ull << 20;
inline constexpr uint64_t kMemoryMarginBytes = 512ull << 20;  // CUDA context, cuBLAS workspace, fragmentation
// Tokens per prefill chunk when none is asked for: the runner's and plan's default.
inline constexpr int64_t kDefaultMaxBatch = 512;
inline constexpr int kStreamLandingBuffers = 2;               // file-layout landing buffers of streamed layers' H2D copies

// Offsets of sub-allocations inside one device block, each 256-byte aligned.
class ArenaPlan {
 public:
  uint64_t reserve(uint64_t bytes) {
    const uint64_t at = size_;
    size_ += align_device(bytes);
    return at;
  }
  uint64_t size() const { return size_; }

 private:
  uint64_t size_ = 0;
};

// A step's inputs, on the device and in the pinned staging alike, so one copy
// moves them: the position, the top_logits k, then the tokens.
inline constexpr int64_t kInputsHeader = 2;

// Words of ancestor bits a token-tree row takes, in a tree of `entries` entries.
inline int64_t tree_mask_words(int64_t entries) { return (entries + 31) / 32; }

// The int32 words of a batch chunk's inputs for chunks of up to max_batch
// rows: the header; per row its token, position, slot and RoPE position; per
// run its first position; the head's rows; and for token trees (of up to
// max_batch entries) each row's ancestor bits.
inline int64_t batch_input_words(int64_t max_batch) {
  return kInputsHeader + 6 * max_batch + max_batch * tree_mask_words(max_batch);
}

// Offsets of the activation buffers for chunks of up to `batch` tokens; a
// runner without the head (a pipeline stage before the last) has no logits rows.
struct ActivationLayout {
  uint64_t inputs, x, xn, qkv, att, gate, up, h, logits, partials, q8, q8_scales, f16, argmax, argmax_scratch, head_rows,
      top, top_scratch;
  uint64_t norm_q8, norm_q8_scales, norm_sumsq;
  uint64_t partial_floats;
  uint64_t total;
};

ActivationLayout layout_activations(const ModelSpec& c, int64_t batch, int64_t context, int multiprocessors,
                                    bool head = true);

// The matrices of a layer as uploaded: groups of row-stacked parts (Q, K and V
// fused when they share a format).
std::vector<std::vector<const WeightRef*>> layer_matrix_groups(const LayerWeights& lw);

uint64_t group_device_bytes(const std::vector<const WeightRef*>& parts);  // throws for unsupported formats

// K and V of one position over all layers, in f16.
uint64_t cache_bytes_per_position(const ModelSpec& c);

// Device memory besides the weights, shared by the planner and the allocation.
struct RunnerBuffers {
  uint64_t kv = 0, gemm = 0, activations = 0;
  uint64_t window_kv = 0;   // the sliding-window layers' pool, part of `kv` (device_kv_window)
  uint64_t page_table = 0;  // the KV pool's block table (page_table_bytes), and the window pool's
  uint64_t logits = 0;      // the activation arena's logits rows, part of `activations`
};

// The block table of a KV pool of `sequences` sequences of up to `width` pages each.
uint64_t page_table_bytes(int64_t sequences, int64_t width);

// The sliding-window layers' pool of a whole-model runner whose pool holds
// `max_sequences` contexts of cache_context positions (or kv_pool positions)
// and whose prefill chunks are max_batch tokens: none unless `windowed`.
KvWindowPlan device_kv_window(const ModelSpec& c, int64_t cache_context, int max_sequences, int64_t kv_pool,
                              int64_t max_batch, bool windowed);

// `cache_context` is kv_cache_context(context) (runtime/kernel_shapes.h).
// `max_batch` tokens a prefill chunk, a KV pool of `max_sequences` whole
// contexts or (kv_pool > 0) of kv_pool positions shared by them; with
// `windowed`, the sliding-window layers keep their window in a pool of their own.
RunnerBuffers runner_buffers(const ModelSpec& c, const ModelWeights& w, int64_t context, int64_t cache_context,
                             int64_t max_batch, int max_sequences, int multiprocessors, int64_t kv_pool = 0,
                             bool windowed = false);
// The same for a stage of a layer split (CudaRunnerOptions::stage) holding
// `layers` of the model's layers: their KV pages only, and the logits rows
// only when it holds the head. As the multi-GPU planner reserves per GPU.
RunnerBuffers stage_buffers(const ModelSpec& c, const ModelWeights& w, int64_t context, int64_t cache_context,
                            int64_t max_batch, int max_sequences, int multiprocessors, int64_t layers, bool head,
                            int64_t kv_pool = 0, bool windowed = false);

// The model's sizes in device layout (layers, head, norms, token embedding).
ModelFootprint device_footprint(const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads);

// The buffers as the placement's reserve, with the staging the footprint's streamed layers need.
VramReserve vram_reserve(const RunnerBuffers& buffers, const ModelFootprint& model);

// A draft model (--draft-model) on the target's GPU: resident whole, as its
// own runner plans itself with every layer in VRAM (its prefill chunk the
// runner default), so the target's placement can leave it room.
struct DraftVram {
  std::string path;      // the draft's file, for messages
  uint64_t weights = 0;  // its layers, head, norms and token embedding in device layout
  uint64_t kv_cache = 0;  // its KV pool and block table
  uint64_t buffers = 0;  // activations, logits, GEMM scratch, upload and landing buffers
  uint64_t total() const { return weights + kv_cache + buffers; }
};

// The draft's VRAM beside a target of `context` positions per sequence and
// `sequences` sequences (the draft holds as many), on a GPU of
// `multiprocessors` SMs; `reads` are the draft file's layer reads.
DraftVram draft_vram(const std::string& path, const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads,
                     int64_t context, int sequences, int multiprocessors, int64_t kv_pool = 0);

// Where the runner puts each layer, with the sizes it planned from.
struct DevicePlacement {
  ModelFootprint footprint;
  PlanRequest request;  // its vram_budget what the draft leaves
  PlacementPlan plan;
  DraftVram draft;      // total 0 without one
};

// The placement of layers in VRAM, pinned RAM and storage, in device-layout
// bytes, within the given budgets. Norm vectors, the token embedding and the
// head always stay resident. With a draft model, its VRAM comes out of the
// budget first. Throws nt::Error when it does not fit: naming the draft and
// both sizes when the draft alone exceeds the budget.
DevicePlacement plan_device_placement(const ModelSpec& c, const ModelWeights& w, const std::vector<LayerRead>& reads,
                                      const RunnerBuffers& buffers, int ring_slots, uint64_t vram_budget,
                                      uint64_t ram_budget, const DraftVram* draft = nullptr);

// Each stage's VRAM budget when none is given: its GPU's free memory
// (free_bytes[i] of ids[i]) less kMemoryMarginBytes for each stage it holds
// (a CUDA context share, a cuBLAS workspace), shared evenly by those stages.
std::vector<uint64_t> free_vram_budgets(const std::vector<int>& ids, const std::vector<uint64_t>& free_bytes);

// The memory side of a multi-GPU request as the CUDA runner allocates it:
// the GPUs' budgets, the shared RAM, the runner's buffers (of the whole
// model, which the planner scales per GPU as stage_buffers does), the
// tensor split's shape and the hidden state's size. `plan --gpus` adds the
// rates to predict; the pipeline runner places from it as it is.
MultiGpuRequest device_multi_gpu_request(const GgufHeader& header, const ModelSpec& c, const ModelFootprint& model,
                                         const RunnerBuffers& buffers, std::vector<GpuResources> gpus, uint64_t ram_budget,
                                         int ring_slots);

}  // namespace nt
