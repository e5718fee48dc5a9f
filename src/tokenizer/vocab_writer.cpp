#include "tokenizer/vocab_writer.h"

namespace nt {

void add_vocab_metadata(GgufWriter& w, const VocabSpec& spec) {
  auto strings = [](const std::vector<std::string>& items) {
    std::vector<GgufValue> out;
    out.reserve(items.size());
    for (const auto& s : items) out.push_back(GgufValue::of_string(s));
    return GgufValue::of_array(GgufValueType::STRING, std::move(out));
  };
  w.add_metadata("tokenizer.ggml.model", GgufValue::of_string(spec.model));
  if (!spec.pre.empty()) w.add_metadata("tokenizer.ggml.pre", GgufValue::of_string(spec.pre));
  w.add_metadata("tokenizer.ggml.tokens", strings(spec.tokens));
  if (!spec.scores.empty()) {
    std::vector<GgufValue> scores;
    for (float s : spec.scores) scores.push_back(GgufValue::of_f32(s));
    w.add_metadata("tokenizer.ggml.scores", GgufValue::of_array(GgufValueType::F32, std::move(scores)));
  }
  if (!spec.token_types.empty()) {
    std::vector<GgufValue> types;
    for (int32_t t : spec.token_types) types.push_back(GgufValue::of_i32(t));
    w.add_metadata("tokenizer.ggml.token_type", GgufValue::of_array(GgufValueType::I32, std::move(types)));
  }
  if (!spec.merges.empty()) w.add_metadata("tokenizer.ggml.merges", strings(spec.merges));
  const std::pair<const char*, const std::optional<int32_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &spec.bos_id}, {"tokenizer.ggml.eos_token_id", &spec.eos_id},
      {"tokenizer.ggml.eot_token_id", &spec.eot_id}, {"tokenizer.ggml.eom_token_id", &spec.eom_id},
      {"tokenizer.ggml.padding_token_id", &spec.pad_id}, {"tokenizer.ggml.unknown_token_id", &spec.unk_id}};
  for (const auto& [key, id] : ids) {
    if (*id) w.add_metadata(key, GgufValue::of_u32(uint32_t(**id)));
  }
  const std::pair<const char*, const std::optional<bool>*> flags[] = {
      {"tokenizer.ggml.add_bos_token", &spec.add_bos}, {"tokenizer.ggml.add_eos_token", &spec.add_eos},
      {"tokenizer.ggml.add_space_prefix", &spec.add_space_prefix}};
  for (const auto& [key, flag] : flags) {
    if (*flag) w.add_metadata(key, GgufValue::of_bool(**flag));
  }
  if (!spec.chat_template.empty()) w.add_metadata("tokenizer.chat_template", GgufValue::of_string(spec.chat_template));
}

}  // namespace nt
