// Chat template rendering. The expected strings were produced by rendering the real
// Jinja templates (SmolLM2's from its GGUF, Meta's Llama 3 and Llama 2 templates, Qwen2.5's,
// Qwen3's and Gemma 3's) with
// transformers' render_jinja_template; tests/python/test_tokenizer_chat.py re-checks
// many more conversations against live Jinja rendering.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "  Hi there \n"},
    {"assistant", "Hello!"},
    {"user", "What is 2+2?"},
};
const std::vector<ChatMessage> kSingleUser = {{"user", "Hi"}};

constexpr std::string_view kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

TEST(ChatTemplate, SmolLM2ChatML) {
  auto chat = ChatTemplate::detect(kSmolLM2ChatTemplate, {"<|im_start|>", "<|im_end|>"});
  EXPECT_EQ(chat.format(), ChatFormat::ChatML);
  EXPECT_TRUE(chat.warning().empty());
  EXPECT_EQ(chat.apply(kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi there \n<|im_end|>\n<|im_start|>"
            "assistant\nHello!<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  // No system message: SmolLM2's template inserts its own.
  EXPECT_EQ(chat.apply(kSingleUser, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(chat.apply(kSingleUser, false),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  auto chat = ChatTemplate::detect(kLlama3ChatTemplate, {"<|begin_of_text|>", "<|end_of_text|>"});
  EXPECT_EQ(chat.format(), ChatFormat::Llama3);
  EXPECT_EQ(chat.apply(kConversation, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>"
            "user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_"
            "id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|><|start_header_id|>assistant<|end_"
            "header_id|>\n\n");
  EXPECT_EQ(chat.apply(kSingleUser, true),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|"
            "end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama2) {
  auto chat = ChatTemplate::detect(kLlama2Template, {"<s>", "</s>"});
  EXPECT_EQ(chat.format(), ChatFormat::Llama2);
  EXPECT_EQ(chat.apply(kConversation, true),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n  Hi there [/INST] Hello! </s><s>[INST] What is 2+2? [/INST]");
  EXPECT_EQ(chat.apply(kSingleUser, true), "<s>[INST] Hi [/INST]");
  // The reference template raises on turns that do not alternate.
  std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  EXPECT_THROW(chat.apply(bad, true), Error);
}

TEST(ChatTemplate, QwenChatML) {
  auto qwen25 = ChatTemplate::detect(kQwen25ChatTemplate, {"<|endoftext|>", "<|im_end|>"});
  EXPECT_EQ(qwen25.format(), ChatFormat::ChatML);
  EXPECT_EQ(qwen25.default_system_prompt(), "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(qwen25.apply(kSingleUser, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  auto qwen3 = ChatTemplate::detect(kQwen3ChatTemplate, {"<|endoftext|>", "<|im_end|>"});
  EXPECT_EQ(qwen3.format(), ChatFormat::ChatML);
  EXPECT_EQ(qwen3.apply(kSingleUser, true), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Gemma) {
  auto chat = ChatTemplate::detect(kGemma3ChatTemplate, {"<bos>", "<eos>"});
  EXPECT_EQ(chat.format(), ChatFormat::Gemma);
  EXPECT_EQ(chat.end_of_turn(), "<end_of_turn>");
  EXPECT_EQ(chat.apply(kConversation, true),
            "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>"
            "\n<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n");
  EXPECT_EQ(chat.apply(kSingleUser, false), "<bos><start_of_turn>user\nHi<end_of_turn>\n");
  std::vector<ChatMessage> bad = {{"user", "a"}, {"user", "b"}};
  EXPECT_THROW(chat.apply(bad, true), Error);
}

TEST(ChatTemplate, StopTokensAndEncodingWithSyntheticGemma3) {
  Tokenizer tok(make_synthetic_vocab(4000, SyntheticVocabStyle::Gemma3));
  auto chat = ChatTemplate::for_tokenizer(tok);
  ASSERT_EQ(chat.format(), ChatFormat::Gemma);
  EXPECT_EQ(chat_stop_tokens(tok, chat), (std::vector<int32_t>{1, 106}));  // <eos>, <end_of_turn>
  auto ids = encode_chat(tok, chat, kConversation, true);
  EXPECT_EQ(ids.front(), 2);  // <bos>, written by the template, not doubled
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 105), 4);  // <start_of_turn>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 106), 3);  // <end_of_turn>
  EXPECT_EQ(encode_chat(tok, ChatTemplate::for_tokenizer(tok, "gemma"), kConversation, true), ids);
}

TEST(ChatTemplate, UnknownTemplateFallsBackToPlainWithWarning) {
  auto chat = ChatTemplate::detect("{{ messages[0]['content'] }} <weird>", {"<s>", "</s>"});
  EXPECT_EQ(chat.format(), ChatFormat::Plain);
  EXPECT_NE(chat.warning().find("unrecognised chat template"), std::string::npos);
  EXPECT_EQ(chat.apply(kSingleUser, true), "User: Hi\nAssistant:");
  auto none = ChatTemplate::detect("", {"<s>", "</s>"});
  EXPECT_EQ(none.format(), ChatFormat::Plain);
  EXPECT_NE(none.warning().find("no chat template"), std::string::npos);
}

TEST(ChatTemplate, OverrideByNameAndUnknownNameListsValidOnes) {
  auto chat = ChatTemplate::named("llama3", kSmolLM2ChatTemplate, {"<|begin_of_text|>", "<|end_of_text|>"});
  EXPECT_EQ(chat.format(), ChatFormat::Llama3);
  EXPECT_EQ(ChatTemplate::named("chatml", "", {}).apply(kSingleUser, false), "<|im_start|>user\nHi<|im_end|>\n");
  try {
    ChatTemplate::named("vicuna", "", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("'vicuna'"), std::string::npos) << msg;
    for (auto name : ChatTemplate::names()) EXPECT_NE(msg.find(std::string(name)), std::string::npos) << msg;
  }
}

TEST(ChatTemplate, StopTokensAndEncodingWithSyntheticLlama3) {
  Tokenizer tok(make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3));
  auto chat = ChatTemplate::for_tokenizer(tok);
  ASSERT_EQ(chat.format(), ChatFormat::Llama3);
  // EOS <|end_of_text|>, EOM <|eom_id|>, EOT <|eot_id|> (also the template's end of turn).
  EXPECT_EQ(chat_stop_tokens(tok, chat), (std::vector<int32_t>{128001, 128008, 128009}));
  auto ids = encode_chat(tok, chat, kSingleUser, true);
  // The template writes <|begin_of_text|> itself, so BOS must not be doubled.
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[1], 128006);  // <|start_header_id|>
  EXPECT_EQ(ids.back(), tok.encode("\n\n", false, false).back());
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128009), 1);  // <|eot_id|>

  auto chatml = ChatTemplate::for_tokenizer(tok, "chatml");
  EXPECT_EQ(chatml.format(), ChatFormat::ChatML);
  // <|im_end|> is not a token of this vocabulary, so it adds no stop id.
  EXPECT_EQ(chat_stop_tokens(tok, chatml), (std::vector<int32_t>{128001, 128008, 128009}));
}

TEST(ChatTemplate, SmolLM2StyleStopTokens) {
  Tokenizer tok(make_synthetic_bpe_vocab(49152, SyntheticVocabStyle::SmolLM2));
  auto chat = ChatTemplate::for_tokenizer(tok);
  ASSERT_EQ(chat.format(), ChatFormat::ChatML);
  EXPECT_EQ(chat.default_system_prompt(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  // <|im_end|> (EOS), and as llama.cpp infers them <|endoftext|> and the FIM marker <reponame>.
  EXPECT_EQ(chat_stop_tokens(tok, chat), (std::vector<int32_t>{0, 2, 4}));
  auto ids = encode_chat(tok, chat, kSingleUser, true);
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>, written by the template; add_bos is off
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
}

}  // namespace
}  // namespace nt
