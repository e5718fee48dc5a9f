#include "chat/jinja_parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "chat/jinja_builtins.h"
#include "core/error.h"

namespace nt::chat {
namespace {

// Chat templates come from model files: a hostile one must fail, not exhaust
// the stack in this recursive parser or in the evaluator walking its tree.
// jinja2 itself gives up far earlier (Python's recursion limit at about 65
// nested parentheses), so no template it renders comes near this.
constexpr int kMaxNesting = 400;

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string_view origin) : tokens_(std::move(tokens)), origin_(origin) {}

  Body parse_all() { return subparse({}); }

 private:
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& advance() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  [[noreturn]] void fail_at(Location at, const std::string& message) const {
    nt::fail("{} (line {}, column {}): {}", origin_, at.line, at.column, message);
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(current().where, message); }

  // One level deeper in the tree; undone by the caller (Nest) or at the end of a chain.
  void deeper() {
    if (++nesting_ > kMaxNesting) fail("template nested too deeply");
  }
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) { p_.deeper(); }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };
  // Each link of a left-associative chain (a + b + c, x|f|g, a.b.c) wraps the
  // tree so far: count it until the chain ends.
  class Chain {
   public:
    explicit Chain(Parser& p) : p_(p) {}
    void link() {
      p_.deeper();
      ++links_;
    }
    ~Chain() { p_.nesting_ -= links_; }
    Chain(const Chain&) = delete;
    Chain& operator=(const Chain&) = delete;

   private:
    Parser& p_;
    int links_ = 0;
  };

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::BlockEnd:
        return "end of statement block";
      case TokenType::VariableEnd:
        return "end of print statement";
      case TokenType::End:
        return "end of template";
      case TokenType::String:
        return "string";
      case TokenType::Integer:
        return "integer";
      case TokenType::Float:
        return "float";
      default:
        return t.text;
    }
  }

  bool at_name(std::string_view name) const { return current().type == TokenType::Name && current().text == name; }
  bool at_op(std::string_view op) const { return current().type == TokenType::Operator && current().text == op; }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    advance();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected token '{}', got '{}'", op, describe(current())));
  }
  std::string expect_name() {
    if (current().type != TokenType::Name) fail(fmt::format("expected token 'name', got '{}'", describe(current())));
    return advance().text;
  }
  void expect_name(std::string_view name) {
    if (!skip_name(name)) fail(fmt::format("expected token '{}', got '{}'", name, describe(current())));
  }
  void expect_block_end() {
    if (current().type != TokenType::BlockEnd)
      fail(fmt::format("expected token 'end of statement block', got '{}'", describe(current())));
    advance();
  }

  static ExprPtr node(Expr::Kind kind, Location where) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->where = where;
    return e;
  }
  static std::unique_ptr<Stmt> stmt(Stmt::Kind kind, Location where) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->where = where;
    return s;
  }

  // Statements up to a block whose first name is in `end_names`; returns with
  // that name as the current token (the block's start consumed).
  Body subparse(std::initializer_list<std::string_view> end_names) {
    Body body;
    while (true) {
      const Token& t = current();
      switch (t.type) {
        case TokenType::Text: {
          auto s = stmt(Stmt::Kind::Text, t.where);
          s->text = t.text;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenType::VariableBegin: {
          advance();
          auto s = stmt(Stmt::Kind::Print, t.where);
          s->expr = parse_tuple(true, true, {}, false);
          if (current().type != TokenType::VariableEnd)
            fail(fmt::format("expected token 'end of print statement', got '{}'", describe(current())));
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::BlockBegin: {
          advance();
          if (current().type == TokenType::Name &&
              std::find(end_names.begin(), end_names.end(), current().text) != end_names.end())
            return body;
          body.push_back(parse_statement());
          break;
        }
        case TokenType::End: {
          if (end_names.size() == 0) return body;
          std::string wanted;
          for (auto n : end_names) wanted += (wanted.empty() ? "'" : " or '") + std::string(n) + "'";
          fail(fmt::format("Unexpected end of template. Jinja was looking for the following tags: {}.", wanted));
        }
        default:
          fail(fmt::format("unexpected '{}'", describe(t)));
      }
    }
  }

  // The body up to `end_name`, consuming the closing tag.
  Body block_body(std::string_view end_name) {
    Body body = subparse({end_name});
    advance();
    expect_block_end();
    return body;
  }

  std::unique_ptr<Stmt> parse_statement() {
    Nest nest(*this);
    const Token& t = current();
    if (t.type != TokenType::Name) fail("tag name expected");
    std::string name = t.text;
    Location where = t.where;
    advance();
    if (name == "if") return parse_if(where);
    if (name == "for") return parse_for(where);
    if (name == "set") return parse_set(where);
    if (name == "macro") return parse_macro(where);
    if (name == "call") return parse_call_block(where);
    if (name == "filter") {
      auto s = stmt(Stmt::Kind::FilterBlock, where);
      s->expr = parse_filter(nullptr, true);
      expect_block_end();
      s->body = block_body("endfilter");
      return s;
    }
    if (name == "with") {
      auto s = stmt(Stmt::Kind::With, where);
      while (current().type != TokenType::BlockEnd) {
        if (!s->params.empty()) expect_op(",");
        std::string target = expect_name();
        expect_op("=");
        s->params.emplace_back(target, parse_expression(true));
      }
      expect_block_end();
      s->body = block_body("endwith");
      return s;
    }
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail_at(where, fmt::format("'{}' outside of a loop", name));
      expect_block_end();
      return stmt(name == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, where);
    }
    if (name == "generation") {
      auto s = stmt(Stmt::Kind::Generation, where);
      expect_block_end();
      s->body = block_body("endgeneration");
      return s;
    }
    fail_at(where, fmt::format("Encountered unknown tag '{}'.", name));
  }

  std::unique_ptr<Stmt> parse_if(Location where) {
    auto s = stmt(Stmt::Kind::If, where);
    ExprPtr condition = parse_tuple(false, true, {}, false);
    while (true) {
      expect_block_end();
      Body body = subparse({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(condition), std::move(body));
      std::string tag = advance().text;
      if (tag == "elif") {
        condition = parse_tuple(false, true, {}, false);
      } else if (tag == "else") {
        expect_block_end();
        s->branches.emplace_back(nullptr, block_body("endif"));
        return s;
      } else {
        expect_block_end();
        return s;
      }
    }
  }

  std::unique_ptr<Stmt> parse_for(Location where) {
    auto s = stmt(Stmt::Kind::For, where);
    s->target = parse_target(false);
    expect_name("in");
    s->expr = parse_tuple(false, true, {"recursive"}, false);
    if (skip_name("if")) s->condition = parse_expression(true);
    if (at_name("recursive")) fail("recursive loops are not supported");
    expect_block_end();
    ++loop_depth_;
    s->body = subparse({"endfor", "else"});
    --loop_depth_;
    if (advance().text == "else") {
      expect_block_end();
      s->else_body = block_body("endfor");
    } else {
      expect_block_end();
    }
    return s;
  }

  std::unique_ptr<Stmt> parse_set(Location where) {
    Target target = parse_target(true);
    if (skip_op("=")) {
      auto s = stmt(Stmt::Kind::Set, where);
      s->target = std::move(target);
      s->expr = parse_tuple(true, true, {}, false);
      expect_block_end();
      return s;
    }
    auto s = stmt(Stmt::Kind::SetBlock, where);
    s->target = std::move(target);
    if (at_op("|")) s->expr = parse_filter(nullptr, false);
    expect_block_end();
    s->body = block_body("endset");
    return s;
  }

  // A name or `ns.attr` (with_namespace: set only), or a tuple of them:
  // `k, v`, `(k, v)`, `ns.a, b`.
  Target parse_target(bool with_namespace) {
    Target target;
    bool parenthesized = skip_op("(");
    while (true) {
      Target::Item item{expect_name(), {}};
      if (with_namespace && skip_op(".")) item.attribute = expect_name();
      if (item.name == "true" || item.name == "false" || item.name == "none" || item.name == "True" ||
          item.name == "False" || item.name == "None")
        fail(fmt::format("can't assign to '{}'", item.name));
      target.items.push_back(std::move(item));
      if (!skip_op(",")) break;
      target.unpack = true;
      if (at_tuple_end({})) break;  // as jinja2: `for k, in x` reads `in` as a second name
    }
    if (parenthesized) expect_op(")");
    return target;
  }

  std::unique_ptr<Stmt> parse_macro(Location where) {
    auto s = stmt(Stmt::Kind::Macro, where);
    s->text = expect_name();
    parse_signature(s->params);
    expect_block_end();
    bool outer_varargs = std::exchange(uses_varargs_, false), outer_kwargs = std::exchange(uses_kwargs_, false);
    s->body = block_body("endmacro");
    s->uses_varargs = uses_varargs_;
    s->uses_kwargs = uses_kwargs_;
    uses_varargs_ = outer_varargs || uses_varargs_;
    uses_kwargs_ = outer_kwargs || uses_kwargs_;
    return s;
  }

  void parse_signature(std::vector<std::pair<std::string, ExprPtr>>& params) {
    expect_op("(");
    while (!at_op(")")) {
      if (!params.empty()) expect_op(",");
      if (at_op(")")) break;
      std::string name = expect_name();
      ExprPtr fallback;
      if (skip_op("="))
        fallback = parse_expression(true);
      else if (!params.empty() && params.back().second)
        fail("non-default argument follows default argument");
      params.emplace_back(name, std::move(fallback));
    }
    advance();
  }

  std::unique_ptr<Stmt> parse_call_block(Location where) {
    auto s = stmt(Stmt::Kind::CallBlock, where);
    if (at_op("(")) parse_signature(s->params);
    s->expr = parse_expression(true);
    if (s->expr->kind != Expr::Kind::Call) fail_at(s->expr->where, "expected call");
    expect_block_end();
    s->body = block_body("endcall");
    return s;
  }

  bool at_tuple_end(std::initializer_list<std::string_view> extra) const {
    const Token& t = current();
    if (t.type == TokenType::VariableEnd || t.type == TokenType::BlockEnd || t.type == TokenType::End) return true;
    if (t.type == TokenType::Operator && t.text == ")") return true;
    return t.type == TokenType::Name && std::find(extra.begin(), extra.end(), t.text) != extra.end();
  }

  ExprPtr parse_tuple(bool with_condexpr, bool allow_tuple, std::initializer_list<std::string_view> extra_end,
                      bool explicit_parentheses) {
    Location where = current().where;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
      if (at_op(",") && allow_tuple) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail(fmt::format("Expected an expression, got '{}'", describe(current())));
    }
    auto e = node(Expr::Kind::Tuple, where);
    e->operands = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Nest nest(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    Chain chain(*this);
    while (at_name("if")) {
      chain.link();
      Location where = advance().where;
      auto e = node(Expr::Kind::Conditional, where);
      e->operands.push_back(parse_or());
      e->operands.push_back(std::move(expr));
      e->operands.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr binary(Expr::Kind kind, ExprPtr left, ExprPtr right, Location where, std::string op = {}) {
    auto e = node(kind, where);
    e->name = std::move(op);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    Chain chain(*this);
    while (at_name("or")) {
      chain.link();
      Location where = advance().where;
      left = binary(Expr::Kind::Or, std::move(left), parse_and(), where);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    Chain chain(*this);
    while (at_name("and")) {
      chain.link();
      Location where = advance().where;
      left = binary(Expr::Kind::And, std::move(left), parse_not(), where);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Nest nest(*this);
      auto e = node(Expr::Kind::Not, advance().where);
      e->operands.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    Location where = current().where;
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (current().type == TokenType::Operator &&
          (at_op("==") || at_op("!=") || at_op("<") || at_op("<=") || at_op(">") || at_op(">="))) {
        op = advance().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (at_name("not") && peek().type == TokenType::Name && peek().text == "in") {
        advance();
        advance();
        op = "not in";
      } else {
        break;
      }
      if (!e) {
        e = node(Expr::Kind::Compare, where);
        e->operands.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->operands.push_back(parse_math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    Chain chain(*this);
    while (at_op("+") || at_op("-")) {
      chain.link();
      const Token& t = advance();
      left = binary(Expr::Kind::Binary, std::move(left), parse_concat(), t.where, t.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    Chain chain(*this);
    while (at_op("~")) {
      chain.link();
      const Token& t = advance();
      left = binary(Expr::Kind::Binary, std::move(left), parse_math2(), t.where, "~");
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    Chain chain(*this);
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      chain.link();
      const Token& t = advance();
      left = binary(Expr::Kind::Binary, std::move(left), parse_pow(), t.where, t.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    Chain chain(*this);
    while (at_op("**")) {
      chain.link();
      const Token& t = advance();
      left = binary(Expr::Kind::Binary, std::move(left), parse_unary(true), t.where, "**");
    }
    return left;
  }

  // As jinja2: a unary sign binds tighter than the filters after it (-x|abs is (-x)|abs).
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      const Token& t = advance();
      e = node(t.text == "-" ? Expr::Kind::Negate : Expr::Kind::Plus, t.where);
      e->operands.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = current();
    switch (t.type) {
      case TokenType::Name: {
        advance();
        auto e = node(Expr::Kind::Literal, t.where);
        if (t.text == "true" || t.text == "True")
          e->value = Value(true);
        else if (t.text == "false" || t.text == "False")
          e->value = Value(false);
        else if (t.text == "none" || t.text == "None")
          e->value = Value(nullptr);
        else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
          uses_varargs_ |= t.text == "varargs";
          uses_kwargs_ |= t.text == "kwargs";
        }
        return e;
      }
      case TokenType::String: {
        auto e = node(Expr::Kind::Literal, t.where);
        std::string s;
        while (current().type == TokenType::String) s += advance().text;  // adjacent literals concatenate
        e->value = Value(std::move(s));
        return e;
      }
      case TokenType::Integer: {
        advance();
        auto e = node(Expr::Kind::Literal, t.where);
        try {
          e->value = Value(int64_t(std::stoll(t.text)));
        } catch (const std::out_of_range&) {
          fail_at(t.where, "integer literal out of range");
        }
        return e;
      }
      case TokenType::Float: {
        advance();
        auto e = node(Expr::Kind::Literal, t.where);
        e->value = Value(std::strtod(t.text.c_str(), nullptr));  // as Python: denormals kept, overflow to inf
        return e;
      }
      case TokenType::Operator:
        if (t.text == "(") {
          advance();
          ExprPtr e = parse_tuple(true, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = node(Expr::Kind::List, advance().where);
          while (!at_op("]")) {
            if (!e->operands.empty()) expect_op(",");
            if (at_op("]")) break;
            e->operands.push_back(parse_expression(true));
          }
          advance();
          return e;
        }
        if (t.text == "{") {
          auto e = node(Expr::Kind::Dict, advance().where);
          while (!at_op("}")) {
            if (!e->operands.empty()) expect_op(",");
            if (at_op("}")) break;
            e->operands.push_back(parse_expression(true));
            expect_op(":");
            e->operands.push_back(parse_expression(true));
          }
          advance();
          return e;
        }
        break;
      default:
        break;
    }
    fail(fmt::format("unexpected '{}'", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Chain chain(*this);
    while (true) {
      chain.link();
      if (at_op(".") || at_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    Chain chain(*this);
    while (true) {
      chain.link();
      if (at_op("|")) {
        e = parse_filter(std::move(e), false);
      } else if (at_name("is")) {
        e = parse_test(std::move(e));
      } else if (at_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const Token& t = advance();
    if (t.text == ".") {
      const Token& attr = current();
      if (attr.type == TokenType::Name) {
        advance();
        auto e = node(Expr::Kind::GetAttr, t.where);
        e->name = attr.text;
        e->operands.push_back(std::move(object));
        return e;
      }
      if (attr.type == TokenType::Integer) {
        advance();
        auto e = node(Expr::Kind::GetItem, t.where);
        e->operands.push_back(std::move(object));
        auto index = node(Expr::Kind::Literal, attr.where);
        index->value = Value(int64_t(std::stoll(attr.text)));
        e->operands.push_back(std::move(index));
        return e;
      }
      fail("expected name or number");
    }
    // `[`: an index, a slice, or (as jinja2 allows) several indices or none,
    // which index by a tuple: x[] is x[()].
    if (at_op("]") || !at_op(":")) {
      std::vector<ExprPtr> keys;
      while (!at_op("]")) {
        if (!keys.empty()) expect_op(",");  // no trailing comma, as in jinja2
        if (at_op(":")) fail("slices inside a tuple index are not supported");
        keys.push_back(parse_expression(true));
        if (keys.size() == 1 && at_op(":")) return parse_slice(std::move(object), std::move(keys[0]), t.where);
      }
      advance();
      auto e = node(Expr::Kind::GetItem, t.where);
      e->operands.push_back(std::move(object));
      if (keys.size() == 1) {
        e->operands.push_back(std::move(keys[0]));
      } else {
        auto tuple = node(Expr::Kind::Tuple, t.where);
        tuple->operands = std::move(keys);
        e->operands.push_back(std::move(tuple));
      }
      return e;
    }
    return parse_slice(std::move(object), nullptr, t.where);
  }

  // The rest of `[start:stop:step]`, at the first colon.
  ExprPtr parse_slice(ExprPtr object, ExprPtr start, Location where) {
    auto e = node(Expr::Kind::Slice, where);
    e->operands.push_back(std::move(object));
    e->operands.push_back(std::move(start));
    for (int part = 0; part < 2; ++part) {
      if (!skip_op(":")) {
        e->operands.push_back(nullptr);
        continue;
      }
      e->operands.push_back(at_op(":") || at_op("]") ? nullptr : parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  // Arguments in parentheses, into e's operands (after those already there) and keywords.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!at_op(")")) {
      if (!first) {
        expect_op(",");
        if (at_op(")")) break;
      }
      first = false;
      if (skip_op("*")) {
        e.dyn_args = parse_expression(true);
      } else if (skip_op("**")) {
        e.dyn_kwargs = parse_expression(true);
      } else if (current().type == TokenType::Name && peek().type == TokenType::Operator && peek().text == "=") {
        std::string key = advance().text;
        advance();
        e.keywords.emplace_back(key, parse_expression(true));
      } else {
        if (!e.keywords.empty() || e.dyn_args || e.dyn_kwargs) fail("Invalid argument syntax");
        e.operands.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(Expr::Kind::Call, current().where);
    e->operands.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
    Chain chain(*this);
    while (at_op("|") || start_inline) {
      chain.link();
      if (!start_inline) advance();
      start_inline = false;
      Location where = current().where;
      auto e = node(Expr::Kind::Filter, where);
      e->name = expect_name();
      while (at_op(".")) {
        advance();
        e->name += "." + expect_name();
      }
      e->operands.push_back(std::move(input));
      if (at_op("(")) parse_call_args(*e);
      input = std::move(e);
    }
    return input;
  }

  ExprPtr parse_test(ExprPtr input) {
    Location where = advance().where;
    bool negated = skip_name("not");
    auto e = node(Expr::Kind::Test, where);
    e->name = expect_name();
    while (at_op(".")) {
      advance();
      e->name += "." + expect_name();
    }
    e->operands.push_back(std::move(input));
    const Token& t = current();
    bool argument_start = t.type == TokenType::Name || t.type == TokenType::String || t.type == TokenType::Integer ||
                          t.type == TokenType::Float ||
                          (t.type == TokenType::Operator && (t.text == "[" || t.text == "{"));
    if (at_op("(")) {
      parse_call_args(*e);
    } else if (argument_start && !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) fail("You cannot chain multiple tests with is");
      e->operands.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = node(Expr::Kind::Not, where);
    n->operands.push_back(std::move(e));
    return n;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  std::string_view origin_;
  int loop_depth_ = 0;
  int nesting_ = 0;                                  // bounds the tree's height: recursion plus operator chains
  bool uses_varargs_ = false, uses_kwargs_ = false;  // names read by the macro being parsed
};

// jinja2 rejects an unknown filter or test when it compiles the template,
// except inside an {% if %} (its tests and bodies) or an inline `a if c else
// b`, where it fails only if evaluated; for, macro, call, filter, with and
// block-set bodies start a fresh compile frame that is strict again.
class NameCheck {
 public:
  explicit NameCheck(std::string_view origin) : origin_(origin) {}

  void body(const Body& stmts, bool soft) {
    for (const auto& s : stmts) stmt(*s, soft);
  }

 private:
  void stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case Stmt::Kind::If:
        for (const auto& [condition, branch] : s.branches) {
          expr(condition.get(), true);
          body(branch, true);
        }
        return;
      case Stmt::Kind::For:
        expr(s.expr.get(), soft);
        expr(s.condition.get(), false);
        body(s.body, false);
        body(s.else_body, false);
        return;
      case Stmt::Kind::Print:
      case Stmt::Kind::Set:
      case Stmt::Kind::CallBlock:
        expr(s.expr.get(), soft);
        break;
      case Stmt::Kind::SetBlock:
      case Stmt::Kind::FilterBlock:
        expr(s.expr.get(), false);
        break;
      case Stmt::Kind::With:
        for (const auto& [name, value] : s.params) expr(value.get(), soft);
        break;
      default:
        break;
    }
    for (const auto& [name, value] : s.params)
      if (s.kind != Stmt::Kind::With) expr(value.get(), false);
    body(s.body, false);
  }

  void expr(const Expr* e, bool soft) {
    if (!e) return;
    if (e->kind == Expr::Kind::Conditional) soft = true;
    if (!soft && e->kind == Expr::Kind::Filter && !has_filter(e->name)) fail(e, "filter");
    if (!soft && e->kind == Expr::Kind::Test && !has_test(e->name)) fail(e, "test");
    for (const auto& operand : e->operands) expr(operand.get(), soft);
    for (const auto& [name, value] : e->keywords) expr(value.get(), soft);
    expr(e->dyn_args.get(), soft);
    expr(e->dyn_kwargs.get(), soft);
  }

  [[noreturn]] void fail(const Expr* e, std::string_view what) const {
    nt::fail("{} (line {}, column {}): No {} named '{}'.", origin_, e->where.line, e->where.column, what, e->name);
  }

  std::string_view origin_;
};

}  // namespace

Body parse_template(std::string_view source, std::string_view origin) {
  Body body = Parser(tokenize(source, origin), origin).parse_all();
  NameCheck(origin).body(body, false);
  return body;
}

}  // namespace nt::chat
