// Re-encodes every tensor of a GGUF model with a quant scheme, streaming in
// constant memory and keeping all metadata (general.file_type is updated).
#pragma once

#include <string>

#include "quant/quant_mix.h"

namespace nt {

void quantize_model(const std::string& in_path, const std::string& out_path, QuantScheme scheme, int threads);

}  // namespace nt
