#include "backend/cuda/multi_gpu/rank_link.h"

#include <filesystem>
#include <system_error>

#include "backend/cuda/multi_gpu/nccl_rank_channel.h"
#include "core/error.h"

namespace nt {

RankLink join_rank_link(int rank, int ranks, int gpu, const std::string& id_file, double timeout_s) {
  if (ranks < 2 || rank < 0 || rank >= ranks) fail("tensor-split rank {} of {}: ranks are 0 to {}", rank, ranks, ranks - 1);
  const NcclLibrary& nccl = NcclLibrary::get();
  RankLink link;
  link.comm = std::make_unique<NcclComm>(nccl, exchange_unique_id(nccl, rank, id_file, timeout_s), ranks, rank, gpu);
  std::error_code ignored;
  if (rank == 0) std::filesystem::remove(id_file, ignored);  // every rank has joined: a later run must not find this id
  link.channel = std::make_unique<NcclRankChannel>(*link.comm);
  link.reducer = nccl_reducer(*link.comm);
  return link;
}

std::vector<RankLink> local_rank_links(int ranks) {
  auto channels = local_rank_channels(ranks);
  auto reducers = shared_gpu_reducers(ranks);
  std::vector<RankLink> links(static_cast<size_t>(ranks));
  for (size_t r = 0; r < links.size(); ++r) {
    links[r].channel = std::move(channels[r]);
    links[r].reducer = std::move(reducers[r]);
  }
  return links;
}

}  // namespace nt
