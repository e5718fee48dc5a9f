// The template's syntax tree and the parser that builds it from tokens,
// following jinja2's grammar and operator precedence.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/jinja_lexer.h"
#include "chat/jinja_value.h"

namespace nt::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,      // value
    Name,         // name
    List,         // operands: items
    Tuple,        // operands: items
    Dict,         // operands: key, value, key, value...
    GetAttr,      // operands[0].name
    GetItem,      // operands[0][operands[1]]
    Slice,        // operands[0][operands[1]:operands[2]:operands[3]], each bound may be null
    Call,         // operands[0](operands[1..], keywords, *dyn_args, **dyn_kwargs)
    Filter,       // operands[0] | name(operands[1..], keywords); operands[0] null in filter blocks
    Test,         // operands[0] is name(operands[1..], keywords)
    Not,          // operands[0]
    Negate,       // -operands[0]
    Plus,         // +operands[0]
    Binary,       // operands[0] name operands[1], name one of + - * / // % ** ~
    Compare,      // operands[0] ops[0] operands[1] ops[1] ... (chained like Python)
    And,          // operands[0] and operands[1]
    Or,           // operands[0] or operands[1]
    Conditional,  // operands[1] if operands[0] else operands[2] (null: undefined)
  };
  Kind kind;
  Location where;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> ops;
  ExprPtr dyn_args, dyn_kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

// What `for` and `set` assign to: a name, a namespace attribute `ns.attr`
// (set only), or a tuple of them to unpack into.
struct Target {
  struct Item {
    std::string name;
    std::string attribute;  // set when the item is name.attribute
  };
  std::vector<Item> items;
  bool unpack = false;
};

struct Stmt {
  enum class Kind {
    Text,         // text
    Print,        // {{ expr }}
    If,           // branches (a null condition is the else branch)
    For,          // for target in expr [if condition]: body, else_body
    Set,          // set target = expr
    SetBlock,     // set target [| expr filters] ... endset: body
    Macro,        // macro text(params): body
    CallBlock,    // call(params) expr: body is the caller
    FilterBlock,  // filter expr: body
    With,         // with params: body
    Break,
    Continue,
    Generation,  // transformers' {% generation %}: renders its body
  };
  Kind kind;
  Location where;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default or value may be null
  bool uses_varargs = false;  // macro: its body reads varargs / kwargs, so extra arguments are accepted
  bool uses_kwargs = false;
};

// Fails with nt::Error naming `origin`, the line and the column.
Body parse_template(std::string_view source, std::string_view origin);

}  // namespace nt::chat
