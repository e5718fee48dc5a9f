// `ntransformer rank -m MODEL --gpus 0,1 --rank R --nccl-id FILE`: one rank of
// a tensor split that runs a process per GPU, following rank 0 (a model
// command run with the same -m and --gpus, --split tensor and --nccl-id FILE).
#include <fmt/core.h>

#include "cli/commands.h"
#include "cli/number_checks.h"
#include "core/progress.h"
#include "engine/gpu_list.h"
#include "engine/tensor_rank.h"

namespace nt::cli {
namespace {

struct RankOptions {
  std::string model, gpus, nccl_id;
  int rank = 1;
  double join_timeout_s = 300;
};

void serve(const RankOptions& o) {
  TensorRankOptions rank;
  rank.path = o.model;
  rank.gpus = parse_gpu_ids(o.gpus, "--gpus");
  rank.rank = o.rank;
  rank.nccl_id_file = o.nccl_id;
  rank.join_timeout_s = o.join_timeout_s;
  ProgressLine progress(fmt::format("rank {}: loading its shard", o.rank), 1.0);
  bool loaded = false;  // the line ends when the shard is in, not when rank 0 closes the model
  rank.on_load_progress = [&](uint64_t done, uint64_t total) {
    if (loaded) return;
    progress.update(done, total);
    if (done == total) {
      progress.finish();
      loaded = true;
    }
  };
  rank.on_status = [](const std::string& line) { fmt::print(stderr, "{}\n", line); };
  serve_tensor_rank(rank);
}

}  // namespace

void add_rank_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("rank",
                                 "Run one rank of a tensor split with a process per GPU, following rank 0 (a model command "
                                 "with --split tensor --nccl-id FILE) until it closes the model");
  static RankOptions o;
  cmd->add_option("-m,--model", o.model, "GGUF model, the same file as rank 0's (default: the default model)");
  cmd->add_option("--gpus", o.gpus, "Rank 0's --gpus, e.g. 0,1: this rank runs on the GPU at its index")->required();
  cmd->add_option("--rank", o.rank, "This process's rank, 1 to the number of GPUs less one")->required();
  cmd->add_option("--nccl-id", o.nccl_id, "The file rank 0 writes the NCCL id to")->required();
  cmd->add_option("--join-timeout", o.join_timeout_s, "Seconds to wait for rank 0's id")
      ->check(positive())
      ->capture_default_str();
  cmd->callback([] { serve(o); });
}

}  // namespace nt::cli
