// The two kinds of prompt the front ends take, as token ids together with the
// ids that end the reply, so `run`, `batch` and a server encode them alike.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace nt {

struct EncodedPrompt {
  std::vector<int32_t> tokens;
  std::vector<int32_t> stop_tokens;
};

// Raw completion: the text as it is (BOS when the vocabulary wants one); the vocabulary's
// end-of-generation tokens (EOS, EOT, ...) end it.
EncodedPrompt encode_completion(const Tokenizer& tokenizer, std::string_view text);
// The same for a prompt given as token ids, taken as they are (no BOS added);
// nt::Error naming the first id outside the vocabulary.
EncodedPrompt encode_completion_ids(const Tokenizer& tokenizer, std::span<const int32_t> ids);

// A conversation rendered by the chat template with the assistant's turn
// opened; the template's end-of-turn tokens end it.
EncodedPrompt encode_conversation(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                  std::span<const ChatMessage> messages);
// The same for a conversation already rendered through `chat`.
EncodedPrompt encode_rendered_conversation(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                           std::string_view rendered);

}  // namespace nt
