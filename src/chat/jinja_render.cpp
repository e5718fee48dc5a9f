#include "chat/jinja_render.h"

#include <fmt/format.h>

#include <chrono>

#include "chat/jinja_builtins.h"
#include "core/error.h"

namespace nt::chat {
namespace {

// Python's recursion limit stops runaway templates; these bound our stack the
// same way, well above what jinja2 itself reaches (about 150 nested macro calls).
constexpr int kMaxCallDepth = 500;
constexpr int kMaxEvalDepth = 3000;  // nested expression evaluations, across macro calls
// The sandbox's MAX_RANGE.
constexpr int64_t kMaxRange = 100000;

class Renderer {
 public:
  Renderer(const Value& context, std::string_view origin, const RenderOptions& options)
      : context_(context), origin_(origin), options_(options) {
    add_globals();
  }

  std::string run(const Body& body) {
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };

  // Scopes are shared because macros and `caller` keep the scope they were
  // defined in (Python closures); they hold it weakly, so a scope holding
  // its own macro is no cycle.
  struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;

    Value* find(std::string_view name) {
      for (auto& [k, v] : vars)
        if (k == name) return &v;
      return nullptr;
    }
    void set(const std::string& name, Value value) {
      if (Value* v = find(name))
        *v = std::move(value);
      else
        vars.emplace_back(name, std::move(value));
    }
  };

  // Makes `scope` current until destroyed.
  class Enter {
   public:
    Enter(Renderer& r, std::shared_ptr<Scope> scope) : r_(r), saved_(std::move(r.scope_)) {
      r.scope_ = std::move(scope);
    }
    ~Enter() { r_.scope_ = std::move(saved_); }
    Enter(const Enter&) = delete;
    Enter& operator=(const Enter&) = delete;

   private:
    Renderer& r_;
    std::shared_ptr<Scope> saved_;
  };

  // A new scope inside `parent`.
  static std::shared_ptr<Scope> child_of(std::shared_ptr<Scope> parent) {
    auto scope = std::make_shared<Scope>();
    scope->parent = std::move(parent);
    return scope;
  }

  // A callable running `s` (a macro, or a call block's body as `caller`)
  // over the scope current now, as long as that scope lives.
  Value closure(const Stmt& s, const std::string& name) {
    std::weak_ptr<Scope> home = scope_;
    return Value::function(name, [this, &s, home](CallArgs& args) {
      std::shared_ptr<Scope> parent = home.lock();
      return call_macro(s, args, parent ? parent : root_);
    });
  }

  [[noreturn]] void fail_at(const Location& at, const std::string& message) const {
    nt::fail("{} (line {}, column {}): {}", origin_, at.line, at.column, message);
  }

