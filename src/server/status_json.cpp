#include "server/status_json.h"

#include "server/server.h"

namespace nt::server {
namespace {

using nlohmann::json;

// A token limit as llama-server writes one: -1 for none.
int64_t limit_or_minus_one(int64_t max_tokens) { return max_tokens >= kNoTokenLimit ? -1 : max_tokens; }

json plan_json(const OpenedModel& model) {
  const ModelRunner& runner = *model.runner;
  json layers = json::array();
  json counts = {{"vram", 0}, {"ram", 0}, {"disk", 0}, {"cpu", 0}};
  for (const LayerPlace place : runner.layer_places()) {
    const std::string name(layer_place_name(place));
    layers.push_back(name);
    counts[name] = counts[name].get<int64_t>() + 1;
  }
  json notes = json::array();
  for (const std::string* note : {&model.hybrid_summary, &model.split_summary}) {
    if (!note->empty()) notes.push_back(*note);
  }
  return {{"device", runner.description()},
          {"gpus", model.gpus},
          {"layers", std::move(layers)},
          {"counts", std::move(counts)},
          {"weight_bytes_per_token", runner.weight_bytes_per_token()},
          {"kv_bytes_per_position", runner.kv_bytes_per_position()},
          {"kv_pool_positions", runner.kv_pages().page_count() * runner.kv_pages().page_size()},
          {"notes", std::move(notes)}};
}

}  // namespace

json props_json(const Engine& engine, const ServerOptions& options) {
  const OpenedModel& model = engine.model();
  const ModelSpec& spec = model.runner->config();
  const SamplingParams& s = options.sampling;
  return {{"model",
           {{"id", options.model_id},
            {"path", model.path},
            {"architecture", spec.architecture},
            {"n_layers", spec.n_layers},
            {"n_embd", spec.dim},
            {"n_vocab", spec.vocab_size},
            {"n_ctx_train", spec.context_length}}},
          {"n_ctx", model.runner->context_size()},
          {"total_slots", options.slots},
          {"speculative", engine.speculates()},
          {"default_generation_settings",
           {{"temperature", s.temperature},
            {"top_k", s.top_k},
            {"top_p", s.top_p},
            {"min_p", s.min_p},
            {"repeat_penalty", s.repeat_penalty},
            {"max_tokens", limit_or_minus_one(options.max_tokens)}}},
          {"plan", plan_json(model)}};
}

json slots_json(const EngineStats& stats, int64_t context) {
  json slots = json::array();
  for (size_t i = 0; i < stats.slots.size(); ++i) {
    const EngineSlot& slot = stats.slots[i];
    const SlotState& s = slot.state;
    json entry = {{"id", i},
                  {"state", s.busy ? "processing" : "idle"},
                  {"is_processing", s.busy},
                  {"id_task", s.busy ? json(slot.request) : json()},
                  {"request_id", s.busy ? json(slot.name) : json()},
                  {"n_ctx", context},
                  {"n_prompt_tokens", s.prompt_tokens},
                  {"n_prompt_tokens_cached", s.shared_prompt_tokens},
                  {"n_cached", s.cached}};
    const int64_t remaining = s.max_tokens >= kNoTokenLimit ? -1 : s.max_tokens - s.generated_tokens;
    entry["next_token"] = {{"has_next_token", s.busy}, {"n_decoded", s.generated_tokens}, {"n_remain", s.busy ? remaining : 0}};
    slots.push_back(std::move(entry));
  }
  return slots;
}

}  // namespace nt::server
