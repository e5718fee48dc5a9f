// What the C API's opaque handles hold: thin wrappers over the engine's
// pieces (the GGUF file and tokenizer, open_model's runner, the Engine
// facade for requests, the Sampler), with the books the C calls need on top:
// which runner sequence each C sequence id is, the tokens each sequence's
// cache holds (for saving its state), the last pass's outputs and counters.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/open_model.h"
#include "gguf/gguf_file.h"
#include "model/arch/model_spec.h"
#include "ntransformer.h"
#include "runtime/batch.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

struct nt_model {
  nt_model_params params{};
  std::string path;
  std::shared_ptr<const nt::GgufFile> file;
  nt::ModelSpec spec;
  std::unique_ptr<nt::Tokenizer> tokenizer;
  std::vector<int32_t> end_of_generation;  // sorted: EOS, EOT, EOM, the template's end of turn
  std::optional<nt::ChatTemplate> chat;    // the model's own (or the fallback format)
  std::atomic<int> contexts{0};            // live contexts made from it
};

struct nt_batch {
  struct Entry {
    nt_token token;
    nt_pos pos;
    nt_seq_id seq;
    bool logits;
  };
  std::vector<Entry> entries;
  size_t capacity = 0;
};

namespace nt::capi {

// A request's books, shared by the engine thread's sink and the pollers.
struct RequestRecord {
  std::string text;  // produced and not yet polled
  bool done = false;
  nt_stop_reason stop = NT_STOP_NONE;
  int32_t prompt_tokens = 0, completion_tokens = 0;
  std::string error;
  nt_text_callback on_text = nullptr;
  void* user_data = nullptr;
};

}  // namespace nt::capi

struct nt_context {
  nt_model* model = nullptr;
  nt_context_params params{};
  // The opened runner; moved into the engine when requests start.
  std::optional<nt::OpenedModel> opened;
  nt::ModelRunner* runner = nullptr;  // opened's or the engine's, alive as long as the context
  bool broken = false;                // the engine could not start on the runner, which went with it
  int64_t context_size = 0;
  bool kv_f32 = false;

  // The batch API: each C sequence's runner sequence and the tokens its cache holds.
  std::vector<nt::SeqId> sequences;
  std::vector<std::vector<int32_t>> tokens;
  nt::Batch batch;
  nt::BatchOutputs outputs;
  std::vector<int64_t> entry_row;  // per entry of the last nt_decode, in the caller's order: its logits row, -1 none
  int64_t last_logits_entry = -1;
  bool has_outputs = false;

  // Requests: the engine over `runner` and its thread, once the first is submitted.
  std::unique_ptr<nt::Engine> engine;
  std::thread engine_thread;
  std::mutex requests_mutex;  // guards what follows, and engine creation
  std::condition_variable requests_changed;
  std::map<nt_request_id, std::shared_ptr<nt::capi::RequestRecord>> requests;
  bool stopping = false;

  // Counters of the batch API (requests read the engine's).
  mutable std::mutex counters_mutex;
  int64_t passes = 0, decoded = 0;
  double seconds = 0;
  int64_t request_passes_base = 0, request_prompt_base = 0, request_generated_base = 0;
  double request_seconds = 0;
};

struct nt_sampler {
  nt::SamplingParams params;
  int stage = 0;         // the last step added, in chain order (see sampler.cpp)
  bool ends = false;     // dist or greedy added
  std::optional<nt::Sampler> sampler;  // made at the first sample, for the context's vocabulary
  int64_t vocab_size = 0;
  std::vector<int32_t> history;  // accepted before the sampler was made
  std::vector<float> row;
};
