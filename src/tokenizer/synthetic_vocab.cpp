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
#include "tokenizer/utf8.h"

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

// Qwen2.5-Instruct's template: a default system prompt ("You are Qwen, ...") and Hermes-style tools.
const std::string_view kQwen25ChatTemplate =
    R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
)jinja";

// Qwen3's template: no default system prompt; earlier turns lose their <think> reasoning.
const std::string_view kQwen3ChatTemplate =
    R"jinja({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})jinja";

// Gemma 3's template: BOS written by the template, a system prompt folded into the first user
// turn, the assistant called "model".
const std::string_view kGemma3ChatTemplate =
    R"jinja({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
)jinja";

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

// o200k_harmony's special tokens from <|startoftext|> (199998 there) to <|call|> (200012).
std::vector<std::string> gpt_oss_specials() {
  return {"<|startoftext|>", "<|endoftext|>",      "<|reserved_200000|>", "<|reserved_200001|>", "<|return|>",
          "<|constrain|>",   "<|reserved_200004|>", "<|channel|>",         "<|start|>",           "<|end|>",
          "<|message|>",     "<|reserved_200009|>", "<|reserved_200010|>", "<|reserved_200011|>", "<|call|>"};
}

struct AddedToken {
  const char* text;
  TokenKind kind;
};

// Qwen's added tokens, ids 151643 on. llama.cpp's converter types them: "special" ones and
// any spelled "<|...|>" are control tokens, the rest user defined (matched in any text).
constexpr AddedToken kQwenAddedTokens[] = {
    {"<|endoftext|>", TokenKind::Control},       {"<|im_start|>", TokenKind::Control},
    {"<|im_end|>", TokenKind::Control},          {"<|object_ref_start|>", TokenKind::Control},
    {"<|object_ref_end|>", TokenKind::Control},  {"<|box_start|>", TokenKind::Control},
    {"<|box_end|>", TokenKind::Control},         {"<|quad_start|>", TokenKind::Control},
    {"<|quad_end|>", TokenKind::Control},        {"<|vision_start|>", TokenKind::Control},
    {"<|vision_end|>", TokenKind::Control},      {"<|vision_pad|>", TokenKind::Control},
    {"<|image_pad|>", TokenKind::Control},       {"<|video_pad|>", TokenKind::Control},
    {"<tool_call>", TokenKind::UserDefined},     {"</tool_call>", TokenKind::UserDefined},
    {"<|fim_prefix|>", TokenKind::Control},      {"<|fim_middle|>", TokenKind::Control},
    {"<|fim_suffix|>", TokenKind::Control},      {"<|fim_pad|>", TokenKind::Control},
    {"<|repo_name|>", TokenKind::Control},       {"<|file_sep|>", TokenKind::Control},
    // Qwen3 only:
    {"<tool_response>", TokenKind::UserDefined}, {"</tool_response>", TokenKind::UserDefined},
    {"<think>", TokenKind::UserDefined},         {"</think>", TokenKind::UserDefined},
};
constexpr size_t kQwen25AddedTokens = 22;
constexpr int32_t kQwenRegularTokens = 151643;  // ids of the byte symbols and merges

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

constexpr size_t kMaxTokenUnits = 16;  // bytes (byte-level BPE) or characters (SentencePiece)
constexpr int kIdBits = 20;            // the builder packs token ids into 20 bits
constexpr int64_t kMaxSyntheticVocab = int64_t(1) << kIdBits;

// How BPE picks the next merge, and so which merges a new token must be consistent with.
enum class MergeRule {
  RankedPairs,  // byte-level BPE: the adjacent pair listed first among the merges
  BestPiece,    // SentencePiece: the adjacent pair whose concatenation is the best-scoring piece
};

// Grows a vocabulary one merge at a time from single units (the 256 bytes, or characters),
// accepting a merge only when BPE over the merges so far turns the new token's units into
// exactly the two halves being joined. Then every token is what BPE makes of its own text,
// as in a trained vocabulary. Token ids: the units first, then one per merge.
class MergeBuilder {
 public:
  // `capacity`: units plus merges. `reserved`: texts no token may take (the specials).
  MergeBuilder(size_t capacity, MergeRule rule, const std::vector<std::string>& units,
               const std::vector<std::string>& reserved)
      : capacity_(capacity), rule_(rule), merge_ranks_(capacity), piece_ranks_(capacity) {
    reserved_.insert(reserved.begin(), reserved.end());
    for (const std::string& u : units) add_token(u, 1, hash_of(u));
    n_units_ = raw_.size();
    uint64_t p = 1;
    for (uint64_t& power : powers_) power = p, p *= kHashBase;
  }

