#include "cli/plan_multi_gpu.h"

#include <fmt/format.h>

#include "core/byte_size.h"
#include "core/error.h"

namespace nt::cli {
namespace {

std::string span(int64_t first, int64_t count) {
  return count == 1 ? fmt::format("{}", first) : fmt::format("{}-{}", first, first + count - 1);
}

std::string breakdown(const MultiGpuPlan& p) {
  std::string stages;
  for (const auto& g : p.gpus) stages += fmt::format("{}{:.6f}", stages.empty() ? "" : (p.split == Split::Layer ? " + " : ", "), g.stage.seconds());
  return p.split == Split::Layer ? fmt::format("GPU stages {} s in turn, hand-offs {:.6f} s", stages, p.communication)
                                 : fmt::format("GPU stages {} s at once, all-reduces {:.6f} s", stages, p.communication);
}

}  // namespace

std::optional<Split> parse_split(const std::string& text) {
  if (text == "layer") return Split::Layer;
  if (text == "tensor") return Split::Tensor;
  if (text == "auto") return std::nullopt;
  fail("--split '{}': expected layer, tensor or auto", text);
}

void print_multi_gpu_plan(const MultiGpuReportInput& in) {
  const MultiGpuRequest& r = in.request;
  fmt::print("\nGPUs ({} split{})\n", in.split ? split_name(*in.split) : "auto", in.split ? "" : ": the fastest predicted");
  for (size_t g = 0; g < r.gpus.size(); ++g) {
    const GpuResources& gpu = r.gpus[g];
    fmt::print("  GPU {:<3} VRAM budget {} ({}), H2D {:.2f} GB/s ({}), compute {:.0f} GB/s ({})\n", gpu.id,
               format_size(gpu.vram_budget), in.budget_sources[g], gpu.h2d_gbps, in.h2d_source, gpu.gpu_gbps,
               in.gpu_source);
  }
  if (r.gpus.size() > 1) {
    fmt::print("  GPU to GPU {:.2f} GB/s ({}), {:.0f} us a copy (ASSUMED)\n", r.peer_gbps, in.peer_source,
               r.peer_latency_s * 1e6);
  }

  const std::vector<SplitCandidate> candidates = split_candidates(*in.model, r);
  const SplitCandidate* chosen = nullptr;
  if (in.split) {
    for (const auto& c : candidates) {
      if (c.split == *in.split) chosen = &c;
    }
  } else {
    chosen = &fastest_split(candidates);
  }
  fmt::print("\npredicted pass of {} token{} per split\n", r.tokens, r.tokens == 1 ? "" : "s");
  for (const auto& c : candidates) {
    if (c.plan) {
      fmt::print("  {:<7} {:.6f} s = {:.2f} passes/s ({}){}\n", split_name(c.split), c.plan->seconds, 1.0 / c.plan->seconds,
                 breakdown(*c.plan), &c == chosen ? "  <- chosen" : "");
    } else {
      fmt::print("  {:<7} cannot: {}\n", split_name(c.split), c.error);
    }
  }
  if (!chosen->plan) fail("--split {}: {}", split_name(chosen->split), chosen->error);

  const MultiGpuPlan& p = *chosen->plan;
  fmt::print("\n{} split placement\n", split_name(p.split));
  for (const auto& g : p.gpus) {
    fmt::print("  GPU {:<3} layers {}  KV heads {}  FFN columns {}  tiers {} vram + {} ram + {} disk  VRAM {} of {}\n",
               g.gpu.id, span(g.first_layer, g.end_layer - g.first_layer), span(g.first_kv_head, g.kv_heads),
               span(g.first_ffn_column, g.ffn_columns), g.plan.count(Tier::Vram), g.plan.count(Tier::Ram),
               g.plan.count(Tier::Disk), format_size(g.plan.vram_total()), format_size(g.gpu.vram_budget));
  }
  fmt::print("  RAM (pinned, all GPUs) {} of {}\n", format_size(p.ram_total), format_size(r.ram_budget));
  if (p.split == Split::Tensor) {
    for (const auto& g : p.gpus) {
      if (g.plan.count(Tier::Disk) == 0) continue;
      fmt::print("  note: the runner streams a tensor split's cuts from pinned RAM only, so it would refuse this placement "
                 "(GPU {} reads layers from storage); raise --ram-budget, or --split layer reads storage\n",
                 g.gpu.id);
      break;
    }
  }
}

}  // namespace nt::cli
