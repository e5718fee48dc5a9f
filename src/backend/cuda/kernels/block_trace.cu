#ifdef NT_BLOCK_TRACE
#include "backend/cuda/kernels/block_trace.cuh"

#include <vector>

namespace nt::trace {
namespace {

std::vector<ArmFunction>& kernel_files() {
  static std::vector<ArmFunction> files;
  return files;
}

}  // namespace

bool register_kernel_file(ArmFunction arm_file) {
  kernel_files().push_back(arm_file);
  return true;
}

void arm(Record* records, uint32_t* counters) {
  for (ArmFunction f : kernel_files()) f(records, counters);
}

}  // namespace nt::trace
#endif
