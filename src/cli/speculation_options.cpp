#include "cli/speculation_options.h"

#include <fmt/core.h>

#include "core/error.h"
#include "engine/lookup_draft.h"
#include "engine/self_draft.h"
#include "engine/step_drafter.h"

namespace nt::cli {

std::string SpeculationOptions::source_flag() const { return lookup ? "--lookup" : "--draft-self"; }

void add_speculation_options(CLI::App& cmd, SpeculationOptions& o) {
  cmd.add_flag("--lookup", o.lookup,
               "Speculative decoding drafting from the context (prompt lookup: what followed the latest n-gram "
               "match); the output is what decoding without it gives (greedy) or is distributed as it (sampling)");
  o.draft_self_flag = cmd.add_option("--draft-self", o.draft_self_layers,
                                     "Speculative decoding drafting with the model's own first N layers, final norm "
                                     "and head (N omitted: half the layers)")
                          ->expected(0, 1)
                          ->check(CLI::PositiveNumber);
  o.draft_max_flag = cmd.add_option("--draft-max", o.draft_max, "Speculation: tokens drafted per verification pass at most")
                         ->capture_default_str()
                         ->check(CLI::PositiveNumber);
}

void check_speculation_options(const SpeculationOptions& o) {
  if (o.lookup && o.draft_self()) fail("--lookup and --draft-self: choose one draft source");
  if (!o.enabled() && o.draft_max_flag && o.draft_max_flag->count() > 0) {
    fail("--draft-max needs a draft source: --lookup or --draft-self");
  }
}

std::unique_ptr<DraftSource> make_draft_source(const SpeculationOptions& o, ModelRunner& target, SeqId seq,
                                               const SamplingParams& sampling) {
  if (o.lookup) return std::make_unique<LookupDraft>();
  if (!o.draft_self()) return nullptr;
  const int64_t n_layers = target.config().n_layers;
  const int64_t layers = o.draft_self_layers > 0 ? o.draft_self_layers : default_self_draft_layers(n_layers);
  if (layers >= n_layers) fail("--draft-self {}: the model has {} layers, so draft with 1 to {}", layers, n_layers, n_layers - 1);
  return std::make_unique<SelfDraft>(target, seq, layers, draft_sampling(sampling));
}

std::string speculation_summary(const SpeculationStats& s) {
  return fmt::format("speculation: {} passes, {} of {} drafted tokens accepted ({:.1f}%), {:.2f} tokens per pass",
                     s.passes, s.accepted, s.drafted, 100.0 * s.acceptance(), s.tokens_per_pass());
}

}  // namespace nt::cli
