#include "cli/plan_experts.h"

#include <fmt/format.h>

#include "core/byte_size.h"
#include "planning/expert_plan.h"

namespace nt::cli {

void print_expert_plan(const ExpertReportInput& in) {
  using enum LayerRole;
  const ModelSpec& c = *in.config;
  const ModelFootprint& model = *in.model;
  // The layers without their experts, which the GPU holds resident.
  uint64_t layers = 0, expert_stacks = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    layers += model.layers[size_t(l)].resident_bytes;
    for (const LayerRole role : {FfnGateExperts, FfnUpExperts, FfnDownExperts}) {
      expert_stacks += group_device_bytes({&(*in.weights).layers[size_t(l)][role]});
    }
  }
  const uint64_t dense = layers - expert_stacks;
  const uint64_t head = model.output_head_bytes + model.small_bytes;
  const uint64_t scratch = in.buffers.gemm + in.buffers.activations + kUploadStagingBytes;
  const uint64_t fixed = dense + head + in.buffers.kv + in.buffers.page_table + scratch;
  const ExpertPlan p = plan_experts(c, *in.weights, in.vram_budget > fixed ? in.vram_budget - fixed : 0);
  const MoeSpec& moe = c.layers[0].moe;

  auto row = [](const std::string& label, const std::string& value) { fmt::print("  {:<34} {:>12}\n", label, value); };
  fmt::print("budgets  VRAM {} ({})\n         RAM  {} ({})\n", format_size(in.vram_budget), in.vram_source,
             format_size(in.ram_budget), in.ram_source);
  fmt::print("\nVRAM\n");
  row("KV cache and block table", format_size(in.buffers.kv + in.buffers.page_table));
  row(fmt::format("activations, logits (batch {})", in.batch), format_size(in.buffers.activations));
  row("prefill GEMM scratch, upload buffer", format_size(in.buffers.gemm + kUploadStagingBytes));
  row("output head, norms, token embedding", format_size(head));
  row("attention and routers (every layer)", format_size(dense));
  row(fmt::format("experts ({} of {}, {} each)", p.slots, p.experts, format_size(p.slot_bytes)),
      format_size(uint64_t(p.slots) * p.slot_bytes));
  if (!p.all_resident()) row("a miss's landing buffer", format_size(p.landing_bytes));
  row("total", format_size(fixed + p.vram_bytes()) + " of " + format_size(in.vram_budget));
  fmt::print("RAM (pinned)\n");
  row("experts (every one, as the file lays them out)", format_size(p.pinned_bytes()));
  if (p.pinned_bytes() > in.ram_budget) {
    fmt::print("  the experts need {} of pinned RAM beyond the RAM budget of {}\n", format_size(p.pinned_bytes()),
               format_size(in.ram_budget));
  }

  // A token reads its k experts a layer; at uniform routing a share
  // slots / experts of them is in VRAM, with counts the share of the counted
  // choices that the experts placed first take; the rest crosses the link.
  const double hit = in.counts.empty() ? p.uniform_hit_rate()
                                       : counted_share(in.counts, experts_in_vram(p, c.n_layers, in.counts));
  const double link_bytes = double(p.used_bytes_per_token) * (1.0 - hit);
  const double vram_bytes = double(dense + head) + double(p.used_bytes_per_token) * hit;
  const double resident_seconds = vram_bytes / (in.gpu_gbps * 1e9);
  fmt::print("\nper token (one decode step; {} of {} experts a layer)\n", moe.n_experts_used, moe.n_experts);
  fmt::print("  experts read        {:>12}\n", format_size(p.used_bytes_per_token));
  if (in.counts.empty()) {
    fmt::print("  in VRAM             {:>11.1f}% (uniform routing, the worst case of the cache; skewed routing hits more; "
               "calibrate-experts counts a text's)\n",
               100.0 * hit);
  } else {
    fmt::print("  in VRAM             {:>11.1f}% (the counted choices the experts placed first take: {})\n", 100.0 * hit,
               in.counts_source);
  }
  fmt::print("  over the link       {:>12}\n", format_size(uint64_t(link_bytes)));
  fmt::print("  H2D link            {:>9.2f} GB/s ({})\n", in.h2d_gbps, in.h2d_source);
  fmt::print("  GPU reads           {:>9.0f} GB/s ({})\n", in.gpu_gbps, in.gpu_source);
  if (p.all_resident()) {
    fmt::print("  predicted           {:>9.3f} ms/token = {:.1f} tok/s (VRAM reads)\n", 1e3 * resident_seconds,
               1.0 / resident_seconds);
    return;
  }
  std::string cpu_source;
  const double cpu_gbps = in.cpu_gbps(cpu_source);
  const double copied = resident_seconds + link_bytes / (in.h2d_gbps * 1e9);
  // --expert-misses auto: the CPU computes a share of the misses from pinned
  // RAM while the link copies the rest, so that both finish together.
  const double split = resident_seconds + link_bytes / ((in.h2d_gbps + cpu_gbps) * 1e9);
  fmt::print("  CPU                 {:>9.2f} GB/s of weights at one token ({})\n", cpu_gbps, cpu_source);
  fmt::print("  predicted, misses copied             {:>9.3f} ms/token = {:.1f} tok/s (VRAM reads then the copies, not "
             "overlapped)\n",
             1e3 * copied, 1.0 / copied);
  fmt::print("  predicted, misses split with the CPU {:>9.3f} ms/token = {:.1f} tok/s (--expert-misses auto, the default: "
             "the link and the CPU together)\n",
             1e3 * split, 1.0 / split);
}

}  // namespace nt::cli
