#include "tokenizer/synthetic_vocab.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace nt {

const std::string_view kSmolLM2ChatTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n"
    "' + message['content'] + '<|im_end|>' + '\n"
    "'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n"
    "' }}{% endif %}";

const std::string_view kLlama3ChatTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

namespace {

constexpr const char* kSmolLM2Specials[] = {
    "<|endoftext|>",  "<|im_start|>",   "<|im_end|>",       "<repo_name>",      "<reponame>",     "<file_sep>",
    "<filename>",     "<gh_stars>",     "<issue_start>",    "<issue_comment>",  "<issue_closed>", "<jupyter_start>",
    "<jupyter_text>", "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>",
};

// Llama 3.1's 256 special tokens, in order from id n_vocab - 256.
std::vector<std::string> llama3_specials() {
  std::vector<std::string> s = {
      "<|begin_of_text|>",
      "<|end_of_text|>",
      "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>",
      "<|finetune_right_pad_id|>",
      "<|reserved_special_token_2|>",
      "<|start_header_id|>",
      "<|end_header_id|>",
      "<|eom_id|>",
      "<|eot_id|>",
      "<|python_tag|>",
  };
  for (int k = 3; s.size() < 256; ++k) s.push_back(fmt::format("<|reserved_special_token_{}|>", k));
  return s;
}

// Frequent English words and code keywords, so common text merges into multi-byte tokens.
constexpr const char* kWords[] = {
    "the",   "and",      "of",      "to",     "in",     "is",        "you",    "that",    "it",     "he",      "was",
    "for",   "on",       "are",     "as",     "with",   "his",       "they",   "at",      "be",     "this",    "from",
    "have",  "or",       "by",      "one",    "had",    "not",       "but",    "what",    "all",    "were",    "when",
    "we",    "there",    "can",     "an",     "your",   "which",     "their",  "said",    "if",     "do",      "will",
    "each",  "about",    "how",     "up",     "out",    "them",      "then",   "she",     "many",   "some",    "so",
    "these", "would",    "other",   "into",   "has",    "more",      "her",    "two",     "like",   "him",     "see",
    "time",  "could",    "no",      "make",   "than",   "first",     "been",   "its",     "who",    "now",     "people",
    "my",    "made",     "over",    "did",    "down",   "only",      "way",    "find",    "use",    "may",     "water",
    "long",  "little",   "very",    "after",  "words",  "called",    "just",   "where",   "most",   "know",    "hello",
    "world", "quick",    "brown",   "fox",    "jumps",  "lazy",      "dog",    "once",    "upon",   "day",     "girl",
    "boy",   "happy",    "play",    "good",   "new",    "year",      "work",   "back",    "give",   "name",    "think",
    "help",  "through",  "great",   "below",  "should", "because",   "before", "must",    "here",   "why",     "ask",
    "went",  "men",      "read",    "need",   "land",   "different", "home",   "us",      "move",   "try",     "kind",
    "hand",  "picture",  "again",   "change", "off",    "spell",     "air",    "away",    "animal", "house",   "point",
    "page",  "letter",   "mother",  "answer", "found",  "study",     "still",  "learn",   "plant",  "cover",   "food",
    "sun",   "four",     "between", "state",  "keep",   "eye",       "never",  "last",    "let",    "thought", "city",
    "tree",  "cross",    "farm",    "hard",   "start",  "might",     "story",  "saw",     "far",    "sea",     "draw",
    "left",  "late",     "run",     "don",    "while",  "press",     "close",  "night",   "real",   "life",    "few",
    "north", "open",     "int",     "char",   "const",  "void",      "return", "include", "def",    "self",    "import",
    "class", "function", "struct",  "static", "float",  "double",    "string", "vector",  "auto",   "elif",    "else",
    "true",  "false",    "null",    "none",   "print",  "value",     "size",   "data",    "type",   "list",    "main",
    "std",   "range",    "len",     "args",   "model",  "token",
};

// SplitMix64: a small, fully specified generator, so the vocabulary is identical everywhere.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Index in [0, n), biased towards 0 (earlier, shorter tokens are picked more often).
  size_t biased_index(size_t n) {
    double u = double(next() >> 11) * 0x1.0p-53;
    return std::min(n - 1, size_t(double(n) * u * u));
  }

