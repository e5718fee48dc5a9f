// Random-weight models with the exact tensor names, shapes and metadata of a
// real architecture (benchmark and test inputs), streamed to disk.
#pragma once

#include <cstdint>
#include <string>

#include "model/presets.h"
#include "quant/quant_mix.h"

namespace nt {

// Writes `preset` quantized with `scheme` to `path`, printing progress to stderr.
// Weights are drawn so activations stay O(1) through every layer. dry_run prints
// the tensor directory and file size instead (for presets too large to write).
void write_synthetic_model(const ModelPreset& preset, QuantScheme scheme, uint64_t seed, const std::string& path,
                           bool dry_run = false);

}  // namespace nt
