#include "cli/plan_hybrid.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <vector>

#include "core/error.h"
#include "engine/hybrid_split.h"

namespace nt::cli {
namespace {

std::string cpu_layer_list(const HybridPlan& p) {
  std::string s;
  for (size_t i = 0; i < p.path.size(); ++i) {
    if (p.path[i] == Path::Cpu) s += fmt::format("{}{}", s.empty() ? "" : ",", i);
  }
  return s.empty() ? "-" : s;
}

std::string split(const HybridPlan& p) {
  return fmt::format("{} vram + {} ram-streamed + {} disk-streamed + {} cpu", p.count(Path::Vram), p.count(Path::Ram),
                     p.count(Path::Disk), p.count(Path::Cpu));
}

double ms(double seconds) { return seconds * 1e3; }

void print_pass(const HybridReportInput& in, int64_t tokens) {
  const std::vector<HybridPlan> all = hybrid_alternatives(*in.model, *in.base, in.rates, tokens);
  const HybridPlan best = plan_hybrid(*in.model, *in.base, in.rates, tokens);
  const HybridPlan& chosen = in.cpu_layers ? all[size_t(*in.cpu_layers)] : best;
  const HybridPlan& alone = all[0];
  const HybridStep& s = chosen.step;
  const std::string why = in.cpu_layers                ? "given by --cpu-layers"
                          : chosen.count(Path::Cpu) > 0 ? "auto: the fastest split"
                                                        : "auto: no split beats streaming alone";
  fmt::print("\npass of {} token{}: {} CPU layers ({})\n", tokens, tokens == 1 ? "" : "s", chosen.count(Path::Cpu), why);
  fmt::print("  split                         {}\n", split(chosen));
  fmt::print("  CPU layers                    {}\n", cpu_layer_list(chosen));
  fmt::print("  GPU: resident layers, head    {:>9.2f} ms  (not overlapped)\n", ms(s.gpu_resident));
  fmt::print("  link: streamed layers         {:>9.2f} ms  | the pass takes the longest of these three\n", ms(s.link));
  fmt::print("    + idle behind CPU layers    {:>9.2f} ms  |   (its ring of slots full)\n", ms(s.link_idle));
  fmt::print("  storage: disk layers          {:>9.2f} ms  |\n", ms(s.disk));
  fmt::print("  CPU layers + GPU streamed     {:>9.2f} ms  | ({:.2f} + {:.2f})\n", ms(s.cpu + s.gpu_streamed), ms(s.cpu),
             ms(s.gpu_streamed));
  fmt::print("  hidden-state hand-offs        {:>9.2f} ms  (not overlapped)\n", ms(s.handoff));
  fmt::print("  pass                          {:>9.2f} ms = {:.2f} ms/token, {:.2f} tok/s\n", ms(s.seconds()),
             ms(s.seconds()) / double(tokens), double(tokens) / s.seconds());
  fmt::print("  streaming alone               {:>9.2f} ms = {:.2f} tok/s; this split {:.2f}x\n", ms(alone.step.seconds()),
             double(tokens) / alone.step.seconds(), alone.step.seconds() / s.seconds());

  // Other splits: a dozen counts across the RAM tier, the best and the chosen among them.
  const int64_t ram = int64_t(all.size()) - 1;
  std::set<int64_t> rows{0, ram, best.count(Path::Cpu), chosen.count(Path::Cpu)};
  for (int64_t k = 0; k <= ram; k += std::max<int64_t>(1, (ram + 9) / 10)) rows.insert(k);
  fmt::print("  other splits   cpu layers    pass ms   tok/s   link ms   cpu+gpu ms   vs streaming alone\n");
  for (int64_t k : rows) {
    const HybridStep& t = all[size_t(k)].step;
    fmt::print("                 {:>10} {:>10.2f} {:>7.2f} {:>9.2f} {:>12.2f}   {:.2f}x{}\n", k, ms(t.seconds()),
               double(tokens) / t.seconds(), ms(t.link), ms(t.cpu + t.gpu_streamed), alone.step.seconds() / t.seconds(),
               k == chosen.count(Path::Cpu) ? "  <- chosen" : "");
  }
}

// What a run does with passes of 1 to kHybridMaxTokens tokens
// (plan_cpu_passes, as CudaRunnerOptions get them).
void print_pass_widths(const HybridReportInput& in) {
  const int64_t cpu = in.cpu_layers ? *in.cpu_layers : plan_hybrid(*in.model, *in.base, in.rates, 1).count(Path::Cpu);
  if (cpu == 0) return;
  const CpuPassPlan passes = plan_cpu_passes(*in.model, *in.base, in.rates, cpu, kHybridMaxTokens);
  const int64_t all = passes.all_up_to;
  fmt::print("\npasses by width, as a run takes them: the {} CPU layers up to {} token{}, then a share of them\n", cpu, all,
             all == 1 ? "" : "s");
  fmt::print("  tokens   cpu layers    pass ms      tok/s   vs streaming alone\n");
  for (int64_t t = 1; t <= kHybridMaxTokens; t *= 2) {
    const int64_t share = passes.share(t, cpu);
    const double pass = predict_hybrid_step(*in.model, cpu_share_paths(*in.base, cpu, share), in.rates, t).seconds();
    const double alone = spread_cpu_layers(*in.model, *in.base, in.rates, t, 0).step.seconds();
    fmt::print("  {:>6} {:>12} {:>10.2f} {:>10.2f}   {:.2f}x\n", t, share, ms(pass), double(t) / pass, alone / pass);
  }
}

}  // namespace

std::optional<int64_t> parse_cpu_layers(const std::string& text) {
  if (text == "auto") return std::nullopt;
  int64_t n = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 0) {
    fail("--cpu-layers: expected a layer count (0 for none) or auto, got '{}'", text);
  }
  return n;
}

