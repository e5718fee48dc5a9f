#include "chat/jinja.h"

#include "chat/jinja_parser.h"
#include "chat/jinja_render.h"
#include "core/error.h"

namespace nt::chat {

JinjaTemplate JinjaTemplate::parse(std::string_view source, std::string_view origin) {
  JinjaTemplate t;
  t.origin_ = std::string(origin);
  t.body_ = std::make_shared<const Body>(parse_template(source, t.origin_));
  return t;
}

std::string JinjaTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  if (!context.is_object()) nt::fail("{}: the context must be a JSON object, not {}", origin_, context.type_name());
  return render_body(*body_, Value::from_json(context), origin_, options);
}

}  // namespace nt::chat
