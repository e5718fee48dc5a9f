// The chat page the server answers GET / with: one HTML file with its script
// and styles inline (src/server/web/index.html, embedded at build time by
// cmake/embed_web_page.cmake), which loads nothing from elsewhere.
#pragma once

#include <string_view>

namespace nt::server {

std::string_view web_page();

}  // namespace nt::server
