// A rank past the first of a tensor split that runs a process per GPU
// (`ntransformer rank`): it joins rank 0 (a model command run with
// --split tensor --nccl-id), loads the shard rank 0 sends it, and computes
// its part of every pass until rank 0's model is closed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nt {

struct TensorRankOptions {
  std::string path;          // the model, the same file as rank 0's; empty: the default model
  std::vector<int> gpus;     // rank 0's --gpus: rank r runs on gpus[r]
  int rank = 1;
  std::string nccl_id_file;  // where rank 0 writes the NCCL id
  double join_timeout_s = 300;
  std::function<void(uint64_t, uint64_t)> on_load_progress;  // weights loaded, total
  std::function<void(const std::string&)> on_status;         // waiting, joined, done: a line each
};

// Returns when rank 0 is done; throws nt::Error naming the rank on a
// missing GPU or NCCL, a file other than rank 0's, or a shard that does not load.
void serve_tensor_rank(const TensorRankOptions& options);

}  // namespace nt
