// Renders a chat template for the Python oracle test (test_chat_templates.py):
//   chat_template_tool [--now YYYY-MM-DDTHH:MM:SS] TEMPLATE_FILE CONTEXT_JSON_FILE
// prints the rendering exactly (no newline added), or "error: ..." on stderr
// and exits 1. --now fixes the clock strftime_now reads.
#include <cstdio>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/jinja.h"
#include "core/error.h"
#include "core/read_file.h"

int main(int argc, char** argv) {
  try {
    nt::chat::RenderOptions options;
    int first = 1;
    if (argc == 5 && std::string(argv[1]) == "--now") {
      std::tm now{};
      if (!strptime(argv[2], "%Y-%m-%dT%H:%M:%S", &now)) nt::fail("--now wants YYYY-MM-DDTHH:MM:SS, got '{}'", argv[2]);
      std::time_t t = timegm(&now);  // fills in the weekday and day of the year
      gmtime_r(&t, &now);
      options.now = now;
      first = 3;
    } else if (argc != 3) {
      nt::fail("usage: chat_template_tool [--now YYYY-MM-DDTHH:MM:SS] TEMPLATE_FILE CONTEXT_JSON_FILE");
    }
    std::string source = nt::read_file(argv[first]);
    auto context = nlohmann::ordered_json::parse(nt::read_file(argv[first + 1]));
    auto tmpl = nt::chat::JinjaTemplate::parse(source, "chat template");
    std::string text = tmpl.render(context, options);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