  bool full() const { return raw_.size() >= capacity_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return raw_.size(); }
  const std::string& raw(int32_t id) const { return raw_[size_t(id)]; }
  int32_t find(std::string_view raw) const {
    auto it = ids_.find(std::string(raw));
    return it == ids_.end() ? -1 : it->second;
  }
  size_t n_merges() const { return merges_.size(); }
  std::pair<int32_t, int32_t> merge(size_t rank) const { return {merges_[rank].left, merges_[rank].right}; }

  // Adds `left + right` as a merge of two existing tokens if that is new and consistent.
  bool try_merge(int32_t left, int32_t right) {
    const size_t units = units_[size_t(left)] + units_[size_t(right)];
    if (full() || units > kMaxTokenUnits) return false;
    std::string joined = raw_[size_t(left)] + raw_[size_t(right)];
    if (ids_.count(joined) || reserved_.count(joined)) return false;
    if (!bpe_ends_in(joined, left, right)) return false;
    const int32_t rank = int32_t(merges_.size());
    const uint64_t hash = join_hash(left, right);
    if (rule_ == MergeRule::RankedPairs) merge_ranks_.insert(left, right, rank);
    if (rule_ == MergeRule::BestPiece) piece_ranks_.insert(hash, rank);
    merges_.push_back({left, right, int32_t(raw_.size())});
    add_token(std::move(joined), units, hash);
    return true;
  }

