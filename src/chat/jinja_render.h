// Executes a parsed template against its variables, with jinja2's scoping:
// a for loop's body is a fresh scope each iteration, `if` opens none, and a
// macro runs its arguments over the scope it was defined in.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja.h"
#include "chat/jinja_parser.h"

namespace nt::chat {

// `context` is a dict of the template's variables.
std::string render_body(const Body& body, const Value& context, std::string_view origin, const RenderOptions& options);

}  // namespace nt::chat
