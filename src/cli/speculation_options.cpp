#include "cli/speculation_options.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>

#include "cli/id_list.h"
#include "cli/number_checks.h"
#include "core/error.h"
#include "core/read_file.h"
#include "engine/default_model.h"
#include "gguf/gguf_file.h"

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

// --draft-tree's N; -1 when it is to be measured (engine/drafts.h).
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

OpenedModel load_target_model(const ModelOptions& target_options, const SpeculationOptions& speculation) {
  ModelOptions target = target_options;
  target.draft_model = speculation.draft_model;
  return load_model(target);
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

DraftOptions draft_options(const SpeculationOptions& o, OpenedModel& target, const LayerSkipOptions* layer_skip) {
  DraftOptions d;
  d.model = o.draft_model;
  d.self = o.draft_self();
  d.self_layers = o.draft_self_layers;
  d.lookup = o.lookup;
  d.prediction = prediction_tokens(o, *target.tokenizer);
  d.max = o.draft_max;
  d.tree = draft_tree_arg(o);
  if (d.self && layer_skip && layer_skip->enabled()) d.self_schedule = layer_skip_draft_schedule(*layer_skip, target);
  return d;
}

std::unique_ptr<Engine> open_engine(const ModelOptions& model_options, const SpeculationOptions& o, EngineOptions engine) {
  const OpenModelOptions& target = engine.model;
  const std::string path = target.path.empty() ? default_model_path() : target.path;
  if (o.predicts()) {  // the prediction is read before the model loads, in its vocabulary
    const auto file = GgufFile::open(path);
    engine.draft.prediction = prediction_tokens(o, Tokenizer::from_gguf(file->header(), path));
  }
  engine.draft.model = o.draft_model;
  engine.draft.self = o.draft_self();
  engine.draft.self_layers = o.draft_self_layers;
  engine.draft.lookup = o.lookup;
  engine.draft.max = o.draft_max;
  engine.draft.tree = draft_tree_arg(o);
  engine.model.draft_model = o.draft_model;
  const LoadProgress progress(model_options, engine.model);
  std::unique_ptr<Engine> opened = Engine::open(std::move(engine));
  progress.done(opened->model());
  return opened;
}

void print_note(const std::string& note) { fmt::print(stderr, "{}\n", note); }

Speculation open_speculation(const SpeculationOptions& o, const ModelOptions& target_options, OpenedModel& target,
                             const SamplingParams& sampling, const LayerSkipOptions* layer_skip) {
  return Speculation(draft_options(o, target, layer_skip), open_options(target_options), target, sampling, 0, print_note);
}

}  // namespace nt::cli
