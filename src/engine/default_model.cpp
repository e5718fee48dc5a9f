#include "engine/default_model.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace nt {

std::string default_model_path() {
  namespace fs = std::filesystem;
  if (const char* env = std::getenv("NT_MODEL"); env && *env) return env;
  constexpr const char* kFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("NT_MODELS_DIR"); dir && *dir) candidates.push_back(fs::path(dir) / kFile);
  candidates.push_back(fs::current_path() / "models" / kFile);
  std::error_code ec;
  // The binary sits in build/src/: the cache is <repo>/models.
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path().parent_path() / "models" / kFile);
  for (const auto& p : candidates) {
    if (fs::exists(p, ec)) return p.string();
  }
  fail("no model given (-m) and the default model {} was not found (looked in {}); fetch it with "
       "scripts/fetch_default_model.sh",
       kFile, candidates.back().parent_path().string());
}

}  // namespace nt
