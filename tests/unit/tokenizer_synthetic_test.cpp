// Synthetic vocabularies: exact sizes, the family's special tokens, consistent merges,
// determinism, speed, and text round trips. Byte-level BPE (SmolLM2, Llama 3, Qwen2.5, Qwen3)
// and SentencePiece (Gemma 3).
#include <gtest/gtest.h>

#include <cmath>
#include <ctime>
#include <random>
#include <tuple>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/bpe_encoder.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/tokenizer.h"

namespace nt {
namespace {

// CPU time of this (single-threaded) work, so a busy test machine does not inflate it.
double cpu_seconds() { return double(std::clock()) / CLOCKS_PER_SEC; }

// Random text mixing words, numbers, punctuation, whitespace runs and multi-byte characters.
std::string random_text(std::mt19937_64& rng, size_t bytes) {
  static const std::vector<std::string> pool = {"the",
                                                " the",
                                                " quick",
                                                " brown",
                                                " fox",
                                                "Hello",
                                                " world",
                                                ",",
                                                ".",
                                                "!",
                                                " ",
                                                "  ",
                                                "\n",
                                                "\n\n",
                                                "\t",
                                                "42",
                                                " 1234",
                                                "I'm",
                                                " you'll",
                                                "caf\xC3\xA9",
                                                " \xE4\xBD\xA0\xE5\xA5\xBD",
                                                "\xF0\x9F\x98\x80",
                                                "\xD0\xBC\xD0\xB8\xD1\x80",
                                                " x",
                                                "y",
                                                "(",
                                                ")",
                                                "{",
                                                "}",
                                                "==",
                                                "->",
                                                "\xC2\xA0",
                                                "zq"};
  std::string out;
  while (out.size() < bytes) out += pool[rng() % pool.size()];
  return out;
}

TEST(SyntheticVocab, Llama3ShapeAndSpecials) {
  VocabSpec s = make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3);
  ASSERT_EQ(s.tokens.size(), 128256u);
  ASSERT_EQ(s.token_types.size(), 128256u);
  EXPECT_EQ(s.merges.size(), 128256u - 256 - 256);
  EXPECT_EQ(s.model, "gpt2");
  EXPECT_EQ(s.pre, "llama-bpe");
  EXPECT_EQ(s.tokens[128000], "<|begin_of_text|>");
  EXPECT_EQ(s.tokens[128001], "<|end_of_text|>");
  EXPECT_EQ(s.tokens[128006], "<|start_header_id|>");
  EXPECT_EQ(s.tokens[128007], "<|end_header_id|>");
  EXPECT_EQ(s.tokens[128008], "<|eom_id|>");
  EXPECT_EQ(s.tokens[128009], "<|eot_id|>");
  EXPECT_EQ(s.tokens[128255], "<|reserved_special_token_247|>");
  for (int i = 128000; i < 128256; ++i) EXPECT_EQ(s.token_types[size_t(i)], int32_t(TokenKind::Control)) << i;
  EXPECT_EQ(s.token_types[127999], int32_t(TokenKind::Normal));
  EXPECT_EQ(s.bos_id, 128000);
  EXPECT_EQ(s.eos_id, 128001);
  EXPECT_EQ(s.eot_id, 128009);
  EXPECT_EQ(s.eom_id, 128008);
  EXPECT_EQ(s.add_bos, true);
}

TEST(SyntheticVocab, SmolLM2ShapeAndSpecials) {
  VocabSpec s = make_synthetic_bpe_vocab(49152, SyntheticVocabStyle::SmolLM2);
  ASSERT_EQ(s.tokens.size(), 49152u);
  EXPECT_EQ(s.merges.size(), 49152u - 17 - 256);
  EXPECT_EQ(s.pre, "smollm");
  EXPECT_EQ(s.tokens[0], "<|endoftext|>");
  EXPECT_EQ(s.tokens[1], "<|im_start|>");
  EXPECT_EQ(s.tokens[2], "<|im_end|>");
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.eos_id, 2);
  EXPECT_EQ(s.add_bos, false);
}