  Flow exec(const Body& body, std::string& out) {
    for (const auto& s : body) {
      Flow flow;
      try {
        flow = exec_stmt(*s, out);
      } catch (const RenderFailure& f) {
        fail_at(s->where, f.message);
      }
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec_stmt(const Stmt& s, std::string& out) {
    switch (s.kind) {
      case Stmt::Kind::Text:
        out += s.text;
        return Flow::Normal;
      case Stmt::Kind::Print:
        out += eval(*s.expr).to_str();
        return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& [condition, body] : s.branches)
          if (!condition || eval(*condition).truthy()) return exec(body, out);
        return Flow::Normal;
      case Stmt::Kind::For:
        return exec_for(s, out);
      case Stmt::Kind::Set:
        assign(s.target, eval(*s.expr));
        return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        Value text(capture(s.body));
        assign(s.target, s.expr ? filter_block(*s.expr, text) : text);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        scope_->set(s.text, closure(s, s.text));
        return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        Value caller = closure(s, "caller");
        out += eval_call(*s.expr, &caller).to_str();
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock:
        out += filter_block(*s.expr, Value(capture(s.body))).to_str();
        return Flow::Normal;
      case Stmt::Kind::With: {
        auto inner = child_of(scope_);
        for (const auto& [name, value] : s.params) inner->vars.emplace_back(name, eval(*value));
        Enter enter(*this, inner);
        return exec(s.body, out);
      }
      case Stmt::Kind::Break:
        return Flow::Break;
      case Stmt::Kind::Continue:
        return Flow::Continue;
      case Stmt::Kind::Generation:
        return exec(s.body, out);
    }
    return Flow::Normal;
  }

  std::string capture(const Body& body) {
    std::string text;
    exec(body, text);
    return text;
  }

  Value filter_block(const Expr& filters, const Value& text) {
    const Value* saved = filter_input_;
    filter_input_ = &text;
    Value result = eval(filters);
    filter_input_ = saved;
    return result;
  }

  Flow exec_for(const Stmt& s, std::string& out) {
    std::vector<Value> items = eval(*s.expr).iterate();
    if (s.condition) {
      std::vector<Value> kept;
      for (auto& item : items) {
        Enter enter(*this, child_of(scope_));
        assign(s.target, item);
        if (eval(*s.condition).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Enter enter(*this, child_of(scope_));  // jinja2 scopes the else block like the body
      return exec(s.else_body, out);
    }
    auto last_changed = std::make_shared<Value>();  // loop.changed's memory, shared by the iterations
    for (size_t i = 0; i < items.size(); ++i) {
      auto iteration = child_of(scope_);
      Enter enter(*this, iteration);
      assign(s.target, items[i]);
      iteration->set("loop", loop_object(items, i, last_changed));
      if (exec(s.body, out) == Flow::Break) break;
    }
    return Flow::Normal;
  }

  static Value loop_object(const std::vector<Value>& items, size_t i, const std::shared_ptr<Value>& last_changed) {
    int64_t n = int64_t(items.size()), index = int64_t(i);
    auto loop = std::make_shared<DictData>();
    auto add = [&](const char* name, Value v) { loop->entries.emplace_back(Value(name), std::move(v)); };
    add("index", Value(index + 1));
    add("index0", Value(index));
    add("revindex", Value(n - index));
    add("revindex0", Value(n - index - 1));
    add("first", Value(i == 0));
    add("last", Value(index == n - 1));
    add("length", Value(n));
    add("depth", Value(1));
    add("depth0", Value(0));
    add("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    add("nextitem", index + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    add("cycle", Value::function("cycle", [index](CallArgs& args) {
          if (args.positional.empty()) render_fail("TypeError: no items for cycling given");
          return args.positional[size_t(index) % args.positional.size()];
        }));
    add("changed", Value::function("changed", [last_changed](CallArgs& args) {
          Value now = Value::new_list(args.positional, true);
          if (values_equal(*last_changed, now)) return Value(false);
          *last_changed = std::move(now);
          return Value(true);
        }));
    return Value(std::move(loop));
  }

  void assign(const Target& target, Value value) {
    if (!target.unpack) {
      assign_item(target.items[0], std::move(value));
      return;
    }
    std::vector<Value> parts = value.iterate();
    if (parts.size() != target.items.size())
      render_fail(fmt::format("ValueError: {} values to unpack (expected {}, got {})",
                              parts.size() > target.items.size() ? "too many" : "not enough", target.items.size(),
                              parts.size()));
    for (size_t i = 0; i < parts.size(); ++i) assign_item(target.items[i], std::move(parts[i]));
  }

  void assign_item(const Target::Item& item, Value value) {
    if (item.attribute.empty()) {
      scope_->set(item.name, std::move(value));
      return;
    }
    Value ns = lookup(item.name);
    if (!ns.is_dict() || !ns.dict().is_namespace)
      render_fail("TemplateRuntimeError: cannot assign attribute on non-namespace object");
    if (item.attribute[0] == '_')
      render_fail(
          fmt::format("SecurityError: Chat templates cannot store underscore-prefixed attributes on a "
                      "namespace, but got '{}'. Please rename the attribute.",
                      item.attribute));
    ns.dict().set(Value(item.attribute), std::move(value));
  }

  Value lookup(const std::string& name) {
    for (Scope* s = scope_.get(); s; s = s->parent.get())
      if (Value* v = s->find(name)) return *v;
    if (const Value* v = context_.dict().find(std::string_view(name))) return *v;
    if (auto it = globals_.find(name); it != globals_.end()) return it->second;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  // A macro's body (or a call block's, for `caller`) run over `parent`.
  Value call_macro(const Stmt& s, CallArgs& args, const std::shared_ptr<Scope>& parent) {
    if (depth_ >= kMaxCallDepth) render_fail("RecursionError: maximum recursion depth exceeded");
    auto frame = child_of(parent);
    Enter enter(*this, frame);
    std::vector<bool> used(args.keyword.size(), false);
    for (size_t i = 0; i < s.params.size(); ++i) {
      const auto& [name, fallback] = s.params[i];
      Value value;
      bool found = false;
      if (i < args.positional.size()) {
        value = args.positional[i];
        found = true;
      }
      for (size_t k = 0; k < args.keyword.size() && !found; ++k) {
        if (args.keyword[k].first != name) continue;
        value = args.keyword[k].second;
        used[k] = found = true;
      }
      if (!found)
        value = fallback ? eval(*fallback) : Value::undefined(fmt::format("parameter '{}' was not provided", name));
      frame->set(name, std::move(value));
    }
    bool is_macro = s.kind == Stmt::Kind::Macro;
    if (is_macro && !s.uses_varargs && args.positional.size() > s.params.size())
      render_fail(fmt::format("TypeError: macro '{}' takes not more than {} argument(s)", s.text, s.params.size()));
    std::vector<Value> varargs;
    for (size_t i = s.params.size(); i < args.positional.size(); ++i) varargs.push_back(args.positional[i]);
    frame->set("varargs", Value::new_list(std::move(varargs), true));
    Value kwargs = Value::new_dict();
    for (size_t k = 0; k < args.keyword.size(); ++k) {
      if (used[k]) continue;
      if (args.keyword[k].first == "caller") {
        frame->set("caller", args.keyword[k].second);
      } else if (is_macro && !s.uses_kwargs) {
        render_fail(fmt::format("TypeError: macro '{}' takes no keyword argument '{}'", s.text, args.keyword[k].first));
      } else {
        kwargs.dict().set(Value(args.keyword[k].first), args.keyword[k].second);
      }
    }
    frame->set("kwargs", kwargs);
    ++depth_;
    std::string out;
    exec(s.body, out);
    --depth_;
    return Value(std::move(out));
  }

  Value eval(const Expr& e) {
    if (eval_depth_ >= kMaxEvalDepth) fail_at(e.where, "RecursionError: maximum recursion depth exceeded");
    ++eval_depth_;
    try {
      Value v = eval_inner(e);
      --eval_depth_;
      return v;
    } catch (const RenderFailure& f) {
      fail_at(e.where, f.message);
    }
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.operands.size(); ++i) args.positional.push_back(eval(*e.operands[i]));
    for (const auto& [name, value] : e.keywords) args.keyword.emplace_back(name, eval(*value));
    if (e.dyn_args)
      for (auto& v : eval(*e.dyn_args).iterate()) args.positional.push_back(std::move(v));
    if (e.dyn_kwargs) {
      Value kw = eval(*e.dyn_kwargs);
      if (!kw.is_mapping()) render_fail("TypeError: argument after ** must be a mapping");
      for (const auto& [k, v] : kw.dict().entries) args.keyword.emplace_back(k.to_str(), v);
    }
    return args;
  }

  Value eval_call(const Expr& e, const Value* caller) {
    Value fn = eval(*e.operands[0]);
    CallArgs args = eval_args(e, 1);
    if (caller) args.keyword.emplace_back("caller", *caller);
    if (!fn.is_callable()) {
      fn.require_defined();
      render_fail(fmt::format("TypeError: '{}' object is not callable", fn.type_name()));
    }
    return fn.callable().call(args);
  }

  bool compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return values_equal(a, b);
    if (op == "!=") return !values_equal(a, b);
    if (op == "<") return values_less(a, b);
    if (op == ">") return values_less(b, a);
    if (op == "<=") return !values_less(b, a);
    if (op == ">=") return !values_less(a, b);
    if (op == "in") return value_contains(b, a);
    return !value_contains(b, a);  // not in
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal:
        return e.value;
      case Expr::Kind::Name:
        return lookup(e.name);
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        std::vector<Value> items;
        items.reserve(e.operands.size());
        for (const auto& item : e.operands) items.push_back(eval(*item));
        return Value::new_list(std::move(items), e.kind == Expr::Kind::Tuple);
      }
      case Expr::Kind::Dict: {
        Value d = Value::new_dict();
        for (size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          Value key = eval(*e.operands[i]);  // left to right, as Python evaluates
          d.dict().set(std::move(key), eval(*e.operands[i + 1]));
        }
        return d;
      }
      case Expr::Kind::GetAttr:
        return get_attribute(eval(*e.operands[0]), e.name);
      case Expr::Kind::GetItem: {
        Value object = eval(*e.operands[0]);
        return get_item(object, eval(*e.operands[1]));
      }
      case Expr::Kind::Slice: {
        Value object = eval(*e.operands[0]);
        Value bounds[3];
        for (int i = 0; i < 3; ++i) bounds[i] = e.operands[i + 1] ? eval(*e.operands[i + 1]) : Value(nullptr);
        return get_slice(object, bounds[0], bounds[1], bounds[2]);
      }
      case Expr::Kind::Call:
        return eval_call(e, nullptr);
      case Expr::Kind::Filter: {
        Value input = e.operands[0] ? eval(*e.operands[0]) : *filter_input_;
        CallArgs args = eval_args(e, 1);
        return apply_filter(e.name, input, args);
      }
      case Expr::Kind::Test: {
        Value input = eval(*e.operands[0]);
        CallArgs args = eval_args(e, 1);
        return Value(apply_test(e.name, input, args));
      }
      case Expr::Kind::Not:
        return Value(!eval(*e.operands[0]).truthy());
      case Expr::Kind::Negate:
      case Expr::Kind::Plus: {
        Value v = eval(*e.operands[0]);
        v.require_defined();
        if (!v.is_number())
          render_fail(fmt::format("TypeError: bad operand type for unary {}: '{}'",
                                  e.kind == Expr::Kind::Negate ? '-' : '+', v.type_name()));
        if (e.kind == Expr::Kind::Plus) return v.is_bool() ? Value(v.as_int()) : v;
        return v.is_float() ? Value(-v.as_float()) : Value(-v.as_int());
      }
      case Expr::Kind::Binary: {
        Value left = eval(*e.operands[0]);
        return binary_op(e.name, left, eval(*e.operands[1]));
      }
      case Expr::Kind::Compare: {
        Value left = eval(*e.operands[0]);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.operands[i + 1]);
          if (!compare(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::And: {
        Value left = eval(*e.operands[0]);
        return left.truthy() ? eval(*e.operands[1]) : left;
      }
      case Expr::Kind::Or: {
        Value left = eval(*e.operands[0]);
        return left.truthy() ? left : eval(*e.operands[1]);
      }
      case Expr::Kind::Conditional:
        if (eval(*e.operands[0]).truthy()) return eval(*e.operands[1]);
        if (e.operands[2]) return eval(*e.operands[2]);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined.", e.where.line));
    }
    return Value();
  }

