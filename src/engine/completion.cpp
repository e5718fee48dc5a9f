#include "engine/completion.h"

#include <algorithm>

namespace nt {

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::TokenLimit: return "token limit";
    case StopReason::StopToken: return "end of text";
    case StopReason::StopString: return "stop string";
    case StopReason::ContextFull: return "context full";
    case StopReason::Interrupted: return "interrupted";
  }
  return "?";
}

Completion::Completion(const Tokenizer& tokenizer, GenerationOptions options, int64_t context,
                       std::span<const int32_t> prompt)
    : options_(std::move(options)), context_(context), decoder_(tokenizer), stops_(options_.stop_strings) {
  decoder_.keep_special(options_.kept_special);
  decoder_.continue_after(prompt);
}

bool Completion::take(int32_t token, int64_t cached, Sampler& sampler, const TextSink& on_text) {
  const int64_t taken = int64_t(generated_.size());
  if (taken == options_.max_tokens) return false;
  if (options_.interrupted && options_.interrupted()) {
    stop_ = StopReason::Interrupted;
    return false;
  }
  const auto& stop_tokens = options_.stop_tokens;
  if (std::find(stop_tokens.begin(), stop_tokens.end(), token) != stop_tokens.end()) {
    stop_ = StopReason::StopToken;
    return false;
  }
  sampler.accept(token);
  generated_.push_back(token);
  const std::string piece = decoder_.push(token);
  decoded_ += int64_t(piece.size());
  token_end_.push_back(decoded_);
  const auto step = stops_.feed(piece);
  released_ += int64_t(step.released.size());
  if (step.stopped) stop_ = StopReason::StopString;
  settle();
  if (!step.released.empty()) on_text(step.released);
  if (step.stopped) return false;
  if (taken + 1 == options_.max_tokens) return false;
  if (cached >= context_) {
    stop_ = StopReason::ContextFull;
    return false;
  }
  return true;
}

void Completion::finish(const TextSink& on_text) {
  if (stop_ == StopReason::StopString) return;
  const auto rest = stops_.feed(decoder_.flush()).released + stops_.flush();
  released_ += int64_t(rest.size());
  settled_ = generated_.size();  // all the text is out
  if (!rest.empty()) on_text(rest);
}

void Completion::settle() {
  if (stop_ == StopReason::StopString) {
    while (settled_ < generated_.size() && text_offset(settled_) < released_) ++settled_;
  } else {
    while (settled_ < generated_.size() && token_end_[settled_] <= released_) ++settled_;
  }
}

}  // namespace nt