TEST(SyntheticVocab, QwenShapeAndSpecials) {
  for (auto style : {SyntheticVocabStyle::Qwen2, SyntheticVocabStyle::Qwen3}) {
    const bool qwen3 = style == SyntheticVocabStyle::Qwen3;
    VocabSpec s = make_synthetic_vocab(151936, style);
    ASSERT_EQ(s.tokens.size(), 151936u);
    EXPECT_EQ(s.model, "gpt2");
    EXPECT_EQ(s.pre, "qwen2");
    EXPECT_EQ(s.merges.size(), 151643u - 256);
    EXPECT_EQ(s.tokens[151643], "<|endoftext|>");
    EXPECT_EQ(s.tokens[151644], "<|im_start|>");
    EXPECT_EQ(s.tokens[151645], "<|im_end|>");
    EXPECT_EQ(s.tokens[151657], "<tool_call>");
    EXPECT_EQ(s.tokens[151664], "<|file_sep|>");
    EXPECT_EQ(s.token_types[151645], int32_t(TokenKind::Control));
    EXPECT_EQ(s.token_types[151657], int32_t(TokenKind::UserDefined));
    EXPECT_EQ(s.token_types[151642], int32_t(TokenKind::Normal));
    const int32_t first_pad = qwen3 ? 151669 : 151665;
    if (qwen3) {
      EXPECT_EQ(s.tokens[151667], "<think>");
      EXPECT_EQ(s.tokens[151668], "</think>");
      EXPECT_EQ(s.token_types[151667], int32_t(TokenKind::UserDefined));
    }
    EXPECT_EQ(s.tokens[size_t(first_pad)], fmt::format("[PAD{}]", first_pad));
    EXPECT_EQ(s.token_types[size_t(first_pad)], int32_t(TokenKind::Unused));
    EXPECT_EQ(s.token_types[151935], int32_t(TokenKind::Unused));
    EXPECT_EQ(s.bos_id, 151643);
    EXPECT_EQ(s.eos_id, 151645);
    EXPECT_EQ(s.pad_id, 151643);
    EXPECT_EQ(s.add_bos, false);
    EXPECT_EQ(s.chat_template, qwen3 ? kQwen3ChatTemplate : kQwen25ChatTemplate);
    Vocabulary v(s);
    EXPECT_EQ(v.eot(), 151645);
    EXPECT_EQ(v.eog(), (std::vector<int32_t>{151643, 151645, 151662, 151663, 151664}));
  }
  // Qwen3 adds tokens after Qwen2.5's and shares its regular vocabulary and merges.
  VocabSpec a = make_synthetic_vocab(151936, SyntheticVocabStyle::Qwen2);
  VocabSpec b = make_synthetic_vocab(151936, SyntheticVocabStyle::Qwen3);
  EXPECT_TRUE(std::equal(a.tokens.begin(), a.tokens.begin() + 151665, b.tokens.begin()));
  EXPECT_EQ(a.merges, b.merges);
  // A larger embedding (Qwen2.5 32B and 72B: 152064) only adds padding.
  VocabSpec big = make_synthetic_vocab(152064, SyntheticVocabStyle::Qwen2);
  EXPECT_EQ(big.tokens[151645], "<|im_end|>");
  EXPECT_EQ(big.tokens[152063], "[PAD152063]");
}

