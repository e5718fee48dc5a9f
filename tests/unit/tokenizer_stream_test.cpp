// Streaming detokenization: characters split over several tokens are held back until
// complete, and the stream always yields valid UTF-8.
#include <gtest/gtest.h>

#include "spm_test_vocab.h"
#include "tokenizer/synthetic_vocab.h"
#include "tokenizer/token_stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace nt {
namespace {

// Byte tokens and a few pieces; no piece covers the emoji.
VocabSpec tiny_spm_vocab() {
  return test::byte_fallback_spm_vocab({"\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a"});
}

constexpr std::string_view kGrin = "\xF0\x9F\x98\x80";  // U+1F600, four UTF-8 bytes

TEST(TokenStreamDecoder, HoldsBackAnEmojiSplitOverByteTokens) {
  Tokenizer tok(tiny_spm_vocab());
  std::string text = "a";  // built by appending: GCC 12 warns falsely (-Wrestrict) on "a" + s + "b"
  text += kGrin;
  text += 'b';
  auto ids = tok.encode(text, /*add_special=*/true);
  // <s>, "▁a", the four byte-fallback tokens, "b"
  ASSERT_EQ(ids.size(), 7u);
  EXPECT_EQ(ids[0], 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(ids[size_t(2 + i)], 3 + int(uint8_t(kGrin[size_t(i)])));

  TokenStreamDecoder stream(tok);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(stream.push(id));
  EXPECT_EQ(out, (std::vector<std::string>{"", "a", "", "", "", std::string(kGrin), "b"}));
  EXPECT_EQ(stream.flush(), "");
  EXPECT_EQ(tok.decode(ids), text);
}

// SentencePiece's dummy-prefix space goes only at the start of a text (after BOS):
// a piece that continues a prompt keeps its space, as sentencepiece decodes the
// prompt and the continuation as one text.
TEST(TokenStreamDecoder, OnlyTheStartOfATextLosesTheDummyPrefixSpace) {
  Tokenizer tok(tiny_spm_vocab());
  const int32_t bos = 1, space_a = 262, b = 261;
  ASSERT_EQ(tok.vocab().text(space_a), "\xE2\x96\x81" "a");
  const std::vector<int32_t> reply = {space_a, b, space_a};
  auto stream = [&](std::vector<int32_t> context) {
    TokenStreamDecoder decoder(tok);
    decoder.continue_after(context);
    std::string text;
    for (int32_t id : reply) text += decoder.push(id);
    return text + decoder.flush();
  };
  EXPECT_EQ(stream({}), "ab a");
  EXPECT_EQ(stream({bos}), "ab a");                  // BOS starts no text
  EXPECT_EQ(stream({bos, space_a}), " ab a");        // "a" then " ab a"
  EXPECT_EQ(stream({bos, space_a, bos}), " ab a");   // a later BOS does not restart it

  TokenStreamDecoder decoder(tok);
  decoder.continue_after({std::vector<int32_t>{bos, space_a}});
  decoder.reset();  // a new text
  EXPECT_EQ(decoder.push(space_a), "a");
}

TEST(TokenStreamDecoder, MalformedBytesBecomeReplacementCharacters) {
  Tokenizer tok(tiny_spm_vocab());
  const std::string replacement = "\xEF\xBF\xBD";
  auto byte = [](int b) { return int32_t(3 + b); };
  TokenStreamDecoder stream(tok);
  EXPECT_EQ(stream.push(byte(0xFF)), replacement);  // never valid in UTF-8
  EXPECT_EQ(stream.push(byte(0xF0)), "");           // could still become a character
  EXPECT_EQ(stream.push(byte(0x9F)), "");
  EXPECT_EQ(stream.push(byte('a')), replacement + "a");  // the cut sequence is one U+FFFD
  EXPECT_EQ(stream.push(byte(0xE2)), "");
  EXPECT_EQ(stream.flush(), replacement);  // unfinished at the end
}

TEST(TokenStreamDecoder, ByteLevelPiecesOfRandomTextStreamBackExactly) {
  Tokenizer tok(make_synthetic_bpe_vocab(49152, SyntheticVocabStyle::SmolLM2));
  const std::string text =
      "Crab \xF0\x9F\xA6\x80, family \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7, "
      "\xE4\xBD\xA0\xE5\xA5\xBD \xC3\xA9t\xC3\xA9 <|im_end|>!";
  auto ids = tok.encode(text, false, /*parse_special=*/true);
  TokenStreamDecoder stream(tok);
  std::string streamed;
  int held_back = 0;
  for (int32_t id : ids) {
    std::string chunk = stream.push(id);
    EXPECT_EQ(utf8::to_valid(chunk), chunk) << "chunk is not valid UTF-8";
    if (chunk.empty() && !tok.is_special(id)) ++held_back;
    streamed += chunk;
  }
  streamed += stream.flush();
  EXPECT_GT(held_back, 0) << "expected some emoji bytes to be held back";
  std::string without_special = text;
  without_special.erase(without_special.find("<|im_end|>"), 10);
  EXPECT_EQ(streamed, without_special);

  TokenStreamDecoder keep_special(tok, /*skip_special=*/false);
  std::string all;
  for (int32_t id : ids) all += keep_special.push(id);
  EXPECT_EQ(all + keep_special.flush(), text);
}

}  // namespace
}  // namespace nt
