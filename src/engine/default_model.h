// Where the default model (SmolLM2-135M-Instruct Q4_1) lives when -m is not given.
#pragma once

#include <string>

namespace nt {

// $NT_MODEL if set; else the models cache beside the build (fetched by
// scripts/fetch_default_model.sh). Throws with the fetch command when absent.
std::string default_model_path();

}  // namespace nt
