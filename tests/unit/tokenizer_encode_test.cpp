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
