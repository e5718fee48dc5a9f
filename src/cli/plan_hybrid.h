// The four-tier part of `plan`: the CPU-layer split chosen for one pass of a
// token and of a batch, every other split beside it, and the projection for
// consumer machines (planning/hybrid_plan.h has the cost model).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "planning/hybrid_plan.h"

namespace nt::cli {

// --cpu-layers: "auto" (nullopt: the planner's choice) or a count; throws
// nt::Error naming the flag for anything else.
std::optional<int64_t> parse_cpu_layers(const std::string& text);

// Throws nt::Error naming --cpu-layers when the count exceeds the RAM tier.
void check_cpu_layers(std::optional<int64_t> cpu_layers, const PlacementPlan& base);

struct HybridReportInput {
  const ModelFootprint* model = nullptr;
  const PlacementPlan* base = nullptr;
  HybridRates rates;
  std::optional<int64_t> cpu_layers;  // --cpu-layers N (check_cpu_layers first), else auto
  int64_t batch_tokens = 1;           // the second pass size reported
};

// Prints the split and the predicted time of each path for 1 and
// batch_tokens tokens per pass, and a table over CPU-layer counts.
void print_hybrid_plan(const HybridReportInput& in);

// Decode on consumer machines from their published link, memory and VRAM
// rates, for this model: a projection, not a measurement. `request` gives
// the reserve and slots; each machine replaces the budgets.
void print_hybrid_projection(const ModelFootprint& model, const PlanRequest& request, uint64_t hidden_bytes_per_token);

}  // namespace nt::cli
