// What the engine needs from a backend: a Llama forward pass over a KV cache.
// The CPU and CUDA backends implement it; generation, chat, perplexity and
// benchmarks are written once against it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/llama_config.h"

namespace nt {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual const LlamaConfig& config() const = 0;
  // Tokens the KV cache holds at most.
  virtual int64_t context_size() const = 0;
  // Backend and placement, for logs: "cpu (2 threads, avx2)".
  virtual std::string description() const = 0;
  // Bytes of weights read per decoded token (for GB/s reports).
  virtual uint64_t weight_bytes_per_token() const = 0;

  // Runs `tokens` at positions pos, pos+1, ... (overwriting any cached
  // positions from `pos` on). Writes vocab_size logits per token into `logits`
  // when all_logits, else only the last token's. Throws nt::Error when
  // pos + tokens.size() exceeds context_size().
  virtual void forward(std::span<const int32_t> tokens, int64_t pos, float* logits, bool all_logits) = 0;
};

}  // namespace nt
