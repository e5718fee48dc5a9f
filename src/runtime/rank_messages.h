// What rank 0 of a tensor split tells the ranks that run in processes of
// their own (one process per GPU): how to load their shard, then every
// pass and every KV move in the order rank 0 makes them. A follower keeps no
// books of its own: each pass carries the pages of the sequences it runs,
// copied from rank 0's books (KvPages::mirror). Messages are plain bytes in
// the host's byte order (every rank runs the same build on the same kind of
// host); decoding checks every length and names what is missing or wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "planning/placement.h"
#include "runtime/batch.h"
#include "runtime/kv_pages.h"
#include "runtime/tensor_shard.h"

namespace nt {

// Enough of the model for a follower to refuse a file other than rank 0's.
struct ModelCheck {
  int64_t n_layers = 0, dim = 0, vocab_size = 0;
  uint64_t file_bytes = 0;
  bool operator==(const ModelCheck&) const = default;
};

// Sent once, when every rank has joined: each rank's shard and the tier of
// each of its layers (by rank; VRAM or pinned RAM), and the sizes rank 0's
// runner has, which every rank's KV pool and buffers share.
struct RankSetup {
  int64_t leader_pid = 0;    // rank 0's process, so that followers beside it notice when it is gone
  std::string leader_space;  // rank 0's host and PID namespace: where leader_pid names it
  ModelCheck model;
  std::vector<TensorShard> shards;
  std::vector<std::vector<Tier>> tiers;
  int64_t context = 0, max_batch = 0, max_sequences = 0, kv_pool = 0;
};

// One sequence's books as rank 0 keeps them.
struct SequenceBooks {
  SeqId seq = 0;
  int64_t length = 0;
  std::vector<int32_t> pages;
};

// A pass: the batch, the layers it runs, and the books of its sequences
// after rank 0 made room for it.
struct RankPass {
  Batch batch;
  std::vector<int32_t> layers;
  std::vector<SequenceBooks> books;
};

struct RankPageCopies {
  std::vector<PageCopy> copies;
};

struct RankRowMoves {
  std::vector<RowCopy> moves;
};

// Rank 0's runner is gone: the followers return.
struct RankStop {};

using RankMessage = std::variant<RankSetup, RankPass, RankPageCopies, RankRowMoves, RankStop>;

std::vector<uint8_t> encode_rank_message(const RankMessage& message);
// Throws nt::Error naming the message kind and the field that is cut short or out of range.
RankMessage decode_rank_message(std::span<const uint8_t> bytes);

// The books of every sequence `runs` names, from `pages`.
std::vector<SequenceBooks> books_of(const KvPages& pages, std::span<const SequenceRun> runs);

}  // namespace nt
