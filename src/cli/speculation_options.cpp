#include "cli/speculation_options.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>

#include "cli/number_checks.h"
#include "core/error.h"
#include "cli/id_list.h"
#include "core/read_file.h"
#include "engine/default_model.h"
#include "engine/lookup_draft.h"
#include "engine/model_draft.h"
#include "engine/self_draft.h"
#include "engine/step_drafter.h"
#include "engine/tree_budget.h"

namespace nt::cli {

std::string SpeculationOptions::source_flag() const {
  if (!draft_model.empty()) return "--draft-model";
  if (!prediction.empty()) return "--prediction";
  if (!prediction_ids.empty()) return "--prediction-ids";
  return lookup ? "--lookup" : "--draft-self";
}

void add_speculation_options(CLI::App& cmd, SpeculationOptions& o) {
  cmd.add_option("--draft-model", o.draft_model,
                 "Speculative decoding drafting with a second, smaller GGUF model of the same vocabulary (on the "
                 "target's device); the output is what decoding without it gives (greedy) or is distributed as it "
                 "(sampling)");
  o.draft_self_flag = cmd.add_option("--draft-self", o.draft_self_layers,
                                     "Speculative decoding drafting with the model's own first N layers, final norm "
                                     "and head (N omitted: its VRAM-resident layers where the others stream, else the "
                                     "first half)")
                          ->expected(0, 1)
                          ->check(positive());
  cmd.add_flag("--lookup", o.lookup,
               "Speculative decoding drafting from the context (prompt lookup: what followed the latest n-gram match)");
  cmd.add_option("--prediction", o.prediction,
                 "Speculative decoding drafting from a predicted output: a text FILE the answer is expected to "
                 "resemble (the document being edited, an earlier answer), looked up before the context as --lookup "
                 "looks up the context; the output is unchanged");
  cmd.add_option("--prediction-ids", o.prediction_ids,
                 "As --prediction, the predicted output given as token ids: a file or a list (\"1, 2, 3\"), such as "
                 "the generated ids --ids-out writes");
  o.draft_max_flag = cmd.add_option("--draft-max", o.draft_max,
                                    "Speculation: tokens drafted per verification pass at most (along each path of a "
                                    "token tree)")
                         ->capture_default_str()
                         ->check(positive());
  o.draft_tree_flag = cmd.add_option("--draft-tree", o.draft_tree,
                                     "Speculation: verify a token tree of up to N tokens per pass (the pending token and "
                                     "drafts that branch where the draft is unsure); N omitted: the largest whose pass "
                                     "costs at most 1.25 times a chain's, measured at load; 0: chains")
                          ->expected(0, 1);
}

namespace {

// --draft-tree's N; -1 when it is to be measured.
int64_t draft_tree_arg(const SpeculationOptions& o) {
  if (!o.draft_tree_flag || o.draft_tree_flag->count() == 0) return 0;
  if (o.draft_tree.empty()) return -1;
  int64_t n = 0;
  const auto [end, error] = std::from_chars(o.draft_tree.data(), o.draft_tree.data() + o.draft_tree.size(), n);
  if (error != std::errc() || end != o.draft_tree.data() + o.draft_tree.size() || n < 0 || n == 1) {
    fail("--draft-tree {}: a tree holds at least 2 tokens per pass (the pending one and a draft); 0 for chains, or no "
         "value for the measured default",
         o.draft_tree);
  }
  return n;
}

}  // namespace

int64_t resolve_draft_tree(const SpeculationOptions& o, ModelRunner& target) {
  const int64_t n = draft_tree_arg(o);
  if (n >= 0) return n;
  const TreeBudget budget = measure_tree_budget(target, 0, o.draft_max);
  std::string costs;
  for (const PassCost& c : budget.measured) costs += fmt::format(", {} tokens {:.2f}x", c.tokens, c.ratio);
  fmt::print(stderr, "--draft-tree: {} (passes against the chain's {} tokens{}; a tree may cost {:.2f}x)\n",
             budget.tokens > 0 ? fmt::format("{} tokens per pass", budget.tokens) : std::string("chains"),
             budget.chain_tokens, costs, kTreeCostRatio);
  return budget.tokens;
}

void check_speculation_options(const SpeculationOptions& o) {
  const int sources = int(!o.draft_model.empty()) + int(o.draft_self()) + int(o.looks_up());
  if (sources > 1) fail("--draft-model, --draft-self and --lookup (or --prediction): choose one draft source");
  if (!o.prediction.empty() && !o.prediction_ids.empty()) fail("--prediction and --prediction-ids: give the prediction once");
  if (!o.enabled() && o.draft_max_flag && o.draft_max_flag->count() > 0) {
    fail("--draft-max needs a draft source: --draft-model, --draft-self, --lookup or --prediction");
  }
  if (!o.enabled() && o.draft_tree_flag && o.draft_tree_flag->count() > 0) {
    fail("--draft-tree needs a draft source: --draft-model, --draft-self, --lookup or --prediction");
  }
  draft_tree_arg(o);
}

void refuse_speculation_options(const SpeculationOptions& o, std::string_view command, std::string_view why) {
  const bool draft_max = o.draft_max_flag && o.draft_max_flag->count() > 0;
  const bool draft_tree = o.draft_tree_flag && o.draft_tree_flag->count() > 0;
  if (o.enabled() || draft_max || draft_tree) {
    fail("{} {}: {} does not decode speculatively yet ({}); run and chat do", command,
         o.enabled() ? o.source_flag() : draft_max ? "--draft-max" : "--draft-tree", command, why);
  }
}

LoadedModel load_target_model(const ModelOptions& target_options, const SpeculationOptions& speculation) {
  ModelOptions target = target_options;
  target.draft_model = speculation.draft_model;
  return load_model(target);
}

LoadedModel load_draft_model(const std::string& path, const ModelOptions& target_options, const LoadedModel& target,
                             int sequences) {
  ModelOptions draft = target_options;
  draft.model = path;
  draft.context = target.runner->context_size();
  draft.sequences = sequences;
  // The budgets and the trace are the target's; the draft is small and resident.
  draft.vram_budget.clear();
  draft.ram_budget.clear();
  draft.trace.clear();
  // A small draft runs on the target's first GPU alone.
  draft.gpus = target_options.gpus.substr(0, target_options.gpus.find(','));
  draft.split.clear();
  draft.draft_model.clear();
  LoadedModel loaded;
  try {
    loaded = load_model(draft);
  } catch (const Error& e) {
    fail("--draft-model: {}", e.what());
  }
  const std::string target_path = target_options.model.empty() ? default_model_path() : target_options.model;
  check_same_vocabulary(target.tokenizer->vocab(), target.runner->config().vocab_size, target_path,
                        loaded.tokenizer->vocab(), loaded.runner->config().vocab_size, path);
  return loaded;
}

DraftModelSequences::DraftModelSequences(const std::string& path, const ModelOptions& target_options,
                                         const LoadedModel& target, int sequences)
    : model_(load_draft_model(path, target_options, target, sequences)) {}

std::unique_ptr<DraftSource> DraftModelSequences::draft_for(SeqId seq, const SamplingParams& sampling) {
  auto known = std::find_if(seq_of_.begin(), seq_of_.end(), [&](const auto& p) { return p.first == seq; });
  if (known == seq_of_.end()) {
    // The default sequence drafts on the draft's; the others get one as their slots first draft.
    seq_of_.emplace_back(seq, seq == 0 ? SeqId(0) : model_.runner->seq_alloc());
    known = seq_of_.end() - 1;
  }
  return std::make_unique<ModelDraft>(*model_.runner, known->second, draft_sampling(sampling));
}

std::unique_ptr<DraftSource> make_target_draft(const SpeculationOptions& o, LoadedModel& target,
                                               const SamplingParams& sampling, SeqId seq,
                                               const LayerSkipOptions* layer_skip) {
  ModelRunner& runner = *target.runner;
  if (o.draft_self() && layer_skip && layer_skip->enabled()) {
    return std::make_unique<SelfDraft>(runner, seq, layer_skip_draft_schedule(*layer_skip, target),
                                       draft_sampling(sampling));
  }
  if (o.draft_self()) {
    const int64_t n_layers = runner.config().n_layers;
    if (o.draft_self_layers == 0) {
      // Where layers stream, the resident ones draft without a transfer.
      const std::vector<int32_t> resident = runner.resident_layers();
      if (!resident.empty() && int64_t(resident.size()) < n_layers) {
        if (seq == 0) fmt::print(stderr, "--draft-self: drafting with the {} VRAM-resident layers of {}\n", resident.size(), n_layers);
        return std::make_unique<SelfDraft>(runner, seq, LayerSchedule{resident}, draft_sampling(sampling));
      }
    }
    const int64_t layers = o.draft_self_layers > 0 ? o.draft_self_layers : default_self_draft_layers(n_layers);
    if (layers >= n_layers) {
      fail("--draft-self {}: the model has {} layers, so draft with 1 to {}", layers, n_layers, n_layers - 1);
    }
    return std::make_unique<SelfDraft>(runner, seq, layers, draft_sampling(sampling));
  }
  if (o.looks_up()) return LookupDraft::predicting(prediction_tokens(o, *target.tokenizer));
  return nullptr;
}

std::vector<int32_t> prediction_tokens(const SpeculationOptions& o, const Tokenizer& tokenizer) {
  if (!o.prediction_ids.empty()) {
    std::vector<int32_t> ids = read_id_list(o.prediction_ids, "--prediction-ids");
    check_ids_in_vocabulary(ids, tokenizer.vocab().size(), "--prediction-ids");
    return ids;
  }
  if (o.prediction.empty()) return {};
  try {
    return tokenizer.encode(read_file(o.prediction), false);
  } catch (const Error& e) {
    fail("--prediction: {}", e.what());
  }
}

Speculation::Speculation(const SpeculationOptions& o, const ModelOptions& target_options, LoadedModel& target,
                         const SamplingParams& sampling, SeqId seq, const LayerSkipOptions* layer_skip) {
  if (!o.draft_model.empty()) {
    draft_model_ = load_draft_model(o.draft_model, target_options, target);
    source_ = std::make_unique<ModelDraft>(*draft_model_.runner, 0, draft_sampling(sampling));
  } else {
    source_ = make_target_draft(o, target, sampling, seq, layer_skip);
  }
  if (source_) {
    tree_tokens_ = resolve_draft_tree(o, *target.runner);
    warm_up_verification(*target.runner, seq, o.draft_max, tree_tokens_ > 0);
  }
}

SpeculativeOrPlainGenerator::SpeculativeOrPlainGenerator(ModelRunner& runner, const Tokenizer& tokenizer,
                                                         DraftSource* draft, int64_t draft_max, int64_t tree_tokens)
    : plain_(runner, tokenizer) {
  if (draft) speculative_.emplace(runner, tokenizer, *draft, draft_max, 0, tree_tokens);
}

SpeculativeStats SpeculativeOrPlainGenerator::generate(std::span<const int32_t> prompt, Sampler& sampler,
                                                       const GenerationOptions& options, const TextSink& on_text) {
  if (speculative_) return speculative_->generate(prompt, sampler, options, on_text);
  return {plain_.generate(prompt, sampler, options, on_text), {}};
}

const std::vector<int32_t>& SpeculativeOrPlainGenerator::generated() const {
  return speculative_ ? speculative_->generated() : plain_.generated();
}

std::string speculation_summary(const SpeculationStats& s) {
  return fmt::format("speculation: {} passes, {} of {} drafted tokens accepted ({:.1f}%), {:.2f} tokens per pass",
                     s.passes, s.accepted, s.drafted, 100.0 * s.acceptance(), s.tokens_per_pass());
}

}  // namespace nt::cli