  // Adds the string `s` through any split into two existing tokens that works.
  bool try_add(const std::string& s) {
    if (ids_.count(s)) return true;
    for (size_t cut = 1; cut < s.size(); ++cut) {
      int32_t l = find(std::string_view(s).substr(0, cut)), r = find(std::string_view(s).substr(cut));
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

  // A polynomial hash that composes: hash(a + b) = hash(a) * kHashBase^len(b) + hash(b).
  static constexpr uint64_t kHashBase = 0x100000001B3ull;
  static uint64_t hash_of(std::string_view s) {
    uint64_t h = 0;
    for (char c : s) h = h * kHashBase + uint8_t(c) + 1;
    return h;
  }
  uint64_t join_hash(int32_t left, int32_t right) const {
    return hashes_[size_t(left)] * powers_[raw_[size_t(right)].size()] + hashes_[size_t(right)];
  }

  void add_token(std::string raw, size_t units, uint64_t hash) {
    ids_.emplace(raw, int32_t(raw_.size()));
    raw_.push_back(std::move(raw));
    units_.push_back(uint8_t(units));
    hashes_.push_back(hash);
  }

  // The rank of the merge BPE would make of the adjacent tokens a, b; INT32_MAX if none.
  int32_t pair_rank(int32_t a, int32_t b) const {
    if (rule_ == MergeRule::RankedPairs) return merge_ranks_.rank(a, b);
    return piece_ranks_.rank(join_hash(a, b));
  }

  // Runs BPE (lowest rank first, leftmost on ties) over `text`'s units; true when it stops at {left, right}.
  bool bpe_ends_in(const std::string& text, int32_t left, int32_t right) const {
    int32_t seq[kMaxTokenUnits];
    int32_t rank[kMaxTokenUnits];  // rank[i]: merge rank of (seq[i], seq[i + 1]); INT32_MAX if none
    size_t n = 0;
    for (size_t pos = 0; pos < text.size(); ++n) {
      size_t len = rule_ == MergeRule::RankedPairs ? 1 : utf8::unit_length(text, pos);
      int32_t unit = rule_ == MergeRule::RankedPairs ? int32_t(uint8_t(text[pos])) : find(text.substr(pos, len));
      if (unit < 0 || size_t(unit) >= n_units_ || n == kMaxTokenUnits) return false;
      seq[n] = unit;
      pos += len;
    }
    for (size_t i = 0; i + 1 < n; ++i) rank[i] = pair_rank(seq[i], seq[i + 1]);
    while (n > 2) {
      size_t best = 0;
      for (size_t i = 1; i + 1 < n; ++i) {
        if (rank[i] < rank[best]) best = i;
      }
      if (rank[best] == INT32_MAX) return false;
      seq[best] = merges_[size_t(rank[best])].result;
      for (size_t i = best + 1; i + 1 < n; ++i) seq[i] = seq[i + 1], rank[i] = rank[i + 1];
      --n;
      if (best > 0) rank[best - 1] = pair_rank(seq[best - 1], seq[best]);
      if (best + 1 < n) rank[best] = pair_rank(seq[best], seq[best + 1]);
    }
    return n == 2 && seq[0] == left && seq[1] == right;
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

  // Open-addressing map from a merged piece's text hash to its merge rank (SentencePiece:
  // any two adjacent pieces that spell a merged piece merge into it, at its rank).
  class PieceRanks {
   public:
    explicit PieceRanks(size_t capacity) {
      size_t n = 1024;
      while (n < 2 * capacity) n *= 2;
      slots_.assign(n, {0, INT32_MAX});
      mask_ = n - 1;
    }
    void insert(uint64_t hash, int32_t rank) {
      size_t i = slot(hash);
      while (slots_[i].hash != 0) i = (i + 1) & mask_;
      slots_[i] = {nonzero(hash), rank};
    }
    int32_t rank(uint64_t hash) const {
      hash = nonzero(hash);
      for (size_t i = slot(hash);; i = (i + 1) & mask_) {
        if (slots_[i].hash == 0) return INT32_MAX;
        if (slots_[i].hash == hash) return slots_[i].rank;
      }
    }

   private:
    struct Slot {
      uint64_t hash;  // 0: empty
      int32_t rank;
    };
    static uint64_t nonzero(uint64_t h) { return h ? h : 1; }
    size_t slot(uint64_t h) const { return size_t((nonzero(h) * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
    std::vector<Slot> slots_;
    size_t mask_;
  };

  size_t capacity_;
  MergeRule rule_;
  size_t n_units_ = 0;
  std::vector<std::string> raw_;
  std::vector<uint8_t> units_;    // per token: how many units it spans
  std::vector<uint64_t> hashes_;  // per token: hash_of(raw)
  uint64_t powers_[4 * kMaxTokenUnits + 1];
  std::unordered_map<std::string, int32_t> ids_;
  std::unordered_set<std::string> reserved_;
  PairRanks merge_ranks_;   // RankedPairs
  PieceRanks piece_ranks_;  // BestPiece
  std::vector<Merge> merges_;
};

bool is_lower_word(std::string_view s) {
  for (char c : s) {
    if (c < 'a' || c > 'z') return false;
  }
  return !s.empty();
}

// Fills the rest with word-like merges: a word start (letters, maybe after `space`)
// joined with a run of lowercase letters.
void add_random_merges(MergeBuilder& b, Random& rng, std::string_view space) {
  std::vector<int32_t> starts, tails;
  auto classify = [&](int32_t id) {
    std::string_view s = b.raw(id);
    if (is_lower_word(s)) {
      tails.push_back(id);
      starts.push_back(id);
    } else if (s.size() > space.size() && s.starts_with(space) && is_lower_word(s.substr(space.size()))) {
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

// Words in the four spellings a vocabulary learns: after a space or not, lower or capitalised.
void add_words(MergeBuilder& b, std::string_view space) {
  for (char c = 'a'; c <= 'z'; ++c) {
    b.try_add(std::string(space) + c);
    b.try_add(std::string(space) + char(c - 'a' + 'A'));
  }
  for (const char* word : kWords) {
    std::string w = word, cap = w;
    cap[0] = char(cap[0] - 'a' + 'A');
    for (const std::string& s : {std::string(space) + w, w, std::string(space) + cap, cap}) b.add_with_prefixes(s);
  }
}

// ---------------------------------------------------------------------------
// Byte-level BPE

const char* style_name(SyntheticVocabStyle style) {
  switch (style) {
    case SyntheticVocabStyle::SmolLM2: return "smollm2";
    case SyntheticVocabStyle::Llama3: return "llama3";
    case SyntheticVocabStyle::Qwen2: return "qwen2";
    case SyntheticVocabStyle::Qwen3: return "qwen3";
    case SyntheticVocabStyle::Gemma3: return "gemma3";
    case SyntheticVocabStyle::GptOss: return "gpt-oss";
  }
  return "?";
}

void add_byte_level_seed_merges(MergeBuilder& b, SyntheticVocabStyle style, Random& rng) {
  for (const char* ws : {"  ", "    ", "        ", "\n\n", "\t\t", "\n\n\n\n", " \n"}) b.add_with_prefixes(ws);
  add_words(b, " ");
  for (const char* p : {". ", ", ", ".\n", "()", "();", ");\n",   " {", " }", "{\n", "}\n", " =",  " ==", " +", " -",
                        "->", "::", "//",  "/*", "*/",  "\"\"\"", " (", "):", "],",  "''",  "...", "?\n", "!\n"}) {
    b.add_with_prefixes(p);
  }
  // Llama 3 splits numbers into groups of up to three digits and has a token for each group.
  // Qwen's vocabulary has digit pairs too, though its split never lets them form; SmolLM2's has none.
  if (style != SyntheticVocabStyle::SmolLM2) {
    for (int n = 0; n < 100; ++n) b.try_add(fmt::format("{:02d}", n));
  }
  if (style == SyntheticVocabStyle::Llama3 || style == SyntheticVocabStyle::GptOss) {
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

// The regular tokens of a byte-level vocabulary: the 256 byte symbols and `n_regular - 256`
// merges, spelled in GPT-2's byte alphabet; `specials` are kept out of it.
struct ByteLevelTokens {
  std::vector<std::string> tokens;
  std::vector<std::string> merges;
};

ByteLevelTokens build_byte_level_tokens(int64_t n_regular, SyntheticVocabStyle style, uint64_t seed,
                                        const std::vector<std::string>& specials) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  MergeBuilder builder(size_t(n_regular), MergeRule::RankedPairs, bytes, specials);
  Random rng(seed);
  add_byte_level_seed_merges(builder, style, rng);
  add_random_merges(builder, rng, " ");

  ByteLevelTokens out;
  out.tokens.resize(builder.size());
  for (size_t id = 0; id < builder.size(); ++id) byte_level::encode(builder.raw(int32_t(id)), out.tokens[id]);
  out.merges.reserve(builder.n_merges());
  for (size_t rank = 0; rank < builder.n_merges(); ++rank) {
    auto [l, r] = builder.merge(rank);
    out.merges.push_back(out.tokens[size_t(l)] + " " + out.tokens[size_t(r)]);
  }
  return out;
}

void check_size(int32_t n_vocab, int64_t n_fixed, SyntheticVocabStyle style, std::string_view fixed_what) {
  if (n_vocab >= kMaxSyntheticVocab) {
    fail("synthetic vocabulary of {} tokens is too large (at most {})", n_vocab, kMaxSyntheticVocab - 1);
  }
  if (int64_t(n_vocab) < n_fixed) {
    fail("synthetic {} vocabulary needs at least {} tokens ({}), asked for {}", style_name(style), n_fixed,
         fixed_what, n_vocab);
  }
}

// Qwen2.5 / Qwen3: regular tokens, the added tokens, then unused "[PADn]" to n_vocab.
VocabSpec make_qwen_vocab(int32_t n_vocab, SyntheticVocabStyle style) {
  const size_t n_added = style == SyntheticVocabStyle::Qwen3 ? std::size(kQwenAddedTokens) : kQwen25AddedTokens;
  check_size(n_vocab, int64_t(n_added) + 256, style, fmt::format("{} added + 256 byte symbols", n_added));
  const int32_t n_regular = std::min(kQwenRegularTokens, n_vocab - int32_t(n_added));
  std::vector<std::string> all_added;  // both styles keep all of them out, so they share regular tokens
  for (const AddedToken& t : kQwenAddedTokens) all_added.push_back(t.text);
  ByteLevelTokens regular = build_byte_level_tokens(n_regular, style, 0x9E12A5ull, all_added);

  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = "qwen2";
  spec.tokens = std::move(regular.tokens);
  spec.merges = std::move(regular.merges);
  spec.token_types.assign(spec.tokens.size(), int32_t(TokenKind::Normal));
  for (size_t i = 0; i < n_added; ++i) {
    spec.tokens.push_back(kQwenAddedTokens[i].text);
    spec.token_types.push_back(int32_t(kQwenAddedTokens[i].kind));
  }
  while (spec.tokens.size() < size_t(n_vocab)) {
    spec.tokens.push_back(fmt::format("[PAD{}]", spec.tokens.size()));
    spec.token_types.push_back(int32_t(TokenKind::Unused));
  }
  spec.bos_id = n_regular + 0;  // <|endoftext|>, as the converter writes it (never added)
  spec.eos_id = n_regular + 2;  // <|im_end|>
  spec.pad_id = n_regular + 0;  // <|endoftext|>
  spec.add_bos = false;
  spec.add_eos = false;
  spec.chat_template = std::string(style == SyntheticVocabStyle::Qwen3 ? kQwen3ChatTemplate : kQwen25ChatTemplate);
  return spec;
}

// ---------------------------------------------------------------------------
// SentencePiece (Gemma 3)

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"
constexpr int kMaxWhitespaceRun = 31;

struct NamedToken {
  std::string text;
  TokenKind kind;
};

// Gemma 3's leading tokens, ids 0..106.
std::vector<NamedToken> gemma3_leading_tokens() {
  std::vector<NamedToken> out = {{"<pad>", TokenKind::Control}, {"<eos>", TokenKind::Control},
                                 {"<bos>", TokenKind::Control}, {"<unk>", TokenKind::Unknown},
                                 {"<mask>", TokenKind::Control}, {"[multimodal]", TokenKind::Control}};
  for (int k = 0; k <= 98; ++k) out.push_back({fmt::format("<unused{}>", k), TokenKind::Control});
  out.push_back({"<start_of_turn>", TokenKind::Control});
  out.push_back({"<end_of_turn>", TokenKind::Control});
  return out;
}

// Runs of newlines (1..31), spaces (2..31) and tabs (1..31): user-defined tokens that are
// matched whole before SentencePiece runs. As llama.cpp's converter writes them, the space
// runs hold real spaces rather than "▁".
std::vector<std::string> gemma3_whitespace_runs() {
  std::vector<std::string> runs;
  for (int n = 1; n <= kMaxWhitespaceRun; ++n) runs.push_back(std::string(size_t(n), '\n'));
  for (int n = 2; n <= kMaxWhitespaceRun; ++n) runs.push_back(std::string(size_t(n), ' '));
  for (int n = 1; n <= kMaxWhitespaceRun; ++n) runs.push_back(std::string(size_t(n), '\t'));
  return runs;
}

// Single-character pieces: printable ASCII and "▁" always; letters of Latin-1, Greek and
// Cyrillic, kana and a sample of CJK ideographs as far as `room` allows (a quarter of it).
// Other characters fall back to <0xXX> byte tokens.
std::vector<std::string> gemma3_characters(int64_t room, Random& rng) {
  std::vector<std::string> chars;
  for (char c = '!'; c <= '~'; ++c) chars.push_back(std::string(1, c));
  chars.push_back(std::string(kSpaceMarker));
  std::vector<char32_t> extra;
  for (char32_t cp = 0xC0; cp <= 0xFF; ++cp) extra.push_back(cp);    // Latin-1 letters
  for (char32_t cp = 0x391; cp <= 0x3C9; ++cp) {
    if (cp != 0x3A2) extra.push_back(cp);  // Greek (U+03A2 is unassigned)
  }
  for (char32_t cp = 0x410; cp <= 0x44F; ++cp) extra.push_back(cp);  // Cyrillic
  for (char32_t cp = 0x3041; cp <= 0x3093; ++cp) extra.push_back(cp);  // hiragana
  for (char32_t cp = 0x30A1; cp <= 0x30F3; ++cp) extra.push_back(cp);  // katakana
  for (const char* s : {"\xE2\x80\x94", "\xE2\x80\x99", "\xE2\x80\x9C", "\xE2\x80\x9D", "\xE3\x80\x82",
                        "\xEF\xBC\x8C", "\xE4\xBD\xA0", "\xE5\xA5\xBD", "\xE4\xB8\x96", "\xE7\x95\x8C"}) {
    extra.push_back(utf8::decode_at(s, 0, 3));  // — ’ “ ” 。 ， 你 好 世 界
  }
  const size_t n_cjk = size_t(std::max<int64_t>(0, room) / 40);
  for (size_t i = 0; i < n_cjk; ++i) extra.push_back(char32_t(0x4E00 + rng.next() % (0x9FFF - 0x4E00)));
  const size_t n_extra = std::min(extra.size(), size_t(std::max<int64_t>(0, room) / 4));
  std::unordered_set<char32_t> seen;
  for (size_t i = 0; i < n_extra; ++i) {
    if (seen.insert(extra[i]).second) chars.push_back(utf8::encode(extra[i]));
  }
  return chars;
}

void add_sentencepiece_seed_merges(MergeBuilder& b, const std::vector<std::string>& chars) {
  add_words(b, kSpaceMarker);
  const std::string sp(kSpaceMarker);
  for (const std::string& p : {std::string("()"), std::string("();"), std::string("->"), std::string("::"),
                               std::string("//"), std::string("/*"), std::string("*/"), std::string("..."),
                               std::string("),"), std::string("],"), std::string("''"), std::string("\"\""),
                               std::string(".\""), std::string(",\""), std::string("'s"), std::string("'t"),
                               std::string("n't"), sp + "(", sp + "{", sp + "}", sp + "=", sp + "==", sp + "+",
                               sp + "-", sp + "*", sp + "\"", sp + "'", sp + "<", sp + "//", sp + "#"}) {
    b.add_with_prefixes(p);
  }
  // A space before a non-ASCII letter, and a few whole words, when those letters are pieces.
  for (const std::string& c : chars) {
    if (c.size() > 1 && c != sp) b.try_add(sp + c);
  }
  for (const char* w : {"caf\xC3\xA9", "\xD0\xBC\xD0\xB8\xD1\x80", "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82",
                        "\xCE\xBA\xCF\x8C\xCF\x83\xCE\xBC\xCE\xB5", "\xE4\xBD\xA0\xE5\xA5\xBD",
                        "\xE4\xB8\x96\xE7\x95\x8C"}) {
    b.add_with_prefixes(w);
    b.add_with_prefixes(sp + w);
  }
}

VocabSpec make_gemma3_vocab(int32_t n_vocab) {
  const SyntheticVocabStyle style = SyntheticVocabStyle::Gemma3;
  const std::vector<NamedToken> leading = gemma3_leading_tokens();
  const std::vector<std::string> runs = gemma3_whitespace_runs();
  const int64_t n_fixed = int64_t(leading.size() + runs.size()) + 256;
  Random rng(0x6E33A3ull);
  constexpr int64_t kAlwaysCharacters = 95;  // printable ASCII and "▁"
  const std::vector<std::string> chars = gemma3_characters(int64_t(n_vocab) - n_fixed - kAlwaysCharacters, rng);
  check_size(n_vocab, n_fixed + int64_t(chars.size()), style,
             fmt::format("{} special, {} whitespace runs, 256 bytes, {} characters", leading.size(), runs.size(),
                         chars.size()));

  std::vector<std::string> reserved = runs;
  for (const NamedToken& t : leading) reserved.push_back(t.text);
  for (int b = 0; b < 256; ++b) reserved.push_back(fmt::format("<0x{:02X}>", b));
  MergeBuilder builder(size_t(int64_t(n_vocab) - n_fixed), MergeRule::BestPiece, chars, reserved);
  add_sentencepiece_seed_merges(builder, chars);
  add_random_merges(builder, rng, kSpaceMarker);

  VocabSpec spec;
  spec.model = "llama";
  spec.pre = "default";
  auto push = [&](std::string text, TokenKind kind, float score) {
    spec.tokens.push_back(std::move(text));
    spec.token_types.push_back(int32_t(kind));
    spec.scores.push_back(score);
  };
  for (const NamedToken& t : leading) push(t.text, t.kind, 0.0f);
  for (const std::string& r : runs) push(r, TokenKind::UserDefined, 0.0f);
  for (int b = 0; b < 256; ++b) push(fmt::format("<0x{:02X}>", b), TokenKind::Byte, 0.0f);
  // Merged pieces score by merge order (best first), as SentencePiece's BPE trainer writes
  // them; single characters come last and never result from a merge.
  const size_t n_chars = chars.size();
  for (size_t rank = 0; rank < builder.n_merges(); ++rank) {
    push(builder.raw(int32_t(n_chars + rank)), TokenKind::Normal, -float(rank));
  }
  for (size_t i = 0; i < n_chars; ++i) push(chars[i], TokenKind::Normal, -float(builder.n_merges() + i));

  spec.pad_id = 0;
  spec.eos_id = 1;
  spec.bos_id = 2;
  spec.unk_id = 3;
  spec.add_bos = true;
  spec.add_eos = false;
  spec.add_space_prefix = false;
  spec.chat_template = std::string(kGemma3ChatTemplate);
  return spec;
}

}  // namespace

VocabSpec make_synthetic_bpe_vocab(int32_t n_vocab, SyntheticVocabStyle style) {
  switch (style) {
    case SyntheticVocabStyle::Qwen2:
    case SyntheticVocabStyle::Qwen3: return make_qwen_vocab(n_vocab, style);
    case SyntheticVocabStyle::Gemma3:
      fail("synthetic gemma3 vocabulary is SentencePiece, not byte-level BPE (make_synthetic_vocab builds it)");
    case SyntheticVocabStyle::SmolLM2:
    case SyntheticVocabStyle::Llama3:
    case SyntheticVocabStyle::GptOss: break;
  }
  const bool llama3 = style == SyntheticVocabStyle::Llama3, gpt_oss = style == SyntheticVocabStyle::GptOss;
  const bool specials_last = llama3 || gpt_oss;
  std::vector<std::string> specials =
      llama3    ? llama3_specials()
      : gpt_oss ? gpt_oss_specials()
                : std::vector<std::string>(std::begin(kSmolLM2Specials), std::end(kSmolLM2Specials));
  check_size(n_vocab, int64_t(specials.size()) + 256, style,
             fmt::format("{} special + 256 byte symbols", specials.size()));
  const int64_t n_regular = int64_t(n_vocab) - int64_t(specials.size());
  ByteLevelTokens regular =
      build_byte_level_tokens(n_regular, style, llama3 ? 0x11A3A3ull : gpt_oss ? 0x0200C0DEull : 0x5A011A2ull, specials);

  VocabSpec spec;
  spec.model = "gpt2";
  spec.pre = llama3 ? "llama-bpe" : gpt_oss ? "gpt-4o" : "smollm";
  const int32_t first_regular = specials_last ? 0 : int32_t(specials.size());
  const int32_t first_special = specials_last ? int32_t(n_regular) : 0;
  spec.tokens.resize(size_t(n_vocab));
  spec.token_types.assign(size_t(n_vocab), int32_t(TokenKind::Normal));
  for (size_t i = 0; i < specials.size(); ++i) {
    spec.tokens[size_t(first_special) + i] = specials[i];
    spec.token_types[size_t(first_special) + i] = int32_t(TokenKind::Control);
  }
  for (size_t id = 0; id < regular.tokens.size(); ++id) {
    spec.tokens[size_t(first_regular) + id] = std::move(regular.tokens[id]);
  }
  spec.merges = std::move(regular.merges);

  if (llama3) {
    spec.bos_id = first_special + 0;  // <|begin_of_text|>
    spec.eos_id = first_special + 1;  // <|end_of_text|>
    spec.pad_id = first_special + 4;  // <|finetune_right_pad_id|>
    spec.eom_id = first_special + 8;  // <|eom_id|>
    spec.eot_id = first_special + 9;  // <|eot_id|>
    spec.add_bos = true;
    spec.chat_template = std::string(kLlama3ChatTemplate);
  } else if (gpt_oss) {
    spec.bos_id = first_special + 0;   // <|startoftext|>
    spec.pad_id = first_special + 1;   // <|endoftext|>
    spec.eos_id = first_special + 4;   // <|return|>
    spec.eom_id = first_special + 14;  // <|call|>
    spec.add_bos = false;
    spec.chat_template = std::string(kGptOssChatTemplate);
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

VocabSpec make_synthetic_vocab(int32_t n_vocab, SyntheticVocabStyle style) {
  if (style == SyntheticVocabStyle::Gemma3) return make_gemma3_vocab(n_vocab);
  return make_synthetic_bpe_vocab(n_vocab, style);
}

}  // namespace nt
