// Splits template source into text and tag tokens the way jinja2's lexer does
// with trim_blocks and lstrip_blocks on (transformers' settings): newlines
// normalized to \n, one trailing newline dropped, `-`/`+` whitespace control,
// comments and {% raw %} resolved here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nt::chat {

struct Location {
  int line = 1;
  int column = 1;
};

enum class TokenType {
  Text,
  VariableBegin,
  VariableEnd,
  BlockBegin,
  BlockEnd,
  Name,
  String,
  Integer,
  Float,
  Operator,
  End
};

struct Token {
  TokenType type;
  std::string text;  // text data, a name, an operator, a decoded string literal or a number's digits
  Location where;
};

// Fails with nt::Error naming `origin` and the line and column on bad input.
std::vector<Token> tokenize(std::string_view source, std::string_view origin);

}  // namespace nt::chat
