#include "server/logprobs_json.h"

#include <string>

namespace nt::server {
namespace {

using nlohmann::json;

json byte_list(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(int(uint8_t(c)));
  return bytes;
}

json chat_entry(const Tokenizer& tokenizer, const TokenLogprob& t) {
  const std::string text = tokenizer.token_bytes(t.id);
  return {{"token", text}, {"logprob", t.logprob}, {"bytes", byte_list(text)}};
}

}  // namespace

json chat_logprobs_content(const Tokenizer& tokenizer, std::span<const TokenLogprobs> tokens) {
  json content = json::array();
  for (const TokenLogprobs& t : tokens) {
    json entry = chat_entry(tokenizer, t.chosen);
    json top = json::array();
    for (const TokenLogprob& alternative : t.top) top.push_back(chat_entry(tokenizer, alternative));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return content;
}

json completion_logprobs(const Tokenizer& tokenizer, std::span<const TokenLogprobs> tokens) {
  json texts = json::array(), logprobs = json::array(), tops = json::array(), offsets = json::array();
  for (const TokenLogprobs& t : tokens) {
    texts.push_back(tokenizer.token_bytes(t.chosen.id));
    logprobs.push_back(t.chosen.logprob);
    json top = json::object();
    // Two tokens of the same text share a key: the likelier one's value stays.
    for (const TokenLogprob& alternative : t.top) top.emplace(tokenizer.token_bytes(alternative.id), alternative.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(t.text_offset);
  }
  return {{"tokens", std::move(texts)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

}  // namespace nt::server
