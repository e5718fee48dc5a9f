// The values a chat template computes with, modelled on the Python objects
// jinja2 handles: undefined, None, bool, int, float, str, list/tuple, dict,
// namespace and callables. Lists, dicts and namespaces are shared by pointer
// like Python objects; only namespaces are ever mutated (the sandbox forbids
// list.append and friends).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace nt::chat {

class Value;

// A failure while rendering, without a location yet: the evaluator adds the
// template line and column of the node being evaluated.
struct RenderFailure {
  std::string message;
};
[[noreturn]] void render_fail(std::string message);

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b) and never equals a list, as in Python
};

struct DictData {
  // Insertion order, as Python dicts keep it; chat dicts are small, so a
  // linear lookup beats hashing.
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;  // jinja2's namespace(): attributes only, not a mapping

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// Arguments of a call, as Python passes them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at position `index` or named `name`, or nullptr: lets each
  // builtin accept both spellings like a Python signature does.
  const Value* get(size_t index, std::string_view name) const;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

struct Undefined {
  std::string hint;  // the message jinja2 gives when the value is used
};

class Value {
 public:
  enum class Type : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Callable };

  Value() : v_(Undefined{}) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double f) : v_(f) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<ListData> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<DictData> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value new_list(std::vector<Value> items = {}, bool tuple = false);
  static Value new_dict();
  static Value function(std::string name, std::function<Value(CallArgs&)> call);
  static Value from_json(const nlohmann::ordered_json& json);

  Type type() const { return Type(v_.index()); }
  bool is_undefined() const { return type() == Type::Undefined; }
  bool is_none() const { return type() == Type::None; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_float() const { return type() == Type::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // bool is an int in Python
  bool is_string() const { return type() == Type::String; }
  bool is_list() const { return type() == Type::List; }
  bool is_dict() const { return type() == Type::Dict; }
  bool is_mapping() const { return is_dict() && !dict().is_namespace; }
  bool is_callable() const { return type() == Type::Callable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? int64_t(as_bool()) : std::get<int64_t>(v_); }
  double as_float() const { return is_float() ? std::get<double>(v_) : double(as_int()); }
  const std::string& str() const { return std::get<std::string>(v_); }
  ListData& list() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  DictData& dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }
  const void* identity() const;  // the shared object, for `is sameas`

  bool truthy() const;
  // Python's str() and repr(); an undefined value prints as nothing.
  std::string to_str() const;
  std::string repr() const;
  // Python's type name, for error messages ("'int' object is not iterable").
  std::string type_name() const;
  // The elements a for loop or list() sees: list items, dict keys, string
  // characters; undefined is empty. Anything else fails.
  std::vector<Value> iterate() const;
  // Raises jinja2's UndefinedError when an undefined value is used in an
  // operation that needs a real value.
  void require_defined() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
               std::shared_ptr<DictData>, std::shared_ptr<Callable>>
      v_;
};

// Python semantics for ==, <, and the arithmetic operators.
bool values_equal(const Value& a, const Value& b);
bool values_less(const Value& a, const Value& b);                // fails on unorderable types
bool value_contains(const Value& container, const Value& item);  // `item in container`
Value binary_op(std::string_view op, const Value& a, const Value& b);

// Python float repr: shortest round-trip digits, 1e+16 style exponents.
std::string python_float_repr(double f);

}  // namespace nt::chat
