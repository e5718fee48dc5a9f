#include "engine/tensor_rank.h"

#include <fmt/format.h>

#include "core/error.h"
#include "engine/default_model.h"
#include "gguf/gguf_file.h"
#ifdef NT_HAVE_CUDA
#include "backend/cuda/multi_gpu/gpu_set.h"
#include "backend/cuda/multi_gpu/tensor_parallel_runner.h"
#endif

namespace nt {

void serve_tensor_rank(const TensorRankOptions& o) {
  const int ranks = int(o.gpus.size());
  if (ranks < 2) fail("rank: --gpus lists the tensor split's GPUs, one per rank: at least two, e.g. --gpus 0,1");
  if (o.rank < 1 || o.rank >= ranks) fail("rank --rank {}: the ranks of {} GPUs that follow rank 0 are 1 to {}", o.rank, ranks, ranks - 1);
  if (o.nccl_id_file.empty()) fail("rank: --nccl-id names the file rank 0 writes the NCCL id to");
#ifdef NT_HAVE_CUDA
  const auto file = GgufFile::open(o.path.empty() ? default_model_path() : o.path);
  const int gpu = o.gpus[size_t(o.rank)];
  require_gpus({gpu});
  const auto status = [&](const std::string& line) {
    if (o.on_status) o.on_status(fmt::format("rank {} of {} on GPU {}: {}", o.rank, ranks, gpu, line));
  };
  status(fmt::format("waiting up to {} s for rank 0's NCCL id at {}", o.join_timeout_s, o.nccl_id_file));
  RankLink link = join_rank_link(o.rank, ranks, gpu, o.nccl_id_file, o.join_timeout_s);
  status("joined; loading the shard rank 0 sends");
  CudaRunnerOptions runner;
  runner.on_load_progress = o.on_load_progress;
  follow_tensor_rank(*file, gpu, std::move(link), runner);
  status("rank 0 closed the model");
#else
  fail("rank: this build has no CUDA backend (configure with -DNT_CUDA=ON)");
#endif
}

}  // namespace nt
