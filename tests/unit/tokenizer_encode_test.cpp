// Encoding edge cases the Python oracles cannot send (invalid UTF-8) and the
// add_special / parse_special switches. Matching the reference tokenizers on real text is
// checked in tests/python/test_tokenizer_reference.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "spm_test_vocab.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng() & 0xFF);
  return s;
}

TEST(TokenizerEncode, InvalidUtf8RoundTripsThroughByteLevelBpe) {
  std::mt19937_64 rng(std::random_device{}());
  for (auto style : {SyntheticVocabStyle::SmolLM2, SyntheticVocabStyle::Llama3}) {
    Tokenizer tok(make_synthetic_bpe_vocab(4000, style));
    for (int i = 0; i < 200; ++i) {
      std::string text = random_bytes(rng, 1 + rng() % 64);
      if (i % 2) text = "ok " + text + " \xC3\xA9t\xC3\xA9 \xF0\x9F\x98";  // mixed valid / cut sequences
      EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
    }
  }
}

TEST(TokenizerEncode, InvalidUtf8FallsBackToByteTokensInSentencePiece) {
  Tokenizer tok(test::byte_fallback_spm_vocab({"\xE2\x96\x81"}));
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 200; ++i) {
    std::string text = random_bytes(rng, 1 + rng() % 64);
    auto ids = tok.encode(text, false);
    EXPECT_EQ(ids.front(), 259);  // the dummy-prefix "▁"
    EXPECT_EQ(tok.decode(ids), text);
  }
}

// Gemma's settings: no dummy-prefix space (tokenizer.ggml.add_space_prefix = false), byte
// fallback for characters without a piece, and user-defined tokens matched whole in any text.
TEST(TokenizerEncode, SentencePieceWithoutSpacePrefix) {
  VocabSpec spec = test::byte_fallback_spm_vocab({"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "b", "\n\n", "  "});
  spec.token_types[size_t(263)] = int32_t(TokenKind::UserDefined);  // "\n\n"
  spec.token_types[size_t(264)] = int32_t(TokenKind::UserDefined);  // "  ", stored with real spaces
  spec.add_space_prefix = false;
  Tokenizer tok(spec);
  EXPECT_FALSE(tok.vocab().add_space_prefix());
  EXPECT_EQ(tok.encode("a b", false), (std::vector<int32_t>{260, 262}));
  EXPECT_EQ(tok.encode("a b", true), (std::vector<int32_t>{1, 260, 262}));
  EXPECT_EQ(tok.encode(" a", false), (std::vector<int32_t>{259, 260}));
  // After a user-defined token no space is invented either.
  EXPECT_EQ(tok.encode("a\n\nb  b", false), (std::vector<int32_t>{260, 263, 261, 264, 261}));
  // "c" has no piece: its byte, <0x63>, and the emoji's four bytes.
  EXPECT_EQ(tok.encode("c\xF0\x9F\x98\x80", false),
            (std::vector<int32_t>{3 + 0x63, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}));
  for (const char* text : {"a b", " a", "a\n\nb  b", "c\xF0\x9F\x98\x80 b", "  "}) {
    EXPECT_EQ(tok.decode(tok.encode(text, true)), text);  // no leading space to strip either
  }
  std::mt19937_64 rng(std::random_device{}());
  for (int i = 0; i < 200; ++i) {
    std::string text = random_bytes(rng, 1 + rng() % 64);
    EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
  }
}

TEST(TokenizerEncode, SpecialSwitches) {
  Tokenizer tok(make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3));
  EXPECT_TRUE(tok.encode("", false).empty());
  EXPECT_EQ(tok.encode("", true), std::vector<int32_t>{128000});
  const std::string text = "<|eot_id|>x<|eot_id|>";
  auto parsed = tok.encode(text, false, true);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], 128009);
  EXPECT_EQ(parsed[2], 128009);
  auto plain = tok.encode(text, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128009), 0);
  EXPECT_EQ(tok.decode(plain), text);
  EXPECT_EQ(tok.decode(parsed), "x");
  EXPECT_EQ(tok.decode(parsed, /*skip_special=*/false), text);
}

}  // namespace
}  // namespace nt
