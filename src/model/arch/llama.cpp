#include "model/arch/builders.h"

namespace nt::arch {

// Llama, and the families converted under its name (Mistral, SmolLM, ...).
ModelSpec build_llama(const GgufHeader& header) { return read_common(header, "llama"); }

}  // namespace nt::arch
