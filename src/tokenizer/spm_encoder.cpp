#include "tokenizer/spm_encoder.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace nt {
namespace {

struct Symbol {
  size_t start, length;  // length 0: merged into its left neighbour
  int prev, next;        // -1 at the ends
};

struct Candidate {
  float score;
  int left;       // symbol index; the pair is (left, symbols[left].next)
  size_t length;  // combined length when queued, to detect stale entries
};

struct WorseCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.score != b.score) return a.score < b.score;
    return a.left > b.left;  // equal scores: leftmost first
  }
};

// Pieces that may result from a merge; control, byte and unknown tokens only come from
// special-token matching or byte fallback.
bool is_mergeable(TokenKind kind) {
  return kind != TokenKind::Control && kind != TokenKind::Byte && kind != TokenKind::Unknown;
}

void append_byte_fallback(const Vocabulary& vocab, std::string_view bytes, std::vector<int32_t>& out) {
  for (char c : bytes) {
    int32_t id = vocab.byte_token(uint8_t(c));
    if (id == kNoToken) id = vocab.unk();
    if (id == kNoToken) {
      fail("SentencePiece vocabulary has neither a <0x{:02X}> byte token nor an unknown token to encode it",
           uint8_t(c));
    }
    out.push_back(id);
  }
}

}  // namespace

void encode_sentencepiece(const Vocabulary& vocab, std::string_view text, std::vector<int32_t>& out) {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    size_t n = utf8::unit_length(text, pos);
    int index = int(symbols.size());
    symbols.push_back({pos, n, index - 1, -1});
    if (index > 0) symbols[size_t(index) - 1].next = index;
    pos += n;
  }

  std::priority_queue<Candidate, std::vector<Candidate>, WorseCandidate> agenda;
  auto consider = [&](int left) {
    if (left < 0 || symbols[size_t(left)].next < 0) return;
    const Symbol& a = symbols[size_t(left)];
    const Symbol& b = symbols[size_t(a.next)];
    int32_t id = vocab.find(text.substr(a.start, a.length + b.length));
    if (id == kNoToken || !is_mergeable(vocab.kind(id))) return;
    agenda.push({vocab.score(id), left, a.length + b.length});
  };
  for (int i = 0; i + 1 < int(symbols.size()); ++i) consider(i);

  while (!agenda.empty()) {
    Candidate c = agenda.top();
    agenda.pop();
    Symbol& left = symbols[size_t(c.left)];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    if (left.length + right.length != c.length) continue;  // one side changed since it was queued
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (left.next >= 0) symbols[size_t(left.next)].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }

  for (int i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[size_t(i)].next) {
    std::string_view piece = text.substr(symbols[size_t(i)].start, symbols[size_t(i)].length);
    int32_t id = vocab.find(piece);
    if (id != kNoToken && is_mergeable(vocab.kind(id))) {
      out.push_back(id);
    } else {
      append_byte_fallback(vocab, piece, out);
    }
  }
}

}  // namespace nt