 private:
  uint64_t state_;
};

constexpr size_t kMaxTokenBytes = 16;
constexpr int kIdBits = 20;  // the builder packs token ids into 20 bits
constexpr int64_t kMaxSyntheticVocab = int64_t(1) << kIdBits;

// Grows a merge table one merge at a time, accepting a merge only when plain BPE over
// the merges so far turns the new token's bytes into exactly the two halves being
// joined. Then every token is what BPE makes of its own bytes, as in a trained vocabulary.
class MergeBuilder {
 public:
  MergeBuilder(size_t capacity, const std::vector<std::string>& reserved)
      : capacity_(capacity), merge_ranks_(capacity) {
    reserved_.insert(reserved.begin(), reserved.end());
    for (int b = 0; b < 256; ++b) add_token(std::string(1, char(b)));
  }

  bool full() const { return raw_.size() >= capacity_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return raw_.size(); }
  const std::string& raw(int32_t id) const { return raw_[size_t(id)]; }
  int32_t find(const std::string& raw) const {
    auto it = ids_.find(raw);
    return it == ids_.end() ? -1 : it->second;
  }
  size_t n_merges() const { return merges_.size(); }
  std::pair<int32_t, int32_t> merge(size_t rank) const { return {merges_[rank].left, merges_[rank].right}; }

  // Adds `left + right` as a merge of two existing tokens if that is new and consistent.
  bool try_merge(int32_t left, int32_t right) {
    if (full() || raw_[size_t(left)].size() + raw_[size_t(right)].size() > kMaxTokenBytes) return false;
    std::string joined = raw_[size_t(left)] + raw_[size_t(right)];
    if (ids_.count(joined) || reserved_.count(joined)) return false;
    if (!bpe_ends_in(joined, left, right)) return false;
    merge_ranks_.insert(left, right, int32_t(merges_.size()));
    merges_.push_back({left, right, int32_t(raw_.size())});
    add_token(std::move(joined));
    return true;
  }

  // Adds the byte string `s` through any split into two existing tokens that works.
  bool try_add(const std::string& s) {
    if (ids_.count(s)) return true;
    for (size_t cut = 1; cut < s.size(); ++cut) {
      int32_t l = find(s.substr(0, cut)), r = find(s.substr(cut));
      if (l >= 0 && r >= 0 && try_merge(l, r)) return true;
    }
    return false;
  }

  // Adds `s` and, first, each of its prefixes, so the chain of merges exists.
  void add_with_prefixes(const std::string& s) {
    for (size_t n = 2; n <= s.size() && !full(); ++n) try_add(s.substr(0, n));
  }

 private:
  struct Merge {
    int32_t left, right, result;
  };

  void add_token(std::string raw) {
    ids_.emplace(raw, int32_t(raw_.size()));
    raw_.push_back(std::move(raw));
  }

