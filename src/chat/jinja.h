// Jinja2 chat templates (GGUF `tokenizer.chat_template`), rendered
// byte-for-byte as Python jinja2 3.1 does under Hugging Face transformers'
// settings: ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and
// the loopcontrols extension, transformers' tojson (ensure_ascii off),
// raise_exception, strftime_now, dict and namespace globals, and its
// {% generation %} tag (renders its body).
//
// Supported: {{ }}, {% %}, {# #}, `-`/`+` whitespace control, raw; if/elif/
// else, for (else, `if` filter, unpacking, loop.*), break/continue, set (also
// block set and namespace attributes), macro (defaults, varargs, kwargs,
// caller, closures), call, filter and with blocks; the full expression grammar
// with jinja2's precedence, slices, attribute/item fallbacks, Python str/dict/
// list methods (mutating ones refused, as the sandbox does), printf-style %;
// jinja2's default Undefined; the filters and tests chat templates use
// (jinja_filters.cpp, jinja_tests.cpp).
// Differences, none of which real templates rely on: ints are 64-bit (an
// overflow fails); upper/lower/title map case for Latin, Greek and Cyrillic
// only; range() and lazy filters (map, select, ...) yield lists, so printing
// one directly shows a list; no \N{name} escapes, format specs in
// str.format, template inheritance, include/import or recursive loops.
// Hostile nesting fails with an error instead of exhausting the stack.
//
// Tested by tests/python/test_chat_templates.py: every template under
// tests/data/chat_templates and small feature templates are rendered here
// (tests/tools/chat_template_tool) and by jinja2, and must match exactly.
#pragma once

#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace nt::chat {

struct Stmt;

struct RenderOptions {
  // The clock strftime_now reads; unset means the local time now (as
  // transformers' datetime.now()). Tests fix it for reproducible output.
  std::optional<std::tm> now;
};

class JinjaTemplate {
 public:
  // Fails with nt::Error "ORIGIN (line L, column C): ..." on a syntax error,
  // an unknown tag, filter or test.
  static JinjaTemplate parse(std::string_view source, std::string_view origin);

  // The context's keys are the template's variables (messages, tools,
  // add_generation_prompt, bos_token, ...). ordered_json keeps the key order
  // Python dicts have, which tojson and dict iteration show. Fails with
  // nt::Error naming the origin, line and column; raise_exception(message)
  // fails with the template's message.
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
  std::string origin_;
};

}  // namespace nt::chat
