// libFuzzer entry: any byte string must parse or raise nt::Error, never crash,
// leak or read out of bounds (ASan/UBSan are on).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "gguf/gguf_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto header = nt::parse_gguf_header({data, size}, size, "fuzz-input");
    for (const auto& kv : header.metadata) (void)kv.value.to_display();
  } catch (const nt::Error&) {
  }
  return 0;
}
