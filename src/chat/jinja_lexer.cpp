#include "chat/jinja_lexer.h"

#include <algorithm>

#include "chat/jinja_strings.h"
#include "core/error.h"

namespace nt::chat {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::string_view source, std::string_view origin) : origin_(origin) {
    // jinja2 splits on \r\n, \r and \n, rejoins with \n and drops one trailing newline.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        src_ += '\n';
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous match ended a line: lstrip may apply at its start
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit(TokenType::Text, src_.substr(pos), pos);
        break;
      }
      char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
      if (sign) ++after;
      size_t raw_end = kind == '%' ? match_word_tag(after, "raw", false) : std::string::npos;

      std::string text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (sign != '+' && kind != '{') {
        size_t line_start = text.rfind('\n') + 1;  // npos + 1 == 0
        if ((line_start > 0 || line_starting) && line_start < text.size() &&
            only_space(std::string_view(text).substr(line_start)))
          text.resize(line_start);
      }
      emit(TokenType::Text, text, pos);

      if (raw_end != std::string::npos) {
        pos = lex_raw(raw_end, line_starting);
      } else if (kind == '#') {
        pos = lex_comment(after, tag, line_starting);
      } else {
        pos = lex_tag(kind, tag, after, line_starting);
      }
    }
    tokens_.push_back(Token{TokenType::End, "", location(src_.size())});
    return std::move(tokens_);
  }

 private:
  Location location(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    size_t line = it - line_starts_.begin();
    return Location{int(line), int(pos - line_starts_[line - 1] + 1)};
  }

  [[noreturn]] void fail_at(size_t pos, const std::string& message) const {
    Location at = location(pos);
    nt::fail("{} (line {}, column {}): {}", origin_, at.line, at.column, message);
  }

  void emit(TokenType type, std::string text, size_t pos) {
    if (type == TokenType::Text && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), location(pos)});
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // Python's \s matches Unicode spaces (U+00A0, U+3000, ...), so whitespace
  // is decoded, not tested byte by byte.
  static bool only_space(std::string_view text) { return py_strip(text, std::nullopt, true, false).empty(); }

  size_t space_length(size_t pos) const {
    auto b = uint8_t(src_[pos]);
    if (b < 0x80) return is_python_space(b) ? 1 : 0;
    size_t n = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
    std::u32string c = utf8_decode(std::string_view(src_).substr(pos, n));
    return c.size() == 1 && is_python_space(c[0]) ? n : 0;
  }

  size_t skip_space(size_t pos) const {
    while (pos < src_.size())
      if (size_t n = space_length(pos))
        pos += n;
      else
        break;
    return pos;
  }

  // `\s*WORD\s*` then the block end (with trim_blocks' newline when `trim`):
  // the position after it, or npos. Used for {% raw %} and {% endraw %}.
  size_t match_word_tag(size_t pos, std::string_view word, bool trim) const {
    pos = skip_space(pos);
    if (src_.compare(pos, word.size(), word) != 0) return std::string::npos;
    pos = skip_space(pos + word.size());
    if (src_.compare(pos, 3, "-%}") == 0) return skip_space(pos + 3);
    if (trim && src_.compare(pos, 3, "+%}") == 0) return pos + 3;
    if (src_.compare(pos, 2, "%}") == 0) {
      pos += 2;
      if (trim && pos < src_.size() && src_[pos] == '\n') ++pos;
      return pos;
    }
    return std::string::npos;
  }

  size_t lex_raw(size_t pos, bool& line_starting) {
    for (size_t tag = src_.find("{%", pos); tag != std::string::npos; tag = src_.find("{%", tag + 1)) {
      size_t after = tag + 2;
      char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after] : 0;
      size_t end = match_word_tag(after + (sign ? 1 : 0), "endraw", true);
      if (end == std::string::npos) continue;
      std::string text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        text = py_strip(text, std::nullopt, false, true);
      } else if (sign != '+') {
        size_t line_start = text.rfind('\n') + 1;
        if (line_start > 0 && line_start < text.size() && only_space(std::string_view(text).substr(line_start)))
          text.resize(line_start);
      }
      emit(TokenType::Text, text, pos);
      line_starting = src_[end - 1] == '\n';
      return end;
    }
    fail_at(pos, "Missing end of raw directive");
  }

  size_t lex_comment(size_t pos, size_t tag, bool& line_starting) {
    size_t close = src_.find("#}", pos);
    if (close == std::string::npos) fail_at(tag, "Missing end of comment tag");
    char sign = close > pos && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    size_t end = close + 2;
    if (sign == '-') {
      end = skip_space(end);
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;  // trim_blocks
    }
    line_starting = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(char kind, size_t tag, size_t pos, bool& line_starting) {
    bool block = kind == '%';
    emit(block ? TokenType::BlockBegin : TokenType::VariableBegin, "", tag);
    std::string closers;  // brackets still open: a tag end inside them is an operator
    while (true) {
      if (pos >= src_.size())
        fail_at(tag, block ? "unexpected end of template, expected end of block"
                           : "unexpected end of template, expected end of print statement");
      if (closers.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (src_.compare(pos, 3, "+%}") == 0) {
            end = pos + 3;
          } else if (src_.compare(pos, 3, "-%}") == 0) {
            end = skip_space(pos + 3);
          } else if (src_.compare(pos, 2, "%}") == 0) {
            end = pos + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
          }
        } else if (src_.compare(pos, 3, "-}}") == 0) {
          end = skip_space(pos + 3);
        } else if (src_.compare(pos, 2, "}}") == 0) {
          end = pos + 2;
        }
        if (end != std::string::npos) {
          emit(block ? TokenType::BlockEnd : TokenType::VariableEnd, "", pos);
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      char c = src_[pos];
      if (size_t n = space_length(pos)) {
        pos += n;
      } else if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t end = pos;
        while (end < src_.size() && is_name_char(src_[end])) ++end;
        emit(TokenType::Name, src_.substr(pos, end - pos), pos);
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, closers);
      }
    }
  }

  size_t digits(size_t pos, bool (*accept)(char)) const {
    // `(\d+_)*\d+`: underscores only between digits
    while (pos < src_.size() &&
           (accept(src_[pos]) || (src_[pos] == '_' && pos + 1 < src_.size() && accept(src_[pos + 1]))))
      ++pos;
    return pos;
  }

  size_t lex_number(size_t start) {
    auto clean = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    char next = start + 1 < src_.size() ? char(src_[start + 1] | 0x20) : 0;
    if (src_[start] == '0' && (next == 'x' || next == 'o' || next == 'b')) {
      bool (*accept)(char) = next == 'x'
                                 ? +[](char c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }
                             : next == 'o' ? +[](char c) { return c >= '0' && c <= '7'; }
                                           : +[](char c) { return c == '0' || c == '1'; };
      size_t end = start + 2;
      if (end < src_.size() && src_[end] == '_') ++end;
      end = digits(end, accept);
      std::string text = clean(src_.substr(start, end - start));
      emit(TokenType::Integer,
           std::to_string(std::stoll(text.substr(2), nullptr,
                                     next == 'x'   ? 16
                                     : next == 'o' ? 8
                                                   : 2)),
           start);
      return end;
    }
    size_t end = digits(start, is_digit);
    bool after_dot = start > 0 && src_[start - 1] == '.';  // `x.0.1` is two subscripts, not a float
    bool is_float = false;
    size_t float_end = end;
    if (!after_dot) {
      if (float_end + 1 < src_.size() && src_[float_end] == '.' && is_digit(src_[float_end + 1])) {
        float_end = digits(float_end + 1, is_digit);
        is_float = true;
      }
      if (float_end < src_.size() && (src_[float_end] | 0x20) == 'e') {
        size_t e = float_end + 1;
        if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
        if (e < src_.size() && is_digit(src_[e])) {
          float_end = digits(e, is_digit);
          is_float = true;
        }
      }
    }
    if (is_float) {
      emit(TokenType::Float, clean(src_.substr(start, float_end - start)), start);
      return float_end;
    }
    emit(TokenType::Integer, clean(src_.substr(start, end - start)), start);
    return end;
  }

  // Python's unicode-escape decoding of a string literal's body.
  size_t lex_string(size_t start) {
    char quote = src_[start];
    std::string out;
    size_t pos = start + 1;
    while (true) {
      if (pos >= src_.size()) fail_at(start, "unexpected char '" + std::string(1, quote) + "'");
      char c = src_[pos];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++pos;
        continue;
      }
      if (pos + 1 >= src_.size()) fail_at(start, "unterminated string");
      char e = src_[pos + 1];
      pos += 2;
      auto hex = [&](int count) {
        if (pos + count > src_.size()) fail_at(start, "truncated \\x escape");
        char32_t value = 0;
        for (int i = 0; i < count; ++i) {
          char h = src_[pos + i];
          int d = is_digit(h) ? h - '0' : ((h | 0x20) >= 'a' && (h | 0x20) <= 'f') ? (h | 0x20) - 'a' + 10 : -1;
          if (d < 0) fail_at(start, "truncated escape in string literal");
          value = value * 16 + d;
        }
        pos += count;
        utf8_append(out, value);
      };
      switch (e) {
        case '\n':
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case 'a':
          out += '\a';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'v':
          out += '\v';
          break;
        case 'x':
          hex(2);
          break;
        case 'u':
          hex(4);
          break;
        case 'U':
          hex(8);
          break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t value = e - '0';
            for (int i = 0; i < 2 && pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '7'; ++i)
              value = value * 8 + (src_[pos++] - '0');
            utf8_append(out, value);
          } else {
            out += '\\';  // Python keeps unknown escapes as written
            out += e;
          }
      }
    }
    emit(TokenType::String, std::move(out), start);
    return pos + 1;
  }

  size_t lex_operator(size_t pos, std::string& closers) {
    static constexpr std::string_view two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (auto op : two) {
      if (src_.compare(pos, 2, op) == 0) {
        emit(TokenType::Operator, std::string(op), pos);
        return pos + 2;
      }
    }
    char c = src_[pos];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
      fail_at(pos, fmt::format("unexpected char '{}'", c));
    if (c == '(' || c == '[' || c == '{') {
      closers += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (closers.empty()) fail_at(pos, fmt::format("unexpected '{}'", c));
      if (closers.back() != c) fail_at(pos, fmt::format("unexpected '{}', expected '{}'", c, closers.back()));
      closers.pop_back();
    }
    emit(TokenType::Operator, std::string(1, c), pos);
    return pos + 1;
  }

  std::string src_;
  std::string_view origin_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, std::string_view origin) { return Lexer(source, origin).run(); }

}  // namespace nt::chat
