// The engine facade: requests from other threads through the queue to one
// engine thread, each answered as the Generator answers it alone, with its
// text streamed in pieces that add up to its result; cancellation before and
// after a request starts; a bad conversation refused at submit.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "core/error.h"
#include "engine/generator.h"
#include "engine/prompts.h"
#include "engine_test_models.h"

namespace nt {
namespace {

EngineOptions stories_options(const std::string& path, int parallel) {
  EngineOptions o;
  o.model.path = path;
  o.model.device = Device::Cpu;
  o.model.threads = 1;
  o.model.context = 256;
  o.model.sequences = parallel;
  return o;
}

EngineRequest greedy_request(const std::string& prompt, int64_t max_tokens) {
  EngineRequest r;
  r.prompt = prompt;
  r.sampling = greedy_sampling();
  r.max_tokens = max_tokens;
  return r;
}

struct Answer {
  std::string streamed;
  GenerationResult result;
  int finishes = 0;
};

const std::vector<std::string> kPrompts = {"Once upon a time", "The dog", "Lily and Tom went to the park", "One day"};

TEST(EngineFacade, RequestsFromOtherThreadsGetWhatTheGeneratorGivesAlone) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  auto engine = Engine::open(stories_options(path, 2));
  std::vector<Answer> answers(kPrompts.size());
  std::atomic<size_t> finished{0};
  // Clients submit from threads of their own while the engine thread steps.
  std::vector<std::thread> clients;
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    clients.emplace_back([&, i] {
      RequestSink sink;
      sink.on_text = [&, i](std::string_view text, std::span<const TokenLogprobs>) { answers[i].streamed += text; };
      sink.on_finish = [&, i](const GenerationResult& r) {
        answers[i].result = r;
        ++answers[i].finishes;
        ++finished;
      };
      engine->submit(greedy_request(kPrompts[i], 24), std::move(sink));
    });
  }
  while (finished < kPrompts.size()) {
    if (!engine->step()) engine->wait_for_work();
  }
  for (auto& c : clients) c.join();

  auto alone = Engine::open(stories_options(path, 1));
  const OpenedModel& model = alone->model();
  Generator generator(*model.runner, *model.tokenizer);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    const EncodedPrompt prompt = encode_completion(*model.tokenizer, kPrompts[i]);
    Sampler sampler(greedy_sampling(), model.runner->config().vocab_size);
    GenerationOptions options;
    options.max_tokens = 24;
    options.stop_tokens = prompt.stop_tokens;
    std::string text;
    generator.generate(prompt.tokens, sampler, options, [&](std::string_view piece) { text += piece; });
    EXPECT_EQ(answers[i].finishes, 1) << kPrompts[i];
    EXPECT_TRUE(answers[i].result.error.empty()) << answers[i].result.error;
    EXPECT_EQ(answers[i].result.tokens, generator.generated()) << kPrompts[i];
    EXPECT_EQ(answers[i].result.text, text) << kPrompts[i];
    EXPECT_EQ(answers[i].streamed, answers[i].result.text) << kPrompts[i];
  }
}

TEST(EngineFacade, CancelledRequestsEndInterruptedAndFreeTheirSlots) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  auto engine = Engine::open(stories_options(path, 1));
  std::vector<Answer> answers(3);
  const auto sink_for = [&](size_t i) {
    RequestSink sink;
    sink.on_finish = [&, i](const GenerationResult& r) {
      answers[i].result = r;
      ++answers[i].finishes;
    };
    return sink;
  };
  // One slot: the first runs, the second waits, the third is cancelled before any step takes it.
  const RequestId running = engine->submit(greedy_request(kPrompts[0], 200), sink_for(0));
  engine->submit(greedy_request(kPrompts[1], 8), sink_for(1));
  const RequestId queued = engine->submit(greedy_request(kPrompts[2], 8), sink_for(2));
  engine->cancel(queued);
  engine->step();
  engine->step();
  engine->cancel(running);
  while (engine->step()) {
  }
  for (const Answer& a : answers) EXPECT_EQ(a.finishes, 1);
  EXPECT_EQ(answers[0].result.stop, StopReason::Interrupted);
  EXPECT_GT(answers[0].result.completion_tokens, 0);
  EXPECT_LT(answers[0].result.completion_tokens, 200);
  EXPECT_EQ(answers[2].result.stop, StopReason::Interrupted);
  EXPECT_EQ(answers[2].result.completion_tokens, 0);
  // The slot the cancelled request held served the next.
  EXPECT_NE(answers[1].result.stop, StopReason::Interrupted);
  EXPECT_GT(answers[1].result.completion_tokens, 0);
  EXPECT_EQ(engine->progress().running, 0);
}

TEST(EngineFacade, AConversationTheTemplateCannotRenderIsRefusedAtSubmit) {
  const std::string path = test::stories260k_gguf();
  if (path.empty()) GTEST_SKIP() << "stories260K is absent from " << test::shared_models_dir();
  EngineOptions options = stories_options(path, 1);
  options.chat_template = "llama2";
  auto engine = Engine::open(options);
  EngineRequest request;
  request.messages = {{"assistant", "first"}, {"assistant", "second"}};
  EXPECT_THROW(engine->submit(request, {}), Error);
  EXPECT_FALSE(engine->step());  // nothing was queued
}

}  // namespace
}  // namespace nt
