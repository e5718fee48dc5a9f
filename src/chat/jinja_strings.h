// Python str semantics over UTF-8 bytes: templates index, slice, strip and
// case-map by code point, so these helpers decode where Python would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nt::chat {

std::u32string utf8_decode(std::string_view s);  // invalid bytes decode as themselves (U+0080..U+00FF)
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t c);
size_t utf8_length(std::string_view s);

bool is_python_space(char32_t c);  // str.isspace()
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
bool is_alpha(char32_t c);  // letters with a case, plus any non-ASCII non-space (approximates str.isalpha)

// str.strip/lstrip/rstrip: `chars` none means whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);  // str.capitalize()
std::string py_title(std::string_view s);       // str.title()
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> py_splitlines(std::string_view s);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count);
size_t py_count(std::string_view s, std::string_view sub);
// str.find in code points (-1 when absent).
int64_t py_find(std::string_view s, std::string_view sub, bool reverse);
// Python's repr() of a str: single quotes unless only double quotes avoid escaping.
std::string py_repr(std::string_view s);

}  // namespace nt::chat