TEST(SyntheticVocab, Gemma3ShapeAndSpecials) {
  VocabSpec s = make_synthetic_vocab(262144, SyntheticVocabStyle::Gemma3);
  ASSERT_EQ(s.tokens.size(), 262144u);
  ASSERT_EQ(s.scores.size(), 262144u);
  EXPECT_EQ(s.model, "llama");
  EXPECT_TRUE(s.merges.empty());
  EXPECT_EQ(s.tokens[0], "<pad>");
  EXPECT_EQ(s.tokens[1], "<eos>");
  EXPECT_EQ(s.tokens[2], "<bos>");
  EXPECT_EQ(s.tokens[3], "<unk>");
  EXPECT_EQ(s.tokens[105], "<start_of_turn>");
  EXPECT_EQ(s.tokens[106], "<end_of_turn>");
  EXPECT_EQ(s.tokens[107], "\n");
  EXPECT_EQ(s.token_types[3], int32_t(TokenKind::Unknown));
  EXPECT_EQ(s.token_types[106], int32_t(TokenKind::Control));
  EXPECT_EQ(s.token_types[107], int32_t(TokenKind::UserDefined));
  EXPECT_EQ((std::tuple(s.pad_id, s.eos_id, s.bos_id, s.unk_id)), (std::tuple(0, 1, 2, 3)));
  EXPECT_EQ(s.add_bos, true);
  EXPECT_EQ(s.add_space_prefix, false);
  EXPECT_EQ(s.chat_template, kGemma3ChatTemplate);
  Vocabulary v(s);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(v.kind(v.byte_token(uint8_t(b))), TokenKind::Byte) << b;
  EXPECT_EQ(v.eot(), 106);
  EXPECT_EQ(v.eog(), (std::vector<int32_t>{1, 106}));
  EXPECT_THROW(make_synthetic_bpe_vocab(4000, SyntheticVocabStyle::Gemma3), Error);
}

// Every normal piece is what SentencePiece's merging makes of its own text, and every
// user-defined run is matched whole; scores fall with the merge order.
TEST(SyntheticVocab, Gemma3PiecesAreReachable) {
  for (int32_t n : {262144, 4000}) {
    Tokenizer tok(make_synthetic_vocab(n, SyntheticVocabStyle::Gemma3));
    const Vocabulary& v = tok.vocab();
    float previous = INFINITY;
    for (int32_t id = 0; id < v.size(); ++id) {
      if (v.kind(id) != TokenKind::Normal && v.kind(id) != TokenKind::UserDefined) continue;
      std::string text = tok.token_bytes(id);
      ASSERT_EQ(tok.encode(text, false), std::vector<int32_t>{id}) << "token " << id << " '" << v.text(id) << "'";
      if (v.kind(id) == TokenKind::Normal) {
        EXPECT_LT(v.score(id), previous) << id;
        previous = v.score(id);
      }
    }
  }
}

TEST(SyntheticVocab, TinySizesAndTooSmall) {
  for (int32_t n : {512 + 0, 600, 1000, 5000}) {
    VocabSpec s = make_synthetic_bpe_vocab(n, SyntheticVocabStyle::Llama3);
    EXPECT_EQ(int32_t(s.tokens.size()), n);
    Tokenizer tok(std::move(s));
    EXPECT_EQ(tok.decode(tok.encode("Hello, world 123!", false)), "Hello, world 123!");
  }
  EXPECT_THROW(make_synthetic_bpe_vocab(511, SyntheticVocabStyle::Llama3), Error);
  EXPECT_THROW(make_synthetic_bpe_vocab(272, SyntheticVocabStyle::SmolLM2), Error);
  EXPECT_EQ(make_synthetic_bpe_vocab(273, SyntheticVocabStyle::SmolLM2).tokens.size(), 273u);
  // Qwen2.5: 22 added tokens + 256 bytes; Qwen3: 26 + 256; Gemma 3: 107 specials, 92
  // whitespace runs, 256 bytes, 95 characters.
  const std::pair<SyntheticVocabStyle, int32_t> smallest[] = {
      {SyntheticVocabStyle::Qwen2, 278}, {SyntheticVocabStyle::Qwen3, 282}, {SyntheticVocabStyle::Gemma3, 550}};
  for (auto [style, n] : smallest) {
    EXPECT_THROW(make_synthetic_vocab(n - 1, style), Error);
    for (int32_t size : {n, n + 1, 1000, 5000}) {
      VocabSpec s = make_synthetic_vocab(size, style);
      EXPECT_EQ(int32_t(s.tokens.size()), size);
      Tokenizer tok(std::move(s));
      EXPECT_EQ(tok.decode(tok.encode("Hello, world 123!", false)), "Hello, world 123!");
    }
  }
}

