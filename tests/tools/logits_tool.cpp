// Test driver: runs a model on given token ids and writes every position's
// logits as raw float32 (n_tokens x vocab) for comparison with the float64
// numpy reference. Usage:
//   logits_tool MODEL.gguf IDS OUT.f32 [--step] [--batch] [--layers L,L,..] [--kv-f32] [--threads N]
// IDS is comma-separated; several sequences separated by ';' are evaluated
// one after another, each from position 0 (independent contexts), and their
// rows written back to back. --step feeds one token per forward pass (decode
// path) instead of one batched pass per sequence (prefill path). --batch puts
// the sequences side by side in one batch of the sequence API (each on its
// own sequence; with --step, one batch per position holds every sequence
// still that long). --layers runs only those layers (a layer schedule).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_runner.h"
#include "core/error.h"

int main(int argc, char** argv) {
  try {
    if (argc < 4) {
      fmt::print(stderr, "usage: logits_tool MODEL.gguf IDS OUT.f32 [--step] [--kv-f32] [--threads N]\n");
      return 2;
    }
    std::vector<std::vector<int32_t>> sequences;
    std::stringstream lists(argv[2]);
    for (std::string list; std::getline(lists, list, ';');) {
      std::stringstream items(list);
      auto& ids = sequences.emplace_back();
      for (std::string item; std::getline(items, item, ',');) ids.push_back(std::stoi(item));
      if (ids.empty()) nt::fail("IDS: empty sequence in '{}'", argv[2]);
    }
    nt::CpuRunnerOptions options;
    bool step = false, batched = false;
    nt::LayerSchedule schedule;
    for (int i = 4; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--step") step = true;
      else if (arg == "--batch") batched = true;
      else if (arg == "--layers" && i + 1 < argc) {
        std::stringstream items(argv[++i]);
        for (std::string item; std::getline(items, item, ',');) schedule.layers.push_back(std::stoi(item));
      }
      else if (arg == "--kv-f32") options.kv_f32 = true;
      else if (arg == "--threads" && i + 1 < argc) options.threads = std::stoi(argv[++i]);
      else nt::fail("unknown argument '{}'", arg);
    }
    std::shared_ptr<const nt::GgufFile> file = nt::GgufFile::open(argv[1]);
    size_t longest = 0, total = 0;
    for (const auto& ids : sequences) {
      longest = std::max(longest, ids.size());
      total += ids.size();
    }
    options.context = int64_t(longest);
    options.sequences = int64_t(sequences.size());
    auto runner = nt::make_cpu_runner(file, options);
    const size_t vocab = size_t(runner->config().vocab_size);
    std::vector<float> logits(total * vocab);
    std::vector<nt::SeqId> seqs;
    std::vector<size_t> first_row;  // of each sequence's rows in `logits`
    for (size_t s = 0, row = 0; s < sequences.size(); row += sequences[s++].size()) {
      seqs.push_back(s == 0 ? 0 : runner->seq_alloc());
      first_row.push_back(row);
    }
    // One pass per batch: every entry asks for its logits, which land in its row.
    nt::Batch batch;
    nt::BatchOutputs outputs;
    std::vector<size_t> rows;
    const auto run = [&] {
      runner->forward(batch, outputs, schedule);
      for (size_t i = 0; i < rows.size(); ++i) {
        const auto row = outputs.logits_of(i, int64_t(vocab));
        std::copy(row.begin(), row.end(), logits.begin() + ptrdiff_t(rows[i] * vocab));
      }
      batch.clear();
      rows.clear();
    };
    const auto add = [&](size_t s, size_t t) {
      batch.add(sequences[s][t], int64_t(t), seqs[s], nt::Output::Logits);
      rows.push_back(first_row[s] + t);
    };
    if (!batched && schedule.runs_all()) {  // the default sequence's single-sequence API, as generation uses it
      for (size_t s = 0; s < sequences.size(); ++s) {
        const auto& ids = sequences[s];
        float* at = &logits[first_row[s] * vocab];
        if (step) {
          for (size_t t = 0; t < ids.size(); ++t) runner->forward({&ids[t], 1}, int64_t(t), at + t * vocab, false);
        } else {
          runner->forward(ids, 0, at, true);
        }
      }
    } else if (batched && step) {
      for (size_t t = 0; t < longest; ++t) {
        for (size_t s = 0; s < sequences.size(); ++s) {
          if (t < sequences[s].size()) add(s, t);
        }
        run();
      }
    } else {
      for (size_t s = 0; s < sequences.size(); ++s) {
        for (size_t t = 0; t < sequences[s].size(); ++t) {
          add(s, t);
          if (step) run();
        }
        if (!batched && !step) run();
      }
      if (!batch.empty()) run();
    }
    std::FILE* out = std::fopen(argv[3], "wb");
    if (!out || std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size()) nt::fail("cannot write {}", argv[3]);
    std::fclose(out);
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