  // Runs BPE (lowest rank first, leftmost on ties) over `bytes`; true when it stops at {left, right}.
  bool bpe_ends_in(const std::string& bytes, int32_t left, int32_t right) const {
    int32_t seq[kMaxTokenBytes];
    int32_t rank[kMaxTokenBytes];  // rank[i]: merge rank of (seq[i], seq[i + 1]); INT32_MAX if none
    size_t n = bytes.size();
    for (size_t i = 0; i < n; ++i) seq[i] = int32_t(uint8_t(bytes[i]));
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = merge_ranks_.rank(seq[i], seq[i + 1]);
    while (n > 2) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i) {
        if (rank[i] < rank[best]) best = i;
      }
      if (rank[best] == INT32_MAX) return false;
      seq[best] = merges_[size_t(rank[best])].result;
      for (size_t i = best + 1; i + 1 < n; ++i) seq[i] = seq[i + 1], rank[i] = rank[i + 1];
      --n;
      if (best > 0) rank[best - 1] = merge_ranks_.rank(seq[best - 1], seq[best]);
      if (best + 1 < n) rank[best] = merge_ranks_.rank(seq[best], seq[best + 1]);
    }
    return seq[0] == left && seq[1] == right;
  }

  // Open-addressing map from a token pair to its merge rank. The check above does
  // millions of lookups, so each slot packs both ids (20 bits each) and the rank
  // (24 bits) into 8 bytes to keep the table small and cache friendly.
  class PairRanks {
   public:
    explicit PairRanks(size_t capacity) {
      int bits = 10;
      while ((size_t(1) << bits) < 2 * capacity) ++bits;
      slots_.assign(size_t(1) << bits, kEmpty);
      mask_ = (size_t(1) << bits) - 1;
      shift_ = 64 - bits;
    }
    void insert(int32_t a, int32_t b, int32_t rank) {
      uint64_t k = key(a, b);
      size_t i = slot(k);
      while (slots_[i] != kEmpty) i = (i + 1) & mask_;
      slots_[i] = (k << kRankBits) | uint64_t(rank);
    }
    int32_t rank(int32_t a, int32_t b) const {
      uint64_t k = key(a, b);
      for (size_t i = slot(k);; i = (i + 1) & mask_) {
        if (slots_[i] == kEmpty) return INT32_MAX;
        if ((slots_[i] >> kRankBits) == k) return int32_t(slots_[i] & ((1u << kRankBits) - 1));
      }
    }

   private:
    static constexpr int kRankBits = 24;
    static constexpr uint64_t kEmpty = ~0ull;
    static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << kIdBits) | uint32_t(b); }
    // Fibonacci hashing: the top bits of the product depend on every bit of the key.
    size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
    std::vector<uint64_t> slots_;
    size_t mask_;
    int shift_;
  };

  size_t capacity_;
  std::vector<std::string> raw_;
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_set<std::string> reserved_;
  PairRanks merge_ranks_;
  std::vector<Merge> merges_;
};

bool is_lower_word(const std::string& s) {
  for (char c : s) {
    if (c < 'a' || c > 'z') return false;
  }
  return !s.empty();
}

void add_seed_merges(MergeBuilder& b, SyntheticVocabStyle style, Random& rng) {
  for (const char* ws : {"  ", "    ", "        ", "\n\n", "\t\t", "\n\n\n\n", " \n"}) b.add_with_prefixes(ws);
  for (char c = 'a'; c <= 'z'; ++c) {
    b.try_add(std::string(" ") + c);
    b.try_add(std::string(" ") + char(c - 'a' + 'A'));
  }
  for (const char* word : kWords) {
    std::string w = word, cap = w;
    cap[0] = char(cap[0] - 'a' + 'A');
    for (const std::string& s : {" " + w, w, " " + cap, cap}) b.add_with_prefixes(s);
  }
  for (const char* p : {". ", ", ", ".\n", "()", "();", ");\n",   " {", " }", "{\n", "}\n", " =",  " ==", " +", " -",
                        "->", "::", "//",  "/*", "*/",  "\"\"\"", " (", "):", "],",  "''",  "...", "?\n", "!\n"}) {
    b.add_with_prefixes(p);
  }
  // Llama 3 splits numbers into groups of up to three digits and has a token for each group.
  if (style == SyntheticVocabStyle::Llama3) {
    for (int n = 0; n < 100; ++n) b.try_add(fmt::format("{:02d}", n));
    for (int n = 0; n < 1000; ++n) b.try_add(fmt::format("{:03d}", n));
  }
  // Two-byte characters: Latin-1 supplement, Greek, Cyrillic (leads C3, CE-CF, D0-D1).
  for (int lead : {0xC3, 0xCE, 0xCF, 0xD0, 0xD1}) {
    for (int cont = 0x80; cont <= 0xBF; ++cont) b.try_add({char(lead), char(cont)});
  }
  // Three-byte characters (CJK, kana, punctuation, emoji parts): prefixes, then a sample
  // of whole characters scaled to the vocabulary size.
  for (int lead = 0xE2; lead <= 0xE9; ++lead) {
    for (int cont = 0x80; cont <= 0xBF; ++cont) b.try_add({char(lead), char(cont)});
  }
  size_t n_chars = b.capacity() / 40;
  for (size_t i = 0; i < n_chars && !b.full(); ++i) {
    int lead = 0xE3 + int(rng.next() % 7);
    b.try_add({char(lead), char(0x80 + rng.next() % 64), char(0x80 + rng.next() % 64)});
  }
  for (const char* emoji : {"\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D", "\xF0\x9F\x8E\x89", "\xE2\x80\x8D"}) {
    b.add_with_prefixes(emoji);
  }
}

