#include "chat/jinja_strings.h"

#include <fmt/format.h>

#include <algorithm>

#include "chat/jinja_value.h"

namespace nt::chat {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto b = uint8_t(s[i]);
    int extra = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
    if (extra < 0 || i + size_t(extra) >= s.size()) {  // not UTF-8: keep the byte as a code point
      out.push_back(b);
      ++i;
      continue;
    }
    char32_t c = extra == 0 ? b : extra == 1 ? (b & 0x1F) : extra == 2 ? (b & 0x0F) : (b & 0x07);
    bool ok = true;
    for (int k = 1; k <= extra; ++k) {
      auto cont = uint8_t(s[i + k]);
      if ((cont & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      c = (c << 6) | (cont & 0x3F);
    }
    if (!ok) {
      out.push_back(b);
      ++i;
      continue;
    }
    out.push_back(c);
    i += extra + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Case mapping for ASCII, Latin-1, Greek and Cyrillic: the scripts chat
// templates and test conversations use; other code points map to themselves.
char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

static bool is_cased(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  return !is_python_space(c);
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_python_space(c); };
  bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return uint8_t(c) < 0x80; });
  if (ascii && (!chars || std::all_of(chars->begin(), chars->end(), [](char c) { return uint8_t(c) < 0x80; }))) {
    size_t b = 0, e = s.size();
    if (left)
      while (b < e && strip_it(uint8_t(s[b]))) ++b;
    if (right)
      while (e > b && strip_it(uint8_t(s[e - 1]))) --e;
    return std::string(s.substr(b, e - b));
  }
  std::u32string u = utf8_decode(s);
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::string py_upper(std::string_view s) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = to_upper(c);
  return utf8_encode(u);
}

std::string py_lower(std::string_view s) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = to_lower(c);
  return utf8_encode(u);
}

std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_upper(u[i]) : to_lower(u[i]);
  return utf8_encode(u);
}

std::string py_title(std::string_view s) {
  std::u32string u = utf8_decode(s);
  bool previous_cased = false;
  for (auto& c : u) {
    if (is_cased(c)) {
      c = previous_cased ? to_lower(c) : to_upper(c);
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return utf8_encode(u);
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) render_fail("ValueError: empty separator");
    size_t start = 0;
    while (maxsplit < 0 || int64_t(out.size()) < maxsplit) {
      size_t at = s.find(*sep, start);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + sep->size();
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::u32string u = utf8_decode(s);
  size_t i = 0;
  while (true) {
    while (i < u.size() && is_python_space(u[i])) ++i;
    if (i == u.size()) break;
    if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
      out.push_back(utf8_encode(std::u32string_view(u).substr(i)));  // the rest keeps its trailing space
      break;
    }
    size_t j = i;
    while (j < u.size() && !is_python_space(u[j])) ++j;
    out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
  }
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) render_fail("ValueError: empty separator");
    size_t end = s.size();
    while (int64_t(out.size()) < maxsplit) {
      size_t at = end < sep->size() ? std::string_view::npos : s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::u32string u = utf8_decode(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && is_python_space(u[e - 1])) --e;
      if (e == 0) break;
      if (int64_t(out.size()) == maxsplit) {
        out.push_back(utf8_encode(std::u32string_view(u).substr(0, e)));  // the rest keeps its leading space
        break;
      }
      size_t b = e;
      while (b > 0 && !is_python_space(u[b - 1])) --b;
      out.push_back(utf8_encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> out;
  std::u32string u = utf8_decode(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!is_break) continue;
    out.push_back(utf8_encode(std::u32string_view(u).substr(start, i - start)));
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) out.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement between every character and at both ends.
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i < u.size()) utf8_append(out, u[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(replacement);
    start = at + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

size_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return utf8_length(s) + 1;
  size_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string_view::npos) return -1;
  return int64_t(utf8_length(s.substr(0, at)));
}

// Code points Python's str.isprintable() rejects, among those likely in chat
// text: controls, Latin-1 controls and no-break space, and the format and
// separator characters.
static bool is_unprintable(char32_t c) {
  return c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD || (c >= 0x2000 && c <= 0x200F) ||
         (c >= 0x2028 && c <= 0x202F) || (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF ||
         (c >= 0xD800 && c <= 0xDFFF);
}

std::string py_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_unprintable(c)) {
      out += c <= 0xFF ? fmt::format("\\x{:02x}", uint32_t(c)) : fmt::format("\\u{:04x}", uint32_t(c));
    } else {
      utf8_append(out, c);
    }
  }
  out += quote;
  return out;
}

}  // namespace nt::chat
