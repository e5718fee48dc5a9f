#include "tokenizer/bpe_encoder.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace nt {
namespace {

struct Symbol {
  int32_t id;  // kNoToken: merged into its left neighbour
  int prev, next;
};

struct Candidate {
  int32_t rank;
  int left;  // symbol index; the pair is (left, symbols[left].next)
  int32_t left_id, right_id;
  int32_t result;
};

struct WorseCandidate {
  bool operator()(const Candidate& a, const Candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.left > b.left;  // equal ranks: leftmost first
  }
};

}  // namespace

ByteLevelBpeEncoder::ByteLevelBpeEncoder(const Vocabulary& vocab, bool ignore_merges)
    : vocab_(&vocab), ignore_merges_(ignore_merges) {
  for (int b = 0; b < 256; ++b) byte_tokens_[size_t(b)] = vocab.find(byte_level::byte_to_symbol(uint8_t(b)));
}

int32_t ByteLevelBpeEncoder::byte_token(uint8_t byte) const {
  int32_t id = byte_tokens_[byte];
  if (id == kNoToken) id = vocab_->unk();
  if (id == kNoToken) {
    fail("byte-level vocabulary has no token for byte 0x{:02X} ('{}') and no unknown token", byte,
         byte_level::byte_to_symbol(byte));
  }
  return id;
}

void ByteLevelBpeEncoder::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    std::string spelled;
    byte_level::encode(piece, spelled);
    if (int32_t id = vocab_->find(spelled); id != kNoToken) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) {
    symbols[i] = {byte_token(uint8_t(piece[i])), int(i) - 1, i + 1 < piece.size() ? int(i) + 1 : -1};
  }

  std::priority_queue<Candidate, std::vector<Candidate>, WorseCandidate> agenda;
  auto consider = [&](int left) {
    if (left < 0 || symbols[size_t(left)].next < 0) return;
    int32_t a = symbols[size_t(left)].id, b = symbols[size_t(symbols[size_t(left)].next)].id;
    if (auto m = vocab_->merge(a, b)) agenda.push({m->rank, left, a, b, m->result});
  };
  for (int i = 0; i + 1 < int(symbols.size()); ++i) consider(i);

  while (!agenda.empty()) {
    Candidate c = agenda.top();
    agenda.pop();
    Symbol& left = symbols[size_t(c.left)];
    // Stale unless the same two tokens still sit side by side at this position.
    if (left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    if (right.id != c.right_id) continue;
    left.id = c.result;
    right.id = kNoToken;
    left.next = right.next;
    if (left.next >= 0) symbols[size_t(left.next)].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }

  for (int i = 0; i >= 0; i = symbols[size_t(i)].next) out.push_back(symbols[size_t(i)].id);
}

}  // namespace nt
