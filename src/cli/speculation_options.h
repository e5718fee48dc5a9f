// The speculative decoding flags, declared once for every command that
// generates (run, chat, batch, bench): the draft source (--draft-model FILE,
// --draft-self [N], --lookup, --prediction FILE), --draft-max and --draft-tree [N];
// their checks; and their translation into the engine's DraftOptions
// (engine/drafts.h), which opens the drafts.
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
#include "engine/drafts.h"
#include "engine/engine.h"
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

// For a command that does not speculate (yet): refuses any speculation flag, naming it and saying why.
void refuse_speculation_options(const SpeculationOptions& options, std::string_view command, std::string_view why);

// The flags as the engine's draft options for `target`: --prediction read
// and tokenized, --draft-tree's N (-1 when measured), and with a layer-skip
// list a --draft-self that runs the layers it keeps.
DraftOptions draft_options(const SpeculationOptions& options, OpenedModel& target,
                           const LayerSkipOptions* layer_skip = nullptr);

// The target model of a command that may speculate, loaded as load_model
// does but leaving room for a --draft-model: on CUDA the draft's weights, KV
// cache and buffers come out of the target's VRAM budget, so the target
// streams more layers rather than the two exceed it.
OpenedModel load_target_model(const ModelOptions& target_options, const SpeculationOptions& speculation);

// --prediction's text tokenized without BOS, or --prediction-ids' ids
// (checked against the vocabulary); empty without either.
std::vector<int32_t> prediction_tokens(const SpeculationOptions& options, const Tokenizer& tokenizer);

// A command's draft source (engine/drafts.h) from its flags; what a default
// chose is said on stderr.
Speculation open_speculation(const SpeculationOptions& options, const ModelOptions& target_options,
                             OpenedModel& target, const SamplingParams& sampling,
                             const LayerSkipOptions* layer_skip = nullptr);

// The engine facade over the model and draft flags (`engine.model` set from
// `model_options`), opened with a load progress line and logged; --prediction
// is read in the model's vocabulary before it loads.
std::unique_ptr<Engine> open_engine(const ModelOptions& model_options, const SpeculationOptions& options,
                                    EngineOptions engine);

// A note the engine leaves about a default it chose, said on stderr.
void print_note(const std::string& note);

}  // namespace nt::cli
