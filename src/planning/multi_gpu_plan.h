// Several GPUs: where each layer (layer split) or each layer's shard (tensor
// split) lives, on which GPU and in which tier, and the predicted time of one
// pass for each split, so that `--split auto` can pick the faster.
//
// Layer split (a pipeline): GPU g runs the contiguous layers [first, end).
// The ranges follow the GPUs' layer capacity (VRAM budget less the buffers
// that do not hold layers), in the bytes each layer costs there (weights and
// KV cache). The first GPU reads the token embedding, the last holds the
// output head and the logits. Within its range each GPU keeps the first
// layers that fit resident and streams the rest into its own ring; the
// hidden state goes from one GPU to the next after its last layer.
//
// Tensor split (Megatron style): every GPU runs every layer on its shard.
// Attention is cut by KV-head groups (a KV head and the query heads that
// share it): Q/K/V rows of those heads, attn_output columns of them. The FFN
// is cut by hidden columns: ffn_gate/ffn_up rows, ffn_down columns. Each GPU's
// attn_output and ffn_down give partial sums of the whole hidden state, which
// an all-reduce adds (two per layer). Groups and FFN columns are shared out in
// proportion to the VRAM budgets; a column cut must fall on a block boundary
// of the quantized matrix. Norms are replicated; GPU 0 holds the output head.
// A layer shard that does not fit a GPU streams into it over its own link.
//
// Both: the tiers beyond VRAM are shared. Streamed layers (or shards) take
// the one pinned RAM budget in layer order; the rest stream from storage,
// through staging buffers of each GPU that reads from it.
//
// Cost model of one pass of T tokens. Per GPU g, as hybrid_plan.h models one:
//   resident_g  = resident layer bytes (+ head on its GPU) / gpu_gbps_g
//   link_g      = streamed bytes into g / h2d_gbps_g
//   disk_g      = storage bytes it waits for / disk_gbps
//   streamed_g  = streamed layers' resident bytes / gpu_gbps_g
//   stage_g     = resident_g + max(link_g, disk_g, streamed_g)
// Layer split: the GPUs run one after another, handing the hidden state on:
//   pass = sum_g stage_g + (G - 1) x (peer_latency + T x hidden / peer_gbps)
// Tensor split: the GPUs run at once, then two ring all-reduces a layer:
//   pass = max_g stage_g + 2 x layers x (peer_latency + 2 (G-1)/G x T x hidden / peer_gbps)
// Assumptions:
//  * peer_gbps is what one GPU-to-GPU copy of the hidden state achieves:
//    the peer-to-peer rate where the GPUs reach each other, else the rate of
//    the bounce through host memory. A ring all-reduce moves 2 (G-1)/G of
//    the buffer through each link.
//  * Layer split with one sequence leaves G-1 GPUs idle at any moment: it
//    adds VRAM, not speed (micro-batches, which would overlap the stages, are
//    not modelled). A stage's ring fills while the previous GPUs compute,
//    which the model ignores (conservative by ring-slots layers per GPU).
//  * In the layer split one GPU reads storage at a time (disk_g: its own disk
//    bytes); in the tensor split all read at once, so each waits for all.
//  * Compute is memory bound (the same for 1 and 64 tokens), as hybrid_plan.h
//    assumes; activations are counted in full on every GPU (conservative).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"
#include "planning/placement.h"

