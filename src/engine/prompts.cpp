#include "engine/prompts.h"

namespace nt {

EncodedPrompt encode_completion(const Tokenizer& tokenizer, std::string_view text) {
  EncodedPrompt p;
  p.tokens = tokenizer.encode(text, true, false);
  p.stop_tokens = tokenizer.vocab().eog();
  return p;
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
