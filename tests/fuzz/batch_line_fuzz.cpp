// libFuzzer entry over `ntransformer batch`'s input lines: any text must
// parse into a request or an error naming what is wrong, never crash or
// recurse off the stack, and a request it accepts must hold what the
// scheduler relies on (one of prompt and messages, counts and sampling
// parameters in range).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cli/batch_lines.h"

namespace {

bool accepted_line_is_sound(const nt::cli::BatchLine& line) {
  const nt::SamplingParams& s = line.sampling;
  return line.prompt.has_value() != !line.messages.empty() && line.max_tokens >= 0 && std::isfinite(s.temperature) &&
         s.temperature >= 0.0f && s.top_k >= 0 && s.top_p >= 0.0f && s.top_p <= 1.0f && s.min_p >= 0.0f &&
         s.min_p <= 1.0f && s.repeat_penalty > 0.0f && std::isfinite(s.repeat_penalty) && s.repeat_last_n >= -1 &&
         std::isfinite(s.frequency_penalty) && std::isfinite(s.presence_penalty);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nt::cli::BatchLine line =
      nt::cli::parse_batch_line(std::string_view(reinterpret_cast<const char*>(data), size), nt::cli::BatchDefaults{});
  (void)line.id.dump();  // echoed in the output object
  if (line.error.empty() && !accepted_line_is_sound(line)) std::abort();
  return 0;
}
