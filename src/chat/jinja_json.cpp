// json.dumps, as transformers' tojson filter calls it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "chat/jinja_builtins.h"
#include "chat/jinja_strings.h"

namespace nt::chat {
namespace {

std::string json_string(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // a surrogate pair, as Python writes astral characters
            char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", uint32_t(c));
          }
        } else {
          utf8_append(out, c);
        }
    }
  }
  return out + "\"";
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(f);
}

void write_json(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  switch (v.type()) {
    case Value::Type::None:
      out += "null";
      return;
    case Value::Type::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Type::Int:
      out += std::to_string(v.as_int());
      return;
    case Value::Type::Float:
      out += json_float(v.as_float());
      return;
    case Value::Type::String:
      out += json_string(v.str(), style.ensure_ascii);
      return;
    case Value::Type::List:
    case Value::Type::Dict: {
      bool is_list = v.is_list();
      if (!is_list && v.dict().is_namespace) break;
      size_t n = is_list ? v.list().items.size() : v.dict().entries.size();
      if (n == 0) {
        out += is_list ? "[]" : "{}";
        return;
      }
      std::string newline, separator = style.item_separator;
      if (style.indent) {
        newline = "\n";
        for (int i = 0; i <= depth; ++i) newline += *style.indent;
        separator += newline;
      }
      out += is_list ? "[" : "{";
      out += newline;
      if (is_list) {
        for (size_t i = 0; i < n; ++i) {
          if (i) out += separator;
          write_json(out, v.list().items[i], style, depth + 1);
        }
      } else {
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, item] : v.dict().entries) {
          std::string key;
          switch (k.type()) {
            case Value::Type::String:
              key = k.str();
              break;
            case Value::Type::Bool:
              key = k.as_bool() ? "true" : "false";
              break;
            case Value::Type::None:
              key = "null";
              break;
            case Value::Type::Int:
              key = std::to_string(k.as_int());
              break;
            case Value::Type::Float:
              key = json_float(k.as_float());
              break;
            default:
              render_fail(fmt::format("TypeError: keys must be str, int, float, bool or None, not {}", k.type_name()));
          }
          entries.emplace_back(std::move(key), &item);
        }
        if (style.sort_keys)
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += separator;
          out += json_string(entries[i].first, style.ensure_ascii);
          out += style.key_separator;
          write_json(out, *entries[i].second, style, depth + 1);
        }
      }
      if (style.indent) {
        out += "\n";
        for (int i = 0; i < depth; ++i) out += *style.indent;
      }
      out += is_list ? "]" : "}";
      return;
    }
    default:
      break;
  }
  render_fail(fmt::format("TypeError: Object of type {} is not JSON serializable", v.type_name()));
}

}  // namespace

std::string to_json(const Value& value, const JsonStyle& style) {
  std::string out;
  write_json(out, value, style, 0);
  return out;
}

}  // namespace nt::chat