namespace nt {

enum class Split { Layer, Tensor };
std::string_view split_name(Split split);  // "layer", "tensor"

// One GPU's budget and measured (or given) rates.
struct GpuResources {
  int id = 0;                // CUDA device index, named in errors
  uint64_t vram_budget = 0;  // bytes
  double h2d_gbps = 0;       // host -> this GPU
  double gpu_gbps = 0;       // weight bytes its kernels read per second
};

// What the tensor split needs beyond bytes: the head geometry, the blocks
// that column cuts must respect, and how a layer's bytes divide.
struct TensorSplitShape {
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, ffn_dim = 0;
  // Where attn_output's columns may be cut: its type's blocks (4 or 8 elements
  // for F32 or F16/BF16, the GPU mat-vec's loads).
  int64_t attn_output_block = 1;
  int64_t ffn_down_block = 1;  // the same for ffn_down
  double attention_fraction = 0;  // of a layer's bytes: attn_q/k/v/output
  double ffn_fraction = 0;        // ffn_gate/up/down; the rest (norms) is replicated
};

// From the GGUF tensor directory (the largest block among the layers'
// attn_output and ffn_down tensors; fractions over all layers).
TensorSplitShape tensor_split_shape(const GgufHeader& header, const ModelSpec& config);

struct MultiGpuRequest {
  std::vector<GpuResources> gpus;  // in pipeline order; GPU 0 of the list is rank 0
  uint64_t ram_budget = 0;         // pinned host RAM, shared by all GPUs
  VramReserve reserve;             // of the whole model on one GPU (vram_reserve, planning/device_memory_plan.h)
  int ring_slots = 2, staging_slots = 2;
  bool disk_to_device = false;
  TensorSplitShape shape;
  // Shared rates.
  double disk_gbps = 0;
  double peer_gbps = 0;               // one hidden-state copy GPU to GPU (P2P, or through the host)
  double peer_latency_s = 10e-6;      // fixed cost of one copy or all-reduce step
  uint64_t hidden_bytes_per_token = 0;  // dim x 4 (F32)
  int64_t tokens = 1;                 // per pass
};

struct GpuStage {
  double resident = 0, link = 0, disk = 0, streamed = 0;
  double seconds() const;  // resident + max(link, disk, streamed)
};

struct GpuPlacement {
  GpuResources gpu;
  // Layer split: the layers it runs; tensor split: every layer.
  int64_t first_layer = 0, end_layer = 0;
  // Tensor split: its KV-head groups and FFN hidden columns (the whole for
  // the layer split). Q rows and attn_output columns are
  // [first_kv_head * group * head_dim, + kv_heads * group * head_dim), K/V
  // rows [first_kv_head * head_dim, + kv_heads * head_dim), ffn_gate/up rows
  // and ffn_down columns [first_ffn_column, + ffn_columns).
  int64_t first_kv_head = 0, kv_heads = 0;
  int64_t first_ffn_column = 0, ffn_columns = 0;
  // Over its layers (layer_tier[i] is layer first_layer + i), in its own bytes.
  PlacementPlan plan;
  GpuStage stage;
};

struct MultiGpuPlan {
  Split split = Split::Layer;
  std::vector<GpuPlacement> gpus;
  uint64_t ram_total = 0;     // pinned, all GPUs' layers and staging
  double communication = 0;   // seconds a pass spends in hand-offs or all-reduces
  double seconds = 0;         // predicted pass
};

// The placement alone (ranges or shards, tiers, the shared RAM), which needs
// no rates: what the pipeline runner allocates from. Throws nt::Error naming
// the GPU whose budget holds nothing, the head or block geometry that forbids
// a tensor split (or a GPU listed twice for it), or the RAM shortfall. A GPU
// listed twice in a layer split holds two consecutive stages.
MultiGpuPlan place_multi_gpu(const ModelFootprint& model, const MultiGpuRequest& request, Split split);

// The placement and its predicted pass (stages, communication, seconds);
// also throws when a rate the prediction needs is missing.
MultiGpuPlan plan_multi_gpu(const ModelFootprint& model, const MultiGpuRequest& request, Split split);

// Both splits, each a plan or the reason it cannot be made.
struct SplitCandidate {
  Split split = Split::Layer;
  std::optional<MultiGpuPlan> plan;
  std::string error;
};
// With `predict` false each is only placed (place_multi_gpu), which needs no rates.
std::vector<SplitCandidate> split_candidates(const ModelFootprint& model, const MultiGpuRequest& request, bool predict = true);

// The candidate with the shortest predicted pass (the layer split among
// equals: it moves less between GPUs), never a tensor split whose ranks
// share a GPU (the test mode); throws with both reasons when neither fits.
const SplitCandidate& fastest_split(const std::vector<SplitCandidate>& candidates);

}  // namespace nt