  void add_globals() {
    globals_["range"] = Value::function("range", [](CallArgs& args) {
      if (args.positional.empty() || args.positional.size() > 3)
        render_fail("TypeError: range expected 1 to 3 arguments");
      std::vector<int64_t> bounds;
      for (const auto& v : args.positional) {
        if (!v.is_int() && !v.is_bool())
          render_fail(fmt::format("TypeError: '{}' object cannot be interpreted as an integer", v.type_name()));
        bounds.push_back(v.as_int());
      }
      int64_t start = bounds.size() > 1 ? bounds[0] : 0, stop = bounds.size() > 1 ? bounds[1] : bounds[0];
      int64_t step = bounds.size() > 2 ? bounds[2] : 1;
      if (step == 0) render_fail("ValueError: range() arg 3 must not be zero");
      int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                               : (start > stop ? (start - stop - step - 1) / -step : 0);
      if (count > kMaxRange)
        render_fail(fmt::format("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).",
                                kMaxRange));
      std::vector<Value> items;
      for (int64_t i = 0; i < count; ++i) items.emplace_back(start + i * step);
      return Value::new_list(std::move(items));
    });
    auto mapping_from = [](CallArgs& args, bool is_namespace) {
      Value d = Value::new_dict();
      d.dict().is_namespace = is_namespace;
      for (const auto& p : args.positional) {
        p.require_defined();  // Python's dict() asks an Undefined for .keys(), which fails
        if (p.is_mapping()) {
          for (const auto& [k, v] : p.dict().entries) d.dict().set(k, v);
        } else {
          for (const auto& item : p.iterate()) {
            auto kv = item.iterate();
            if (kv.size() != 2) render_fail("ValueError: dictionary update sequence element has wrong length");
            d.dict().set(kv[0], kv[1]);
          }
        }
      }
      for (const auto& [k, v] : args.keyword) d.dict().set(Value(k), v);
      if (is_namespace)
        for (const auto& [k, v] : d.dict().entries)
          if (k.is_string() && !k.str().empty() && k.str()[0] == '_')
            render_fail(
                fmt::format("SecurityError: Chat templates cannot store underscore-prefixed attributes on a "
                            "namespace, but got {}. Please rename the attribute.",
                            k.repr()));
      return d;
    };
    globals_["namespace"] =
        Value::function("namespace", [mapping_from](CallArgs& args) { return mapping_from(args, true); });
    globals_["dict"] = Value::function("dict", [mapping_from](CallArgs& args) { return mapping_from(args, false); });
    globals_["raise_exception"] = Value::function("raise_exception", [](CallArgs& args) -> Value {
      render_fail(args.positional.empty() ? std::string() : args.positional[0].to_str());
    });
    globals_["strftime_now"] = Value::function("strftime_now", [this](CallArgs& args) {
      std::string format = args.positional.empty() ? std::string() : args.positional[0].to_str();
      std::tm now{};
      if (options_.now) {
        now = *options_.now;
      } else {
        std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
        localtime_r(&t, &now);
      }
      std::string out(format.size() * 8 + 64, '\0');
      out.resize(std::strftime(out.data(), out.size(), format.c_str(), &now));
      return Value(std::move(out));
    });
  }

  const Value& context_;
  std::string_view origin_;
  const RenderOptions& options_;
  std::unordered_map<std::string, Value> globals_;
  std::shared_ptr<Scope> root_ = std::make_shared<Scope>();
  std::shared_ptr<Scope> scope_ = root_;
  const Value* filter_input_ = nullptr;  // the text a filter block or block set is filtering
  int depth_ = 0;                        // nested macro calls
  int eval_depth_ = 0;                   // nested eval() calls (a failure ends the render, so no unwinding)
};

}  // namespace

std::string render_body(const Body& body, const Value& context, std::string_view origin, const RenderOptions& options) {
  return Renderer(context, origin, options).run(body);
}

}  // namespace nt::chat
