// Vocabulary loading: GGUF metadata into a validated vocabulary, defaults, and errors
// that name the metadata key at fault.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>

#include "core/error.h"
#include "error_text.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab_writer.h"

namespace nt {
namespace {

using test::error_of;

GgufValue strings(std::vector<std::string> items) {
  std::vector<GgufValue> v;
  for (auto& s : items) v.push_back(GgufValue::of_string(std::move(s)));
  return GgufValue::of_array(GgufValueType::STRING, std::move(v));
}

GgufValue floats(std::vector<float> items) {
  std::vector<GgufValue> v;
  for (float f : items) v.push_back(GgufValue::of_f32(f));
  return GgufValue::of_array(GgufValueType::F32, std::move(v));
}

GgufHeader header_with(std::vector<GgufKV> kvs) {
  GgufHeader h;
  h.metadata = std::move(kvs);
  return h;
}

VocabSpec small_bpe() {
  VocabSpec s;
  s.model = "gpt2";
  s.tokens = {"a", "b", "ab", "<|end|>"};
  s.token_types = {1, 1, 1, 3};
  s.merges = {"a b"};
  return s;
}

TEST(Vocabulary, ReadsEveryKeyFromGguf) {
  auto h = header_with({
      {"tokenizer.ggml.model", GgufValue::of_string("llama")},
      {"tokenizer.ggml.tokens", strings({"<unk>", "<s>", "</s>", "\xE2\x96\x81hi", "hi", "\xE2\x96\x81", "h", "i"})},
      {"tokenizer.ggml.scores", floats({0, 0, 0, -2, -1, -3, -4, -5})},
      {"tokenizer.ggml.token_type",
       GgufValue::of_array(GgufValueType::I32,
                           {GgufValue::of_i32(2), GgufValue::of_i32(3), GgufValue::of_i32(3), GgufValue::of_i32(1),
                            GgufValue::of_i32(1), GgufValue::of_i32(1), GgufValue::of_i32(1), GgufValue::of_i32(1)})},
      {"tokenizer.ggml.bos_token_id", GgufValue::of_u32(1)},
      {"tokenizer.ggml.eos_token_id", GgufValue::of_u32(2)},
      {"tokenizer.ggml.eot_token_id", GgufValue::of_u32(2)},
      {"tokenizer.ggml.padding_token_id", GgufValue::of_u32(0)},
      {"tokenizer.ggml.add_bos_token", GgufValue::of_bool(false)},
      {"tokenizer.ggml.add_eos_token", GgufValue::of_bool(true)},
      {"tokenizer.chat_template", GgufValue::of_string("{{ x }}")},
  });
  Tokenizer tok = Tokenizer::from_gguf(h, "test.gguf");
  const Vocabulary& v = tok.vocab();
  EXPECT_EQ(v.model(), VocabModel::SentencePiece);
  EXPECT_EQ(v.size(), 8);
  EXPECT_EQ(v.bos(), 1);
  EXPECT_EQ(v.eos(), 2);
  EXPECT_EQ(v.eot(), 2);
  EXPECT_EQ(v.eom(), kNoToken);
  EXPECT_EQ(v.pad(), 0);
  EXPECT_EQ(v.unk(), 0);  // SentencePiece default
  EXPECT_FALSE(v.add_bos());
  EXPECT_TRUE(v.add_eos());
  EXPECT_TRUE(v.add_space_prefix());  // SentencePiece default
  EXPECT_EQ(v.chat_template(), "{{ x }}");
  EXPECT_FLOAT_EQ(v.score(3), -2.0f);
  // "▁" "h" "i" -> "▁" "hi" -> "▁hi" (no "▁h" piece), then EOS; no byte tokens, so "x" is <unk>.
  EXPECT_EQ(tok.encode("hi"), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(tok.encode("hi x"), (std::vector<int32_t>{3, 5, 0, 2}));
  EXPECT_EQ(tok.decode(std::vector<int32_t>{3, 2}), "hi");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{1, 3, 2}, /*skip_special=*/false), "<s> hi</s>");
}

TEST(Vocabulary, MissingModelKeyIsNamed) {
  auto h = header_with({{"tokenizer.ggml.tokens", strings({"a"})}});
  std::string msg = error_of([&] { Tokenizer::from_gguf(h, "m.gguf"); });
  EXPECT_NE(msg.find("m.gguf"), std::string::npos) << msg;
  EXPECT_NE(msg.find("tokenizer.ggml.model"), std::string::npos) << msg;
}

TEST(Vocabulary, WrongValueTypeIsNamed) {
  auto h =
      header_with({{"tokenizer.ggml.model", GgufValue::of_string("gpt2")}, {"tokenizer.ggml.tokens", floats({1.0f})}});
  std::string msg = error_of([&] { Tokenizer::from_gguf(h, "m.gguf"); });
  EXPECT_NE(msg.find("tokenizer.ggml.tokens"), std::string::npos) << msg;
}

TEST(Vocabulary, InconsistentSpecsAreNamed) {
  struct Case {
    std::function<void(VocabSpec&)> edit;
    std::string expected;
  };
  const Case cases[] = {
      {[](VocabSpec& s) {
         s.scores = {0, 0};
       },
       "tokenizer.ggml.scores' has 2 entries"},
      {[](VocabSpec& s) { s.token_types = {1}; }, "tokenizer.ggml.token_type' has 1 entries"},
      {[](VocabSpec& s) { s.token_types[0] = 9; }, "tokenizer.ggml.token_type'[0] = 9"},
      {[](VocabSpec& s) { s.model = "bert"; }, "tokenizer.ggml.model 'bert' is not supported"},
      {[](VocabSpec& s) { s.merges = {"a c"}; }, "tokenizer.ggml.merges'[0] = 'a c'"},
      {[](VocabSpec& s) { s.merges = {"b a"}; }, "merges into 'ba'"},
      {[](VocabSpec& s) { s.bos_id = 7; }, "tokenizer.ggml.bos_token_id' = 7 is outside"},
      {[](VocabSpec& s) { s.add_bos = true; }, "tokenizer.ggml.bos_token_id' is missing"},
      {[](VocabSpec& s) { s.tokens.clear(), s.token_types.clear(), s.merges.clear(); }, "is empty"},
  };
  for (const Case& c : cases) {
    VocabSpec spec = small_bpe();
    c.edit(spec);
    std::string msg = error_of([&] { Tokenizer tok(spec, "v.gguf"); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << "got: " << msg;
    EXPECT_NE(msg.find("v.gguf"), std::string::npos) << "got: " << msg;
  }
}

TEST(Vocabulary, ByteLevelDefaultsAndSpecialParsing) {
  Tokenizer tok(small_bpe());
  EXPECT_FALSE(tok.vocab().add_bos());
  EXPECT_EQ(tok.vocab().bos(), kNoToken);
  EXPECT_EQ(tok.rules(), "gpt2");
  EXPECT_EQ(tok.encode("ab<|end|>", true, true), (std::vector<int32_t>{2, 3}));
  // Without parse_special the control text is spelled out; its bytes are not in this
  // vocabulary and there is no unknown token, which is an error naming the byte.
  std::string msg = error_of([&] { tok.encode("<|end|>", true, false); });
  EXPECT_NE(msg.find("0x3C"), std::string::npos) << msg;
}

TEST(Vocabulary, UnknownPreTokenizerWarnsAndUsesGpt2Rules) {
  VocabSpec spec = small_bpe();
  spec.pre = "mystery-pre";
  Tokenizer tok(spec, "v.gguf");
  ASSERT_EQ(tok.warnings().size(), 1u);
  EXPECT_NE(tok.warnings()[0].find("mystery-pre"), std::string::npos);
  EXPECT_EQ(tok.rules(), "gpt2");
}

// small_bpe() with "<|sep|>" (no end marker) at id 3, then `specials` as control tokens from id 4.
VocabSpec bpe_with_specials(std::vector<std::string> specials) {
  VocabSpec s = small_bpe();
  s.tokens[3] = "<|sep|>";
  for (std::string& t : specials) {
    s.tokens.push_back(std::move(t));
    s.token_types.push_back(int32_t(TokenKind::Control));
  }
  return s;
}

// Without tokenizer.ggml.eot_token_id the end of a turn is found by its text, as llama.cpp
// does, and every known end marker ends generation.
TEST(Vocabulary, EndOfTurnAndEndOfGenerationAreInferred) {
  Vocabulary gemma(bpe_with_specials({"<start_of_turn>", "<end_of_turn>", "<eos>"}));
  EXPECT_EQ(gemma.eot(), 5);
  EXPECT_EQ(gemma.eog(), (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(gemma.is_eog(5));
  EXPECT_FALSE(gemma.is_eog(4));

  // <|im_end|> is taken before <|endoftext|> as the end of a turn; both end generation, and
  // so do Qwen's fill-in-the-middle padding, repository and file markers.
  Vocabulary qwen(bpe_with_specials({"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_pad|>",
                                     "<|repo_name|>", "<|file_sep|>"}));
  EXPECT_EQ(qwen.eot(), 6);
  EXPECT_EQ(qwen.eog(), (std::vector<int32_t>{4, 6, 8, 9, 10}));

  // An explicit EOT wins and ends generation whatever its text, as EOS does.
  VocabSpec spec = bpe_with_specials({"<end_of_turn>", "<custom_stop>"});
  spec.eot_id = 5;
  spec.eos_id = 0;
  Vocabulary explicit_eot(spec);
  EXPECT_EQ(explicit_eot.eot(), 5);
  EXPECT_EQ(explicit_eot.eog(), (std::vector<int32_t>{0, 4, 5}));

  // gpt-oss: "<|end|>" closes a message, not the reply, where "<|return|>" and "<|call|>" exist.
  Vocabulary harmony(bpe_with_specials({"<|return|>", "<|call|>", "<|end|>"}));
  EXPECT_EQ(harmony.eot(), 6);
  EXPECT_EQ(harmony.eog(), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(Vocabulary(small_bpe()).eog(), std::vector<int32_t>{3});  // "<|end|>" alone ends generation

  Vocabulary plain(bpe_with_specials({}));
  EXPECT_EQ(plain.eot(), kNoToken);
  EXPECT_TRUE(plain.eog().empty());
}

// add_vocab_metadata is what the make-model tool writes; a file written with it must read
// back to the same spec and the same tokenizer.
TEST(Vocabulary, SpecMetadataRoundTripsThroughAGgufFile) {
  for (auto style : {SyntheticVocabStyle::SmolLM2, SyntheticVocabStyle::Llama3, SyntheticVocabStyle::Qwen3,
                     SyntheticVocabStyle::Gemma3}) {
    VocabSpec spec = make_synthetic_vocab(3000, style);
    if (spec.scores.empty()) spec.scores.assign(spec.tokens.size(), -1.5f);
    const std::string path = ::testing::TempDir() + "nt_vocab_roundtrip_" + std::to_string(int(style)) + ".gguf";
    {
      GgufWriter w(path);
      w.add_metadata("general.architecture", GgufValue::of_string("llama"));
      add_vocab_metadata(w, spec);
      w.finish();
    }
    auto file = GgufFile::open(path);
    EXPECT_EQ(read_vocab_spec(file->header(), path), spec);
    Tokenizer a(spec), b = Tokenizer::from_gguf(file->header(), path);
    const std::string text = "Hello <|im_start|> world,  12345 caf\xC3\xA9!<start_of_turn><think>\n\n";
    EXPECT_EQ(a.encode(text, true, true), b.encode(text, true, true));
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace nt
