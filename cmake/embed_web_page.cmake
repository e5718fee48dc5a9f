# Run when the page changes (cmake -P): writes OUT, a C++ source whose
# nt::server::web_page() returns the bytes of IN as a raw string literal, so
# the server carries its page and needs no file beside it at run time.
#   -DIN= -DOUT=
file(READ "${IN}" page)
set(delimiter "ntpage")
string(FIND "${page}" ")${delimiter}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} holds ')${delimiter}\"', which would end the raw string literal early")
endif()
file(WRITE "${OUT}"
  "// Generated from ${IN} by cmake/embed_web_page.cmake: edit that file.\n"
  "#include \"server/web_page.h\"\n\n"
  "namespace nt::server {\n\n"
  "std::string_view web_page() {\n"
  "  static constexpr char kPage[] = R\"${delimiter}(${page})${delimiter}\";\n"
  "  return {kPage, sizeof(kPage) - 1};\n"
  "}\n\n"
  "}  // namespace nt::server\n")
