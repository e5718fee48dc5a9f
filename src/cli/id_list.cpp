#include "cli/id_list.h"

#include <charconv>
#include <filesystem>

#include "core/error.h"
#include "core/read_file.h"

namespace nt::cli {
namespace {

bool is_separator(char c) { return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::vector<int32_t> parse_ids(std::string_view text, std::string_view flag, std::string_view source) {
  if (const size_t open = text.find_first_not_of(" \t\r\n"); open != text.npos && text[open] == '[') {
    const size_t close = text.find_last_not_of(" \t\r\n");
    if (text[close] != ']') fail("{}: {} opens a '[' that is not closed", flag, source);
    text = text.substr(open + 1, close - open - 1);
  }
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    if (is_separator(text[pos])) {
      ++pos;
      continue;
    }
    size_t end = pos;
    while (end < text.size() && !is_separator(text[end])) ++end;
    const std::string_view item = text.substr(pos, end - pos);
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (ec != std::errc() || ptr != item.data() + item.size()) {
      fail("{}: item {} of {}, '{}', is not a token id", flag, ids.size() + 1, source, item);
    }
    ids.push_back(id);
    pos = end;
  }
  if (ids.empty()) fail("{}: {} holds no token ids", flag, source);
  return ids;
}

}  // namespace

std::vector<int32_t> read_id_list(const std::string& value, std::string_view flag) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(value, ec)) return parse_ids(read_file(value), flag, "'" + value + "'");
  return parse_ids(value, flag, "the list");
}

void check_ids_in_vocabulary(const std::vector<int32_t>& ids, int64_t vocab_size, std::string_view flag) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      fail("{}: id {} (item {}) is outside the vocabulary ({} tokens)", flag, ids[i], i + 1, vocab_size);
    }
  }
}

}  // namespace nt::cli
