#include "planning/placement.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"

namespace nt {

std::string_view tier_name(Tier tier) {
  switch (tier) {
    case Tier::Vram: return "vram";
    case Tier::Ram: return "ram";
    case Tier::Disk: return "disk";
  }
  return "?";
}

RamBudget automatic_ram_budget(uint64_t mem_available, const ModelSpec& c, int64_t max_batch) {
  const uint64_t b = uint64_t(std::max<int64_t>(max_batch, 1));
  RamBudget r;
  r.mem_available = mem_available;
  r.host_buffers = 4 * b * (uint64_t(c.vocab_size) + uint64_t(c.dim));
  r.headroom = mem_available / 16;
  r.budget = mem_available > r.host_buffers + r.headroom ? mem_available - r.host_buffers - r.headroom : 0;
  return r;
}

int64_t PlacementPlan::count(Tier tier) const { return std::count(layer_tier.begin(), layer_tier.end(), tier); }

uint64_t PlacementPlan::resident_bytes(const ModelFootprint& model, Tier tier) const {
  uint64_t sum = 0;
  for (size_t i = 0; i < layer_tier.size(); ++i) {
    if (layer_tier[i] == tier) sum += tier == Tier::Vram ? model.layers[i].resident_bytes : model.layers[i].staging_bytes;
  }
  return sum;
}

PlacementPlan plan_placement(const ModelFootprint& model, const PlanRequest& request) {
  const size_t n = model.layers.size();
  if (request.ring_slots < 1 || request.staging_slots < 1) {
    fail("streaming needs at least one GPU layer buffer and one staging buffer (got {} and {})", request.ring_slots,
         request.staging_slots);
  }
  // A GPU ring slot holds a layer as it arrives and as the kernels read it.
  auto slot_bytes = [&](size_t i) { return std::max(model.layers[i].resident_bytes, model.layers[i].staging_bytes); };
  // suffix_max_*[k]: the largest slot among layers k..n-1.
  std::vector<uint64_t> prefix_resident(n + 1, 0), suffix_max_slot(n + 1, 0), suffix_max_staging(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix_resident[i + 1] = prefix_resident[i] + model.layers[i].resident_bytes;
  for (size_t i = n; i > 0; --i) {
    suffix_max_slot[i - 1] = std::max(suffix_max_slot[i], slot_bytes(i - 1));
    suffix_max_staging[i - 1] = std::max(suffix_max_staging[i], model.layers[i - 1].staging_bytes);
  }

  PlacementPlan plan;
  plan.layer_tier.assign(n, Tier::Disk);
  const uint64_t fixed = model.output_head_bytes + model.small_bytes + request.reserve.total();
  auto vram_needed = [&](size_t resident) {
    const uint64_t ring = resident < n ? uint64_t(request.ring_slots) * suffix_max_slot[resident] : 0;
    return fixed + prefix_resident[resident] + ring;
  };
  size_t resident = n + 1;
  for (size_t k = n + 1; k-- > 0;) {
    if (vram_needed(k) <= request.vram_budget) {
      resident = k;
      break;
    }
  }
  if (resident > n) {
    const VramReserve& r = request.reserve;
    // When the cache is most of it, say what shrinks the cache.
    const bool cache_bound = 2 * r.kv_cache > vram_needed(0);
    fail("VRAM budget {} is too small: streaming every layer still needs {} (KV cache {}, activations {}, logits {}, "
         "GEMM scratch {}, staging {}, output head and norms {}, {} layer buffers of {}){}",
         format_size(request.vram_budget), format_size(vram_needed(0)), format_size(r.kv_cache), format_size(r.activations),
         format_size(r.logits), format_size(r.gemm_scratch), format_size(r.staging), format_size(model.output_head_bytes + model.small_bytes),
         request.ring_slots, format_size(suffix_max_slot[0]),
         cache_bound ? "; the KV cache is most of it: a shorter context (-c), fewer sequences, or a pool they share "
                       "(--kv-pool) makes it smaller"
                     : "");
  }
  for (size_t i = 0; i < resident; ++i) plan.layer_tier[i] = Tier::Vram;
  plan.vram_fixed = fixed;
  plan.vram_layers = prefix_resident[resident];
  plan.vram_slot_bytes = resident < n ? suffix_max_slot[resident] : 0;
  plan.vram_ring = uint64_t(request.ring_slots) * plan.vram_slot_bytes;
  if (model.tied_embeddings) {
    plan.token_embd_in_vram = true;  // it is the output head
  } else if (resident == n && plan.vram_total() + model.token_embd_bytes <= request.vram_budget) {
    plan.token_embd_in_vram = true;
    plan.vram_fixed += model.token_embd_bytes;
  }

  // Pinned RAM takes the next layers in order; storage streams the rest
  // through staging_slots host buffers (none when cuFile reads into VRAM).
  const size_t streamed = n - resident;
  auto ram_needed = [&](size_t in_ram) {
    uint64_t bytes = 0;
    for (size_t i = resident; i < resident + in_ram; ++i) bytes += model.layers[i].staging_bytes;
    const bool any_disk = resident + in_ram < n;
    if (any_disk && !request.disk_to_device) bytes += uint64_t(request.staging_slots) * suffix_max_staging[resident + in_ram];
    return bytes;
  };
  size_t in_ram = streamed + 1;
  for (size_t j = streamed + 1; j-- > 0;) {
    if (ram_needed(j) <= request.ram_budget) {
      in_ram = j;
      break;
    }
  }
  if (in_ram > streamed) {
    fail("RAM budget {} is too small: streaming {} layers from storage needs {} pinned staging buffers of {} ({})",
         format_size(request.ram_budget), streamed, request.staging_slots, format_size(suffix_max_staging[resident]),
         format_size(ram_needed(0)));
  }
  for (size_t i = resident; i < resident + in_ram; ++i) {
    plan.layer_tier[i] = Tier::Ram;
    plan.ram_layers += model.layers[i].staging_bytes;
    plan.streamed_from_ram += model.layers[i].streamed_bytes;
  }
  for (size_t i = resident + in_ram; i < n; ++i) plan.streamed_from_disk += model.layers[i].streamed_bytes;
  if (resident + in_ram < n && !request.disk_to_device) {
    plan.ram_slot_bytes = suffix_max_staging[resident + in_ram];
    plan.ram_staging = uint64_t(request.staging_slots) * plan.ram_slot_bytes;
  }
  return plan;
}

StepTime predict_step_time(const PlacementPlan& plan, const LinkSpeeds& speeds) {
  StepTime t;
  const double streamed = double(plan.streamed_from_ram + plan.streamed_from_disk);
  if (streamed > 0) {
    if (speeds.h2d_gbps <= 0) fail("a host-to-device speed is needed to predict streaming time");
    t.h2d_seconds = streamed / (speeds.h2d_gbps * 1e9);
  }
  if (plan.streamed_from_disk > 0) {
    if (speeds.disk_gbps <= 0) fail("a storage read speed is needed to predict streaming time");
    t.disk_seconds = double(plan.streamed_from_disk) / (speeds.disk_gbps * 1e9);
  }
  return t;
}

}  // namespace nt
