#include "model/arch/builders.h"

namespace nt::arch {

// Llama, and the families converted under its name (Mistral, SmolLM, ...);
// with experts, Mixtral: every expert as wide as feed_forward_length.
ModelSpec build_llama(const GgufHeader& header) {
  ModelSpec spec = read_common(header, "llama");
  read_experts(header, spec.ffn_dim, spec);
  return spec;
}

}  // namespace nt::arch
