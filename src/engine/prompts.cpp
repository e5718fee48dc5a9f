#include "engine/prompts.h"

#include "core/error.h"

namespace nt {

EncodedPrompt encode_completion(const Tokenizer& tokenizer, std::string_view text) {
  EncodedPrompt p;
  p.tokens = tokenizer.encode(text, true, false);
  p.stop_tokens = tokenizer.vocab().eog();
  return p;
}

EncodedPrompt encode_completion_ids(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  const Vocabulary& vocab = tokenizer.vocab();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!vocab.contains(ids[i])) {
      fail("prompt[{}]: token id {} is outside the vocabulary (0 to {})", i, ids[i], vocab.size() - 1);
    }
  }
  return {std::vector<int32_t>(ids.begin(), ids.end()), tokenizer.vocab().eog()};
}

EncodedPrompt encode_conversation(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                  std::span<const ChatMessage> messages) {
  return {encode_chat(tokenizer, chat, messages, true), chat_stop_tokens(tokenizer, chat)};
}

EncodedPrompt encode_rendered_conversation(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                           std::string_view rendered) {
  return {encode_chat_text(tokenizer, rendered), chat_stop_tokens(tokenizer, chat)};
}

}  // namespace nt