void check_cpu_layers(std::optional<int64_t> cpu_layers, const PlacementPlan& base) {
  if (cpu_layers && *cpu_layers > base.count(Tier::Ram)) {
    fail("--cpu-layers {}: the CPU computes only layers held in host RAM, and these budgets put {} there "
         "(raise --ram-budget or lower --vram-budget for more)",
         *cpu_layers, base.count(Tier::Ram));
  }
}

void print_hybrid_plan(const HybridReportInput& in) {
  if (in.base->count(Tier::Ram) == 0) {
    fmt::print("\nno layer is in host RAM: nothing for the CPU to compute\n");
    return;
  }
  print_pass(in, 1);
  if (in.batch_tokens > 1) {
    print_pass(in, in.batch_tokens);
    print_pass_widths(in);  // wider passes need the CPU's rate at batch_tokens
  }
}

void print_hybrid_projection(const ModelFootprint& model, const PlanRequest& request, uint64_t hidden_bytes_per_token) {
  // Published nominal rates, times the share this engine reaches of each on
  // the H200 host (docs/PERFORMANCE.md): pinned H2D 55.3 of PCIe 5.0 x16's
  // 63 GB/s (88%; taken as 85% for consumer chipsets), resident 70B decode
  // 79% of the GPU's memory rate. The CPU's share of nominal DRAM is assumed,
  // 70%: the H200 host's DRAM rate is not published, so it cannot be derived.
  constexpr double kLinkShare = 0.85, kGpuShare = 0.79, kCpuShare = 0.70;
  struct Machine {
    const char* name;
    const char* link;
    double link_gbps;  // nominal, one direction
    const char* memory;
    double memory_gbps;  // nominal: channels x 8 bytes x MT/s
    double vram_gbps;    // nominal
    uint64_t vram_budget;
    uint64_t ram_budget;
  };
  const Machine machines[] = {
      {"RTX 4090", "PCIe 4.0 x16", 31.5, "2 x DDR5-5600", 89.6, 1008, 22ull << 30, 48ull << 30},
      {"RTX 3090", "PCIe 3.0 x8", 7.88, "2 x DDR4-3200", 51.2, 936, 22ull << 30, 48ull << 30},
  };
  fmt::print("\nPROJECTION for consumer machines, one token per pass, from published nominal rates (not measured):\n");
  fmt::print("  link x {:.2f}, GPU memory x {:.2f}, CPU = DRAM x {:.2f} (ASSUMED); VRAM budget 22 GiB of 24, RAM 48 GiB\n",
             kLinkShare, kGpuShare, kCpuShare);
  fmt::print("  {:<9} {:<13} {:<14} {:>24}   {:>15} {:>15} {:>7}\n", "GPU", "link", "memory", "split v+r+d+cpu",
             "streaming tok/s", "hybrid tok/s", "gain");
  for (const Machine& m : machines) {
    PlanRequest r = request;
    r.vram_budget = m.vram_budget;
    r.ram_budget = m.ram_budget;
    const PlacementPlan base = plan_placement(model, r);
    HybridRates rates;
    rates.link = {m.link_gbps * kLinkShare, 0};
    rates.cpu = {m.memory_gbps * kCpuShare, 0, 1};
    rates.gpu_gbps = m.vram_gbps * kGpuShare;
    rates.hidden_bytes_per_token = hidden_bytes_per_token;
    if (base.count(Tier::Disk) > 0) rates.link.disk_gbps = 3.5;  // a PCIe 3.0 NVMe drive's published sequential read
    const HybridPlan best = plan_hybrid(model, base, rates, 1);
    const double alone = spread_cpu_layers(model, base, rates, 1, 0).step.seconds();
    fmt::print("  {:<9} {:<13} {:<14} {:>24}   {:>15.2f} {:>15.2f} {:>6.2f}x\n", m.name, m.link, m.memory,
               fmt::format("{}+{}+{}+{}", best.count(Path::Vram), best.count(Path::Ram), best.count(Path::Disk),
                           best.count(Path::Cpu)),
               1 / alone, 1 / best.step.seconds(), alone / best.step.seconds());
  }
}

}  // namespace nt::cli
