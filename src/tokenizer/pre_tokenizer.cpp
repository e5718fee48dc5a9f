#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <optional>

#include "core/error.h"

namespace nt {
namespace {

// GPT-2's split (also HF's ByteLevel pre-tokenizer with use_regex=true).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3's split: case-insensitive contractions, at most one non-letter glued to a word,
// numbers in groups of up to three digits, newlines kept with the whitespace before them.
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2's split (Qwen2, Qwen2.5, Qwen3 tokenizer.json): Llama 3's, except that every digit is
// a piece of its own.
constexpr const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k's split (gpt-oss, GPT-4o tokenizer.json): words by case runs with contractions glued
// on, numbers in groups of up to three digits, punctuation runs keeping newlines and slashes.
constexpr const char* kGpt4oPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Each digit on its own (HF's Digits(individual_digits=true)), before GPT-2's split.
constexpr const char* kSingleDigitPattern = R"(\p{N})";

struct RuleSet {
  const char* rules;
  std::vector<const char*> patterns;
  bool ignore_merges;
};

std::optional<RuleSet> rule_set_for(std::string_view pre) {
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "dbrx" || pre == "smaug-bpe") {
    return RuleSet{"llama3", {kLlama3Pattern}, true};
  }
  // The names llama.cpp reads as Qwen2's rules (models fine-tuned from Qwen keep its tokenizer).
  if (pre == "qwen2" || pre == "deepseek-r1-qwen" || pre == "megrez" || pre == "kormo" || pre == "f2llmv2") {
    return RuleSet{"qwen2", {kQwen2Pattern}, false};
  }
  if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "command-r") {
    return RuleSet{"smollm", {kSingleDigitPattern, kGpt2Pattern}, false};
  }
  if (pre == "gpt-4o" || pre == "llama4") return RuleSet{"gpt-4o", {kGpt4oPattern}, false};
  if (pre == "gpt2" || pre == "default" || pre.empty()) return RuleSet{"gpt2", {kGpt2Pattern}, false};
  return std::nullopt;
}

}  // namespace

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;

  explicit Regex(const char* pattern) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &error_offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      fail("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern, error_offset,
           reinterpret_cast<const char*>(message));
    }
    // JIT is an optimisation only; the interpreter gives the same matches if it is unavailable.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~Regex() { pcre2_code_free(code); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the matches of this regex in `text`, and the unmatched text between them, to `out`.
  void split(std::string_view text, pcre2_match_data* match, std::vector<std::string_view>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;  // start of text not yet emitted
    size_t search = 0;
    while (search < text.size()) {
      int rc = pcre2_match(code, subject, text.size(), search, 0, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        fail("pre-tokenizer regex match failed: {}", reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      size_t begin = ovector[0], end = ovector[1];
      if (end == begin) {  // none of our patterns matches empty text; guard against looping anyway
        search = begin + 1;
        continue;
      }
      if (begin > pos) out.push_back(text.substr(pos, begin - pos));
      out.push_back(text.substr(begin, end - begin));
      pos = search = end;
    }
    if (pos < text.size()) out.push_back(text.substr(pos));
  }
};

PreTokenizer::PreTokenizer(std::string_view pre_name) {
  std::optional<RuleSet> set = rule_set_for(pre_name);
  if (!set) {
    warning_ = fmt::format("unknown pre-tokenizer '{}' (tokenizer.ggml.pre); using GPT-2's splitting rules", pre_name);
    set = rule_set_for("gpt2");
  }
  rules_ = set->rules;
  ignore_merges_ = set->ignore_merges;
  for (const char* pattern : set->patterns) stages_.push_back(std::make_unique<Regex>(pattern));
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string_view> current{text}, next;
  for (const auto& stage : stages_) {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> match(
        pcre2_match_data_create_from_pattern(stage->code, nullptr), &pcre2_match_data_free);
    next.clear();
    for (std::string_view piece : current) stage->split(piece, match.get(), next);
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace nt
