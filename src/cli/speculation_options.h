// The speculative decoding flags, declared once for every command that
// generates (run, chat, bench): the draft source (--lookup, --draft-self [N])
// and --draft-max, their checks, building the draft, and the statistics line.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "engine/model_runner.h"
#include "engine/speculative.h"
#include "sampling/sampler.h"

namespace nt::cli {

struct SpeculationOptions {
  bool lookup = false;
  int64_t draft_self_layers = 0;  // 0: default_self_draft_layers
  int64_t draft_max = 8;
  // Set by the parser: whether --draft-self and --draft-max were given.
  const CLI::Option* draft_self_flag = nullptr;
  const CLI::Option* draft_max_flag = nullptr;

  bool draft_self() const { return draft_self_flag && draft_self_flag->count() > 0; }
  bool enabled() const { return lookup || draft_self(); }
  // The draft source's flag, for messages: "--lookup".
  std::string source_flag() const;
};

void add_speculation_options(CLI::App& cmd, SpeculationOptions& options);

// Refuses combinations that cannot work, naming the flags, before a model is loaded.
void check_speculation_options(const SpeculationOptions& options);

// The draft source for decoding sequence `seq` of `target` with `sampling`
// (a sampling target gets a draft that samples its own chain, see
// draft_sampling); nullptr when speculation is off. Bad counts name the flag.
std::unique_ptr<DraftSource> make_draft_source(const SpeculationOptions& options, ModelRunner& target, SeqId seq,
                                               const SamplingParams& sampling);

// The closing statistics line: passes, acceptance, tokens per pass.
std::string speculation_summary(const SpeculationStats& stats);

}  // namespace nt::cli
