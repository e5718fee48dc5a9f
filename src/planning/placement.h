// The placement planner: which layers stay in VRAM, which are streamed from
// pinned host RAM, and which from storage, given the budgets of each.
//
// Policy (the reference system's, which we keep until a measurement says otherwise):
//  * The VRAM reserve is computed, not guessed: the F16 KV cache for the
//    context, the activations and logits of the largest batch, the prefill
//    GEMM scratch, and, when any layer streams, a ring of GPU layer buffers.
//  * Every token uses the output head and the norms, so they are resident
//    first. The token embedding is read one row per token: it stays in the
//    host file mapping (the host gathers the rows and uploads B x dim values)
//    unless every layer is resident and it still fits in VRAM, or the head is
//    tied to it, in which case the head already puts it in VRAM.
//  * Layers fill VRAM in index order (first layers resident), then pinned RAM
//    in index order, and the rest stream from storage. All streamed layers are
//    read every token, so which ones stream does not change the bytes moved.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"

namespace nt {

enum class Tier { Vram, Ram, Disk };
std::string_view tier_name(Tier tier);  // "vram", "ram", "disk"

// Bytes only, so the CUDA side may substitute its own device-layout sizes.
struct LayerFootprint {
  uint64_t resident_bytes = 0;  // what it occupies when kept in VRAM
  uint64_t streamed_bytes = 0;  // moved per use when streamed (from the file, small gaps included)
  uint64_t staging_bytes = 0;   // a host RAM copy or staging slot (aligned reads)
};

struct ModelFootprint {
  std::vector<LayerFootprint> layers;
  uint64_t output_head_bytes = 0;  // output.weight, or token_embd when tied
  uint64_t token_embd_bytes = 0;
  bool tied_embeddings = false;
  uint64_t small_bytes = 0;  // output_norm, rope_freqs and any other non-layer tensor
  // The token embedding where the runner always keeps it resident (a
  // device footprint, which counts it in small_bytes, or as the head when
  // tied): a layer split's first GPU holds it. 0 where token_embd_bytes is
  // the optional copy.
  uint64_t resident_embedding_bytes = 0;
};

// VRAM the runner needs besides the weights, for `context` tokens per
// sequence and prefill chunks of up to `max_batch` tokens, as the CUDA
// runner's memory plan computes it (planning/device_memory_plan.h).
struct VramReserve {
  uint64_t kv_cache = 0;      // n_layers x context x kv_dim x 2 (K, V) x 2 bytes (F16) x sequences
  uint64_t page_table = 0;    // the KV pool's block table: a page id per 32 positions per sequence
  uint64_t activations = 0;   // hidden state, Q/K/V, attention and FFN outputs, quantized/F16 inputs, sampling scratch
  uint64_t logits = 0;        // vocab x max_batch x 4
  uint64_t gemm_scratch = 0;  // one dequantized F16 weight matrix for prefill GEMMs
  uint64_t staging = 0;       // the weight upload's landing buffer and streamed layers' H2D landing buffers
  uint64_t total() const { return kv_cache + page_table + activations + logits + gemm_scratch + staging; }
};

// The automatic RAM budget: MemAvailable less the host buffers the runner
// needs besides pinned layers (logits and embedding rows of max_batch tokens),
// less 1/16 left to the rest of the system so pinning never drives it into
// swap. --ram-budget replaces all of this.
struct RamBudget {
  uint64_t mem_available = 0;
  uint64_t host_buffers = 0;
  uint64_t headroom = 0;
  uint64_t budget = 0;
};
RamBudget automatic_ram_budget(uint64_t mem_available, const ModelSpec& config, int64_t max_batch);

struct PlanRequest {
  uint64_t vram_budget = 0;  // bytes of VRAM we may use (free VRAM, or --vram-budget)
  uint64_t ram_budget = 0;   // bytes of host RAM we may pin (MemAvailable-based, or --ram-budget)
  VramReserve reserve;
  int ring_slots = 2;             // GPU buffers for streamed layers: one computes while the next arrives
  int staging_slots = 2;          // pinned host buffers that storage reads land in
  bool disk_to_device = false;    // cuFile reads land in the GPU ring directly: no host staging
};

struct PlacementPlan {
  std::vector<Tier> layer_tier;
  bool token_embd_in_vram = false;  // else read row by row from the host file mapping

  // VRAM
  uint64_t vram_fixed = 0;   // output head, norms, token_embd if resident, reserve
  uint64_t vram_layers = 0;  // resident layers
  uint64_t vram_ring = 0;    // ring_slots x the largest streamed layer
  uint64_t vram_slot_bytes = 0;
  uint64_t vram_total() const { return vram_fixed + vram_layers + vram_ring; }
  // Host RAM (pinned)
  uint64_t ram_layers = 0;
  uint64_t ram_staging = 0;  // staging_slots x the largest disk layer
  uint64_t ram_slot_bytes = 0;
  uint64_t ram_total() const { return ram_layers + ram_staging; }
  // Bytes moved per forward pass (per decoded token), whatever the batch.
  uint64_t streamed_from_ram = 0;
  uint64_t streamed_from_disk = 0;

  int64_t count(Tier tier) const;
  uint64_t resident_bytes(const ModelFootprint& model, Tier tier) const;
};

// Throws nt::Error saying how much is needed when even streaming every layer
// does not fit the VRAM budget, or the disk staging does not fit the RAM budget.
PlacementPlan plan_placement(const ModelFootprint& model, const PlanRequest& request);

// Link speeds in GB/s (1e9 bytes per second).
struct LinkSpeeds {
  double h2d_gbps = 0;   // host -> GPU (PCIe)
  double disk_gbps = 0;  // storage -> host or GPU
};

// Transfer-bound time of one forward pass: the H2D link carries every
// streamed byte (RAM and disk layers alike; cuFile DMA crosses PCIe too) while
// storage delivers the disk layers, and the pipeline overlaps the two, so the
// slower one bounds the step. Compute of resident layers is not included.
struct StepTime {
  double h2d_seconds = 0;
  double disk_seconds = 0;
  double seconds() const { return h2d_seconds > disk_seconds ? h2d_seconds : disk_seconds; }
};
StepTime predict_step_time(const PlacementPlan& plan, const LinkSpeeds& speeds);

}  // namespace nt