TEST(SyntheticVocab, DeterministicAndFast) {
  double start = cpu_seconds();
  VocabSpec a = make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3);
  double elapsed = cpu_seconds() - start;
  std::printf("make_synthetic_bpe_vocab(128256, llama3): %.3f s\n", elapsed);
  EXPECT_LT(elapsed, 1.0);
  VocabSpec b = make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.merges, b.merges);

  start = cpu_seconds();
  VocabSpec c = make_synthetic_vocab(262144, SyntheticVocabStyle::Gemma3);
  elapsed = cpu_seconds() - start;
  std::printf("make_synthetic_vocab(262144, gemma3): %.3f s\n", elapsed);
  EXPECT_LT(elapsed, 3.0);
  EXPECT_EQ(c, make_synthetic_vocab(262144, SyntheticVocabStyle::Gemma3));
}

// Every merge joins two tokens into a token, every token string is unique, and BPE over
// any regular token's own bytes gives back exactly that token (as in a trained vocabulary).
TEST(SyntheticVocab, MergesAreConsistentAndEveryTokenIsReachable) {
  const std::pair<SyntheticVocabStyle, int32_t> styles[] = {
      {SyntheticVocabStyle::SmolLM2, 49152},
      {SyntheticVocabStyle::Llama3, 128256},
      {SyntheticVocabStyle::Qwen3, 151936},
  };
  for (auto [style, n_vocab] : styles) {
    VocabSpec spec = make_synthetic_bpe_vocab(n_vocab, style);
    std::unordered_set<std::string> unique(spec.tokens.begin(), spec.tokens.end());
    EXPECT_EQ(unique.size(), spec.tokens.size());
    for (const std::string& m : spec.merges) {
      size_t sp = m.find(' ');
      ASSERT_NE(sp, std::string::npos);
      EXPECT_TRUE(unique.count(m.substr(0, sp)) && unique.count(m.substr(sp + 1)) &&
                  unique.count(m.substr(0, sp) + m.substr(sp + 1)))
          << m;
    }
    Vocabulary vocab(spec);
    ByteLevelBpeEncoder bpe(vocab, /*ignore_merges=*/false);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (vocab.kind(id) != TokenKind::Normal) continue;
      ids.clear();
      bpe.encode(*byte_level::decode(vocab.text(id)), ids);
      ASSERT_EQ(ids, std::vector<int32_t>{id}) << "token " << id << " '" << vocab.text(id) << "'";
    }
  }
}

TEST(SyntheticVocab, RoundTripsAndEncodes100KBQuickly) {
  Tokenizer tok(make_synthetic_bpe_vocab(128256, SyntheticVocabStyle::Llama3));
  std::mt19937_64 rng(std::random_device{}());
  std::string text = random_text(rng, 100 * 1024);
  double start = cpu_seconds();
  auto ids = tok.encode(text, false);
  double elapsed = cpu_seconds() - start;
  std::printf("encode 100 KB: %.3f s, %zu tokens\n", elapsed, ids.size());
  EXPECT_LT(elapsed, 0.5);
  EXPECT_LT(double(ids.size()), double(text.size()) / 1.5) << "merges should make tokens span several bytes";
  EXPECT_EQ(tok.decode(ids), text);
  // One long word with no pre-tokenizer cut: the merge loop must not be quadratic.
  std::string word(100 * 1024, 'a');
  start = cpu_seconds();
  auto word_ids = tok.encode(word, false);
  elapsed = cpu_seconds() - start;
  std::printf("encode one 100 KB word: %.3f s, %zu tokens\n", elapsed, word_ids.size());
  EXPECT_LT(elapsed, 0.5);
  EXPECT_EQ(tok.decode(word_ids), word);
}

}  // namespace
}  // namespace nt
