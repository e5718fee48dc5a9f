// GPU tests skip (exit 77, which ctest reports as skipped) on machines
// without a usable CUDA device, instead of failing.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_device.h"

namespace nt {
namespace {

class RequireGpu : public testing::Environment {
 public:
  void SetUp() override {
    std::string why;
    const auto device = probe_cuda_device(0, &why);
    if (!device) {
      std::printf("no CUDA GPU: skipping (%s)\n", why.c_str());
      std::fflush(stdout);
      std::_Exit(77);
    }
    std::printf("GPU: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d, runtime %d\n", device->name.c_str(), device->sm_major,
                device->sm_minor, device->multiprocessors, double(device->total_memory) / double(1ull << 30),
                device->driver_version, device->runtime_version);
  }
};

const auto* const kRequireGpu = testing::AddGlobalTestEnvironment(new RequireGpu);

}  // namespace
}  // namespace nt
