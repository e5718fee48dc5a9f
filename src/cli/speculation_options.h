// The speculative decoding flags, declared once for every command that
// generates (run, chat, batch, bench): the draft source (--draft-model FILE,
// --draft-self [N], --lookup, --prediction FILE), --draft-max and --draft-tree [N]; their
// checks; opening the draft; one generator over both paths; and the
// statistics line.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/layer_skip_options.h"
#include "cli/model_options.h"
#include "engine/generator.h"
#include "engine/speculative.h"
#include "sampling/sampler.h"

namespace nt::cli {

struct SpeculationOptions {
  std::string draft_model;
  bool lookup = false;
  std::string prediction;  // --prediction FILE: the text the output is expected to resemble (a lookup draft)
  std::string prediction_ids;  // --prediction-ids: the same as token ids (a file or a list)
  int64_t draft_self_layers = 0;  // 0: default_self_draft_layers
  int64_t draft_max = 8;
  std::string draft_tree;  // --draft-tree's N; empty with the flag: the measured default
  // Set by the parser: whether --draft-self, --draft-max and --draft-tree were given.
  const CLI::Option* draft_self_flag = nullptr;
  const CLI::Option* draft_max_flag = nullptr;
  const CLI::Option* draft_tree_flag = nullptr;

  bool draft_self() const { return draft_self_flag && draft_self_flag->count() > 0; }
  bool predicts() const { return !prediction.empty() || !prediction_ids.empty(); }
  bool looks_up() const { return lookup || predicts(); }
  bool enabled() const { return looks_up() || draft_self() || !draft_model.empty(); }
  // The draft source's flag, for messages: "--lookup".
  std::string source_flag() const;
};

void add_speculation_options(CLI::App& cmd, SpeculationOptions& options);

// Refuses combinations that cannot work, naming the flags, before a model is loaded.
void check_speculation_options(const SpeculationOptions& options);

// Tokens of a token tree per verification pass (0: chains): --draft-tree's
// N, or without N the size measure_tree_budget chooses on `target` (its
// default sequence, emptied), said on stderr with what it measured.
int64_t resolve_draft_tree(const SpeculationOptions& options, ModelRunner& target);

// For a command that does not speculate (yet): refuses any speculation flag, naming it and saying why.
void refuse_speculation_options(const SpeculationOptions& options, std::string_view command, std::string_view why);

// The draft source of --draft-self, --lookup or --prediction (the drafts
// that need no second model) for sequence `seq` of `target`, sampling with
// `sampling`; null for --draft-model or none. With `layer_skip` enabled,
// --draft-self drafts without the layers it skips. A bad layer count or an
// unreadable prediction file names the flag.
std::unique_ptr<DraftSource> make_target_draft(const SpeculationOptions& options, LoadedModel& target,
                                               const SamplingParams& sampling, SeqId seq = 0,
                                               const LayerSkipOptions* layer_skip = nullptr);

// The target model of a command that may speculate, loaded as load_model
// does but leaving room for a --draft-model: on CUDA the draft's weights, KV
// cache and buffers come out of the target's VRAM budget, so the target
// streams more layers rather than the two exceed it.
LoadedModel load_target_model(const ModelOptions& target_options, const SpeculationOptions& speculation);

// The --draft-model for `target`, opened with the target's device, threads
// and context for `sequences` sequences; nt::Error naming the flag when it
// cannot load or its vocabulary differs (naming the first difference).
LoadedModel load_draft_model(const std::string& path, const ModelOptions& target_options, const LoadedModel& target,
                             int sequences = 1);

// --prediction's text tokenized without BOS, or --prediction-ids' ids
// (checked against the vocabulary); empty without either.
std::vector<int32_t> prediction_tokens(const SpeculationOptions& options, const Tokenizer& tokenizer);

// --draft-model for many sequences at once (batch): one draft runner with a
// sequence of its own for each of the target's.
class DraftModelSequences {
 public:
  DraftModelSequences(const std::string& path, const ModelOptions& target_options, const LoadedModel& target, int sequences);
  // A draft for the target's sequence `seq`, on its draft sequence.
  std::unique_ptr<DraftSource> draft_for(SeqId seq, const SamplingParams& sampling);

 private:
  LoadedModel model_;
  std::vector<std::pair<SeqId, SeqId>> seq_of_;  // (target's, draft's)
};

// A command's draft source, and the model it runs when it is a --draft-model.
class Speculation {
 public:
  // The draft for sequence `seq` of `target` (loaded with `target_options`,
  // whose device, threads and context a draft model gets too), sampling with
  // `sampling` (a sampling target gets a draft that samples, see
  // draft_sampling). No source when the options name none. A draft model
  // must have the target's vocabulary (nt::Error naming the first
  // difference); bad counts name the flag.
  // With `layer_skip` enabled, --draft-self drafts without the layers it skips.
  Speculation(const SpeculationOptions& options, const ModelOptions& target_options, LoadedModel& target,
              const SamplingParams& sampling, SeqId seq = 0, const LayerSkipOptions* layer_skip = nullptr);

  DraftSource* source() const { return source_.get(); }
  // Tokens of a token tree per pass (resolve_draft_tree); 0: chains.
  int64_t tree_tokens() const { return tree_tokens_; }

 private:
  LoadedModel draft_model_;
  std::unique_ptr<DraftSource> source_;
  int64_t tree_tokens_ = 0;
};

// Decoding one sequence with speculation when a draft is given, without it
// otherwise, behind one call: the commands are written once over both.
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

}  // namespace nt::cli
