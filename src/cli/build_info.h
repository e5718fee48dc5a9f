// What this binary was built from, for `ntransformer --version`: the version,
// the git commit (taken at build time) and the CUDA architectures compiled.
#pragma once

#include <string>

namespace nt::cli {

std::string version_text();

}  // namespace nt::cli
