// After a decode test on a runner whose layers are not all in VRAM (streamed
// or computed on the host): the rate at which the step reaches those layers'
// weights in host memory, beside the two paths that serve them, measured
// right after it: the link's copies and the host's own reads.
#pragma once

#include "engine/model_runner.h"
#include "gguf/gguf_file.h"

namespace nt::cli {

// Prints one line when some layers are not resident; `seconds_per_token` is
// the decode test's. threads: the host read probe's (0: one a core).
void print_host_weight_rate(const ModelRunner& runner, const GgufFile& file, double seconds_per_token, int threads);

}  // namespace nt::cli
