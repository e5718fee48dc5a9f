// One rank's ties to the other ranks of a tensor split that runs a process
// per GPU: the communicator, the channel rank 0's messages travel (its
// passes, runtime/rank_messages.h) and the reducer that adds the ranks'
// partial sums. Threads of one process on one GPU take the same ties
// through memory (local_rank_links): how one GPU tests the protocol.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/multi_gpu/nccl_comm.h"
#include "backend/cuda/multi_gpu/residual_reducer.h"
#include "runtime/rank_channel.h"

namespace nt {

struct RankLink {
  std::unique_ptr<NcclComm> comm;  // null between threads of one process
  std::unique_ptr<RankChannel> channel;
  std::unique_ptr<ResidualReducer> reducer;  // declared last: gone before the communicator it uses
};

// Joins as `rank` of `ranks` on CUDA device `gpu` through NCCL's unique-id
// bootstrap: rank 0 publishes the id at `id_file`, the others wait up to
// timeout_s for it. Blocks until every rank has joined; rank 0 then removes
// the file, so that a later run's ranks wait for that run's id.
RankLink join_rank_link(int rank, int ranks, int gpu, const std::string& id_file, double timeout_s);

// Links for `ranks` threads of this process whose ranks share one GPU.
std::vector<RankLink> local_rank_links(int ranks);

}  // namespace nt
