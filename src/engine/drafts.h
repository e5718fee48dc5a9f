// Where speculative drafts come from, as plain data, and everything that
// turns it into draft sources: a second (draft) model opened beside the
// target, the model's own first layers, lookup in the context or in a
// predicted output. Every front end (the CLI, the engine facade, the server)
// sets a DraftOptions and gets the same drafts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/open_model.h"
#include "engine/speculative.h"
#include "runtime/layer_schedule.h"
#include "sampling/sampler.h"

namespace nt {

struct DraftOptions {
  std::string model;                // a draft model file of the target's vocabulary
  bool self = false;                // the target's own first layers
  int64_t self_layers = 0;          // with self: 0 = its VRAM-resident layers where others stream, else the first half
  bool lookup = false;              // what followed the latest match in the context
  std::vector<int32_t> prediction;  // a predicted output, looked up before the context (implies lookup)
  int64_t max = 8;                  // tokens drafted per verification pass at most
  int64_t tree = 0;                 // tokens of a token tree per pass; 0: chains; -1: measured at load
  // With self: the layers the draft runs instead (a layer-skip list's), when given.
  std::optional<LayerSchedule> self_schedule;

  bool looks_up() const { return lookup || !prediction.empty(); }
  bool enabled() const { return !model.empty() || self || looks_up(); }
};

// The target's open options with room kept for a draft model: on CUDA the
// draft's weights, KV cache and buffers come out of the target's VRAM budget.
OpenModelOptions target_open_options(OpenModelOptions target, const DraftOptions& draft);

// A draft model for `target`, opened with its device, threads and context for
// `sequences` sequences, on its first GPU alone; nt::Error naming
// --draft-model when it cannot load or its vocabulary differs (naming the
// first difference).
OpenedModel open_draft_model(const std::string& path, const OpenModelOptions& target_options, const OpenedModel& target,
                             int sequences = 1);

// The draft that needs no second model (self or lookup) for sequence `seq`
// of `target`, sampling with `sampling`; null for a draft model or none.
// `on_note` hears what a default chose ("drafting with the 12 VRAM-resident layers").
std::unique_ptr<DraftSource> make_target_draft(const DraftOptions& options, OpenedModel& target,
                                               const SamplingParams& sampling, SeqId seq = 0,
                                               const std::function<void(const std::string&)>& on_note = {});

// Tokens of a token tree per pass: options.tree, or for -1 the size that
// measure_tree_budget chooses on `target` (its default sequence, emptied),
// with what it measured in `note`.
int64_t resolve_draft_tree(const DraftOptions& options, ModelRunner& target, std::string* note = nullptr);

// A draft model for many sequences at once (batching): one draft runner with
// a sequence of its own for each of the target's.
class DraftModelSequences {
 public:
  DraftModelSequences(const std::string& path, const OpenModelOptions& target_options, const OpenedModel& target,
                      int sequences);
  // A draft for the target's sequence `seq`, on its draft sequence.
  std::unique_ptr<DraftSource> draft_for(SeqId seq, const SamplingParams& sampling);

 private:
  OpenedModel model_;
  std::vector<std::pair<SeqId, SeqId>> seq_of_;  // (target's, draft's)
};

// One sequence's draft source, and the model it runs when it is a draft model.
class Speculation {
 public:
  // No source when the options name none. The verification passes are warmed up here.
  Speculation(const DraftOptions& options, const OpenModelOptions& target_options, OpenedModel& target,
              const SamplingParams& sampling, SeqId seq = 0,
              const std::function<void(const std::string&)>& on_note = {});

  DraftSource* source() const { return source_.get(); }
  // Tokens of a token tree per pass (resolve_draft_tree); 0: chains.
  int64_t tree_tokens() const { return tree_tokens_; }

 private:
  OpenedModel draft_model_;
  std::unique_ptr<DraftSource> source_;
  int64_t tree_tokens_ = 0;
};

// Decoding one sequence with speculation when a draft is given, without it
// otherwise, behind one call.
class SpeculativeOrPlainGenerator {
 public:
  SpeculativeOrPlainGenerator(ModelRunner& runner, const Tokenizer& tokenizer, DraftSource* draft, int64_t draft_max,
                              int64_t tree_tokens = 0);

  // As Generator::generate; the speculation statistics stay zero without a draft.
  SpeculativeStats generate(std::span<const int32_t> prompt, Sampler& sampler, const GenerationOptions& options,
                            const TextSink& on_text);
  const std::vector<int32_t>& generated() const;
  bool speculates() const { return speculative_.has_value(); }

 private:
  Generator plain_;
  std::optional<SpeculativeGenerator> speculative_;
};

// The closing statistics line: passes, acceptance, tokens per pass.
std::string speculation_summary(const SpeculationStats& stats);

}  // namespace nt