// Fills the rest with word-like merges: a word start (letters, maybe after a space)
// joined with a run of lowercase letters.
void add_random_merges(MergeBuilder& b, Random& rng) {
  std::vector<int32_t> starts, tails;
  auto classify = [&](int32_t id) {
    const std::string& s = b.raw(id);
    if (is_lower_word(s)) {
      tails.push_back(id);
      starts.push_back(id);
    } else if (s.size() > 1 && s[0] == ' ' && is_lower_word(s.substr(1))) {
      starts.push_back(id);
    }
  };
  for (int32_t id = 0; id < int32_t(b.size()); ++id) classify(id);
  size_t attempts = 0;
  const size_t max_attempts = 200 * b.capacity() + 1000000;
  while (!b.full()) {
    if (++attempts > max_attempts) fail("synthetic vocabulary: could not find enough distinct merges");
    int32_t left = starts[rng.biased_index(starts.size())];
    int32_t right = tails[rng.biased_index(tails.size())];
    if (b.try_merge(left, right)) classify(int32_t(b.size()) - 1);
  }
}

}  // namespace

VocabSpec make_synthetic_bpe_vocab(int32_t n_vocab, SyntheticVocabStyle style) {
  const bool llama3 = style == SyntheticVocabStyle::Llama3;
  std::vector<std::string> specials =
      llama3 ? llama3_specials() : std::vector<std::string>(std::begin(kSmolLM2Specials), std::end(kSmolLM2Specials));
  if (n_vocab >= kMaxSyntheticVocab) {
    fail("synthetic vocabulary of {} tokens is too large (at most {})", n_vocab, kMaxSyntheticVocab - 1);
  }
  const int64_t n_regular = int64_t(n_vocab) - int64_t(specials.size());
  if (n_regular < 256) {
    fail("synthetic {} vocabulary needs at least {} tokens ({} special + 256 byte symbols), asked for {}",
         llama3 ? "llama3" : "smollm2", specials.size() + 256, specials.size(), n_vocab);
  }

  MergeBuilder builder(size_t(n_regular), specials);
  Random rng(llama3 ? 0x11A3A3ull : 0x5A011A2ull);
  add_seed_merges(builder, style, rng);
  add_random_merges(builder, rng);

  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = llama3 ? "llama-bpe" : "smollm";
  const int32_t first_regular = llama3 ? 0 : int32_t(specials.size());
  const int32_t first_special = llama3 ? int32_t(n_regular) : 0;
  spec.tokens.resize(size_t(n_vocab));
  spec.token_types.assign(size_t(n_vocab), int32_t(TokenKind::Normal));
  for (size_t i = 0; i < specials.size(); ++i) {
    spec.tokens[size_t(first_special) + i] = specials[i];
    spec.token_types[size_t(first_special) + i] = int32_t(TokenKind::Control);
  }
  std::vector<std::string> spelled(builder.size());
  for (size_t id = 0; id < builder.size(); ++id) {
    byte_level::encode(builder.raw(int32_t(id)), spelled[id]);
    spec.tokens[size_t(first_regular) + id] = spelled[id];
  }
  spec.merges.reserve(builder.n_merges());
  for (size_t rank = 0; rank < builder.n_merges(); ++rank) {
    auto [l, r] = builder.merge(rank);
    spec.merges.push_back(spelled[size_t(l)] + " " + spelled[size_t(r)]);
  }

  if (llama3) {
    spec.bos_id = first_special + 0;  // <|begin_of_text|>
    spec.eos_id = first_special + 1;  // <|end_of_text|>
    spec.pad_id = first_special + 4;  // <|finetune_right_pad_id|>
    spec.eom_id = first_special + 8;  // <|eom_id|>
    spec.eot_id = first_special + 9;  // <|eot_id|>
    spec.add_bos = true;
    spec.chat_template = std::string(kLlama3ChatTemplate);
  } else {
    spec.unk_id = 0;  // <|endoftext|>
    spec.bos_id = 1;  // <|im_start|>
    spec.eos_id = 2;  // <|im_end|>
    spec.pad_id = 2;
    spec.add_bos = false;
    spec.chat_template = std::string(kSmolLM2ChatTemplate);
  }
  spec.add_eos = false;
  spec.add_space_prefix = false;
  return spec;
}

}  // namespace nt
