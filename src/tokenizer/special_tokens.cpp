#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace nt {

SpecialTokenMatcher::SpecialTokenMatcher(const Vocabulary& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    TokenKind kind = vocab.kind(id);
    bool special = kind == TokenKind::Control || kind == TokenKind::Unknown;
    bool always = kind == TokenKind::UserDefined;
    const std::string& text = vocab.text(id);
    if ((!special && !always) || text.empty()) continue;
    // A repeated string maps to one id (the vocabulary's lookup decides which).
    if (vocab.find(text) != id) continue;
    by_first_byte_[uint8_t(text[0])].push_back({text, id, always});
    any_always_ = any_always_ || always;
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(),
                     [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
  }
}

const SpecialTokenMatcher::Candidate* SpecialTokenMatcher::match_at(std::string_view text, size_t pos,
                                                                    bool parse_special) const {
  for (const Candidate& c : by_first_byte_[uint8_t(text[pos])]) {
    if ((c.always || parse_special) && text.compare(pos, c.text.size(), c.text) == 0) return &c;
  }
  return nullptr;
}

void SpecialTokenMatcher::split(std::string_view text, bool parse_special, std::vector<TextFragment>& out) const {
  if (!parse_special && !any_always_) {
    if (!text.empty()) out.push_back({text});
    return;
  }
  size_t plain_start = 0;
  for (size_t pos = 0; pos < text.size();) {
    const Candidate* c = match_at(text, pos, parse_special);
    if (!c) {
      ++pos;
      continue;
    }
    if (pos > plain_start) out.push_back({text.substr(plain_start, pos - plain_start)});
    out.push_back({text.substr(pos, c->text.size()), c->id});
    pos += c->text.size();
    plain_start = pos;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start)});
}

}  // namespace nt
