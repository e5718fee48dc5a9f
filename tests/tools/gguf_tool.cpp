// Test driver for the GGUF reader/writer: `gguf_tool copy IN OUT` rewrites a
// file through our reader and writer; `gguf_tool dump IN` prints metadata and
// tensor directory as JSON for the Python oracle to compare against gguf-py.
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"

namespace {

nlohmann::json to_json(const nt::GgufValue& v) {
  return std::visit(
      [&](const auto& x) -> nlohmann::json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::vector<nt::GgufValue>>) {
          auto arr = nlohmann::json::array();
          for (const auto& item : x) arr.push_back(to_json(item));
          return arr;
        } else {
          return x;
        }
      },
      v.data);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "copy" && argc == 4) {
      nt::write_gguf_copy(*nt::GgufFile::open(argv[2]), argv[3]);
      return 0;
    }
    if (cmd == "dump" && argc == 3) {
      const auto file = nt::GgufFile::open(argv[2]);
      nlohmann::json out;
      for (const auto& kv : file->header().metadata) {
        out["metadata"][kv.key] = {{"type", int(kv.value.type)}, {"value", to_json(kv.value)}};
      }
      for (const auto& t : file->header().tensors) {
        out["tensors"].push_back({{"name", t.name}, {"type", int(t.type)}, {"shape", t.shape},
                                  {"offset", file->header().data_offset + t.offset}, {"bytes", t.n_bytes}});
      }
      fmt::print("{}\n", out.dump());
      return 0;
    }
    fmt::print(stderr, "usage: gguf_tool copy IN OUT | gguf_tool dump IN\n");
    return 2;
  } catch (const nt::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
