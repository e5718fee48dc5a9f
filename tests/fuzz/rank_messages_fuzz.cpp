// libFuzzer entry over what a tensor-split follower does with rank 0's bytes:
// decode them, and for a pass split the batch into its runs and mirror its
// books into a pool. Any byte string must do that or raise nt::Error, never
// crash, leak or read out of bounds (ASan/UBSan are on).
#include <cstddef>
#include <cstdint>
#include <variant>

#include "core/error.h"
#include "runtime/kv_pages.h"
#include "runtime/rank_messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const nt::RankMessage message = nt::decode_rank_message({data, size});
    if (const auto* pass = std::get_if<nt::RankPass>(&message)) {
      (void)nt::sequence_runs(pass->batch);
      nt::KvPages books(64, 32, 1024, 8);
      for (const nt::SequenceBooks& b : pass->books) books.mirror(b.seq, b.length, b.pages);
    }
  } catch (const nt::Error&) {
  }
  return 0;
}
