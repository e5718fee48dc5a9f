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
//
// A mixture of experts' router is drawn 4x wider than the other matrices, so
// that a token's chosen experts lead the rest by clear margins (engines that
// round differently still choose alike). router_skew S > 0 makes routing
// uneven, as in trained models: along a shared random unit direction u,
// every token embedding gets (1 +- 1/2) sqrt(dim) u (the sign alternating
// over the table's rows), and the router row of expert e (k: experts used)
// has its component set to S * exp(-e / k) * 4 / sqrt(dim). Experts 0, 1, ...
// are then favoured by up to about S * exp(-e / k) logit standard deviations,
// more after some tokens than others, and the rest of each choice follows
// the token and, through attention, its context. S = 0 routes uniformly at
// random.
void write_synthetic_model(const ModelPreset& preset, QuantScheme scheme, uint64_t seed, const std::string& path,
                           bool dry_run = false, float router_skew = 0.0f);

}  // namespace nt
