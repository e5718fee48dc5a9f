// Chat prompt formatting. GGUF files carry a Jinja template
// (`tokenizer.chat_template`): a model's own template is rendered by the Jinja
// engine (chat/jinja.h), as transformers renders it, and so is a template file
// given instead. The built-in formats below remain for files without a
// template, for a template that does not parse, and by name (--chat-template);
// the family a template is recognised as also gives its end-of-turn token:
//   chatml  "<|im_start|>role\ncontent<|im_end|>\n"   (SmolLM2, Qwen, ...)
//   llama3  "<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>"
//   llama2  "<s>[INST] <<SYS>>\n...\n<</SYS>>\n\nuser [/INST] reply </s>"
//   gemma   "<bos><start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n" (Gemma 3)
//   plain   "User: content\n" lines, the fallback for anything unrecognised.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/reply_parser.h"

namespace nt {

namespace chat {
class JinjaTemplate;
}

class Tokenizer;

// A call the assistant made, as a conversation's history carries it.
struct ChatToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // an assistant's calls
  std::string tool_call_id = {};              // a tool's result: the call it answers
  std::string name = {};                      // a tool's result: the function that gave it
  std::string reasoning = {};                 // an assistant's reasoning (reasoning_content)
};

// What a request gives the template besides the conversation (Jinja only).
struct ChatInputs {
  std::string tools;      // a JSON list of {"type": "function", "function": {...}}; empty: none
  std::string variables;  // a JSON object of further template variables (enable_thinking, ...); empty: none
};

enum class ChatFormat { ChatML, Llama3, Llama2, Gemma, Plain };

class ChatTemplate {
 public:
  // Text of the special tokens a template writes itself (Llama 2/3 start with BOS).
  struct SpecialTexts {
    std::string bos, eos;
  };

  // Recognises `template_text` (the Jinja source). Unrecognised or empty text selects
  // the plain format and sets warning().
  static ChatTemplate detect(std::string_view template_text, SpecialTexts specials);
  // Selects a format by name ("chatml", "llama3", "llama2", "gemma", "plain"); any other name is
  // an error listing the valid ones. `template_text` still supplies details such as
  // ChatML's default system prompt.
  static ChatTemplate named(std::string_view name, std::string_view template_text, SpecialTexts specials);
  // The tokenizer's own template (Jinja), or the named built-in format when
  // `override_name` is not empty, or the Jinja template in `template_file`.
  static ChatTemplate for_tokenizer(const Tokenizer& tokenizer, std::string_view override_name = {},
                                    const std::string& template_file = {});

  static std::vector<std::string_view> names();

  ChatFormat format() const { return format_; }
  std::string_view name() const;
  // What renders: "the model's Jinja template (chatml family)", "chatml (built in)".
  std::string description() const;
  const std::string& warning() const { return warning_; }
  // ChatML only: the system prompt inserted when the conversation does not start with one.
  const std::string& default_system_prompt() const { return default_system_; }
  // The token text that ends a turn ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", EOS for
  // llama2, "" for plain).
  std::string end_of_turn() const;

  // Renders the conversation; add_generation_prompt appends the opening of an assistant turn.
  // A Jinja template gets `inputs` (tools, variables) and each message's tool calls, tool
  // call id, name and reasoning; a call's arguments are the JSON object they spell when the
  // template renders objects (most do), else the JSON text. The built-in formats render
  // role and content alone.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt,
                    const ChatInputs& inputs = {}) const;

  // How replies to this template spell tool calls and reasoning (none for the built-in formats).
  const chat::ReplyFormat& reply_format() const { return reply_format_; }

 private:
  ChatTemplate(ChatFormat format, SpecialTexts specials) : format_(format), specials_(std::move(specials)) {}

  std::string apply_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string apply_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string apply_llama2(std::span<const ChatMessage> messages) const;
  std::string apply_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
  std::string apply_plain(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  // Renders the Jinja template through the engine, with the specials as bos_token and eos_token.
  std::string apply_jinja(std::span<const ChatMessage> messages, bool add_generation_prompt,
                          const ChatInputs& inputs) const;
  // Sets jinja_ and what is learnt from its source: the reply format, and whether a call's
  // arguments render as an object (a probe conversation is rendered both ways).
  void use_jinja(std::string_view source, std::string_view origin);

  ChatFormat format_;
  SpecialTexts specials_;
  std::shared_ptr<const chat::JinjaTemplate> jinja_;  // set: it renders, format_ only names the family
  std::string jinja_origin_;
  std::string default_system_;
  std::string warning_;
  chat::ReplyFormat reply_format_;
  bool object_arguments_ = true;
};

// Renders and tokenizes a prompt: special-token text in the rendering becomes those
// tokens, and BOS is added when the vocabulary wants one and the template did not write it.
std::vector<int32_t> encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                 std::span<const ChatMessage> messages, bool add_generation_prompt);
// The same for a prompt the template already rendered.
std::vector<int32_t> encode_chat_text(const Tokenizer& tokenizer, std::string_view rendered);

// Ids that end generation: the vocabulary's (Vocabulary::eog: EOS, EOT, EOM and the known
// end markers), plus the template's end-of-turn token, as the reply format adjusts them
// (gpt-oss ends on <|return|> and <|call|>, not <|end|>). Sorted, without duplicates.
std::vector<int32_t> chat_stop_tokens(const Tokenizer& tokenizer, const ChatTemplate& chat);

}  // namespace nt
