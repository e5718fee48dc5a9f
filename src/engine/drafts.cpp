#include "engine/drafts.h"

#include <fmt/core.h>

#include <algorithm>

#include "core/error.h"
#include "engine/default_model.h"
#include "engine/lookup_draft.h"
#include "engine/model_draft.h"
#include "engine/self_draft.h"
#include "engine/step_drafter.h"
#include "engine/tree_budget.h"

namespace nt {

OpenModelOptions target_open_options(OpenModelOptions target, const DraftOptions& draft) {
  target.draft_model = draft.model;
  return target;
}

OpenedModel open_draft_model(const std::string& path, const OpenModelOptions& target_options, const OpenedModel& target,
                             int sequences) {
  OpenModelOptions draft = target_options;
  draft.path = path;
  draft.context = target.runner->context_size();
  draft.sequences = sequences;
  // The budgets and the trace are the target's; the draft is small and resident, on the target's first GPU.
  draft.vram_budget.reset();
  draft.ram_budget.reset();
  draft.vram_budgets.clear();
  draft.trace_path.clear();
  if (!draft.gpus.empty()) draft.gpus.resize(1);
  draft.split.reset();
  draft.nccl_id_file.clear();
  draft.draft_model.clear();
  draft.cpu_layers.reset();
  draft.on_load_progress = nullptr;
  OpenedModel opened;
  try {
    opened = open_model(draft);
  } catch (const Error& e) {
    fail("--draft-model: {}", e.what());
  }
  check_same_vocabulary(target.tokenizer->vocab(), target.runner->config().vocab_size, target.path,
                        opened.tokenizer->vocab(), opened.runner->config().vocab_size, path);
  return opened;
}

std::unique_ptr<DraftSource> make_target_draft(const DraftOptions& o, OpenedModel& target,
                                               const SamplingParams& sampling, SeqId seq,
                                               const std::function<void(const std::string&)>& on_note) {
  ModelRunner& runner = *target.runner;
  if (o.self && o.self_schedule) {
    return std::make_unique<SelfDraft>(runner, seq, *o.self_schedule, draft_sampling(sampling));
  }
  if (o.self) {
    const int64_t n_layers = runner.config().n_layers;
    if (o.self_layers == 0) {
      // Where layers stream, the resident ones draft without a transfer.
      const std::vector<int32_t> resident = runner.resident_layers();
      if (!resident.empty() && int64_t(resident.size()) < n_layers) {
        if (seq == 0 && on_note) {
          on_note(fmt::format("--draft-self: drafting with the {} VRAM-resident layers of {}", resident.size(), n_layers));
        }
        return std::make_unique<SelfDraft>(runner, seq, LayerSchedule{resident}, draft_sampling(sampling));
      }
    }
    const int64_t layers = o.self_layers > 0 ? o.self_layers : default_self_draft_layers(n_layers);
    if (layers >= n_layers) {
      fail("--draft-self {}: the model has {} layers, so draft with 1 to {}", layers, n_layers, n_layers - 1);
    }
    return std::make_unique<SelfDraft>(runner, seq, layers, draft_sampling(sampling));
  }
  if (o.looks_up()) return LookupDraft::predicting(o.prediction);
  return nullptr;
}

int64_t resolve_draft_tree(const DraftOptions& o, ModelRunner& target, std::string* note) {
  if (o.tree >= 0) return o.tree;
  const TreeBudget budget = measure_tree_budget(target, 0, o.max);
  if (note) {
    std::string costs;
    for (const PassCost& c : budget.measured) costs += fmt::format(", {} tokens {:.2f}x", c.tokens, c.ratio);
    *note = fmt::format("--draft-tree: {} (passes against the chain's {} tokens{}; a tree may cost {:.2f}x)",
                        budget.tokens > 0 ? fmt::format("{} tokens per pass", budget.tokens) : std::string("chains"),
                        budget.chain_tokens, costs, kTreeCostRatio);
  }
  return budget.tokens;
}

DraftModelSequences::DraftModelSequences(const std::string& path, const OpenModelOptions& target_options,
                                         const OpenedModel& target, int sequences)
    : model_(open_draft_model(path, target_options, target, sequences)) {}

std::unique_ptr<DraftSource> DraftModelSequences::draft_for(SeqId seq, const SamplingParams& sampling) {
  auto known = std::find_if(seq_of_.begin(), seq_of_.end(), [&](const auto& p) { return p.first == seq; });
  if (known == seq_of_.end()) {
    // The default sequence drafts on the draft's; the others get one as their slots first draft.
    seq_of_.emplace_back(seq, seq == 0 ? SeqId(0) : model_.runner->seq_alloc());
    known = seq_of_.end() - 1;
  }
  return std::make_unique<ModelDraft>(*model_.runner, known->second, draft_sampling(sampling));
}

Speculation::Speculation(const DraftOptions& o, const OpenModelOptions& target_options, OpenedModel& target,
                         const SamplingParams& sampling, SeqId seq,
                         const std::function<void(const std::string&)>& on_note) {
  if (!o.model.empty()) {
    draft_model_ = open_draft_model(o.model, target_options, target);
    source_ = std::make_unique<ModelDraft>(*draft_model_.runner, 0, draft_sampling(sampling));
  } else {
    source_ = make_target_draft(o, target, sampling, seq, on_note);
  }
  if (source_) {
    std::string note;
    tree_tokens_ = resolve_draft_tree(o, *target.runner, &note);
    if (!note.empty() && on_note) on_note(note);
    warm_up_verification(*target.runner, seq, o.max, tree_tokens_ > 0);
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

}  // namespace nt
