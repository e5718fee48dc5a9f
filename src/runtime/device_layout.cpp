#include "runtime/device_layout.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace nt {
namespace {

using Seg = WeightLayout::Segment;

// Byte offsets inside each file block are those of quant/blocks.h.
WeightLayout native(int block_elems, int block_bytes) {
  WeightLayout l;
  l.block_elems = block_elems;
  l.block_bytes = block_bytes;
  l.n_planes = 1;
  l.plane_bytes[0] = block_bytes;
  return l;
}

WeightLayout planes(int block_elems, int block_bytes, std::array<int, 4> plane_bytes, std::array<Seg, 4> segments) {
  WeightLayout l;
  l.block_elems = block_elems;
  l.block_bytes = block_bytes;
  for (int p = 0; p < 4; ++p) {
    l.plane_bytes[p] = plane_bytes[p];
    if (plane_bytes[p]) l.n_planes = p + 1;
    l.segments[p] = segments[p];
    if (segments[p].len) l.n_segments = p + 1;
  }
  return l;
}

const WeightLayout kF32 = native(1, 4);
const WeightLayout kF16 = native(1, 2);
const WeightLayout kBF16 = native(1, 2);
// Q4_0 {d, qs[16]} -> qs | d
const WeightLayout kQ4_0 = planes(32, 18, {16, 2}, {Seg{2, 16, 0, 0}, Seg{0, 2, 1, 0}});
// Q4_1 {d, m, qs[16]} -> qs | (d, m)
const WeightLayout kQ4_1 = planes(32, 20, {16, 4}, {Seg{4, 16, 0, 0}, Seg{0, 4, 1, 0}});
// Q5_0 {d, qh[4], qs[16]} -> qs | qh | d
const WeightLayout kQ5_0 = planes(32, 22, {16, 4, 2}, {Seg{6, 16, 0, 0}, Seg{2, 4, 1, 0}, Seg{0, 2, 2, 0}});
// Q5_1 {d, m, qh[4], qs[16]} -> qs | qh | (d, m)
const WeightLayout kQ5_1 = planes(32, 24, {16, 4, 4}, {Seg{8, 16, 0, 0}, Seg{4, 4, 1, 0}, Seg{0, 4, 2, 0}});
// MXFP4 {e, qs[16]} -> qs | e
const WeightLayout kMXFP4 = planes(32, 17, {16, 1}, {Seg{1, 16, 0, 0}, Seg{0, 1, 1, 0}});
// Q8_0 {d, qs[32]} -> qs | d
const WeightLayout kQ8_0 = planes(32, 34, {32, 2}, {Seg{2, 32, 0, 0}, Seg{0, 2, 1, 0}});
// Q2_K {scales[16], qs[64], d, dmin} -> qs | scales | (d, dmin)
const WeightLayout kQ2_K = planes(256, 84, {64, 16, 4}, {Seg{16, 64, 0, 0}, Seg{0, 16, 1, 0}, Seg{80, 4, 2, 0}});
// Q3_K {hmask[32], qs[64], scales[12], d} -> qs | hmask | (scales, d, 2 zero bytes)
const WeightLayout kQ3_K = planes(256, 110, {64, 32, 16}, {Seg{32, 64, 0, 0}, Seg{0, 32, 1, 0}, Seg{96, 14, 2, 0}});
// Q4_K {d, dmin, scales[12], qs[128]} -> qs | (d, dmin, scales)
const WeightLayout kQ4_K = planes(256, 144, {128, 16}, {Seg{16, 128, 0, 0}, Seg{0, 16, 1, 0}});
// Q5_K {d, dmin, scales[12], qh[32], qs[128]} -> qs | qh | (d, dmin, scales)
const WeightLayout kQ5_K = planes(256, 176, {128, 32, 16}, {Seg{48, 128, 0, 0}, Seg{16, 32, 1, 0}, Seg{0, 16, 2, 0}});
// Q6_K {ql[128], qh[64], scales[16], d} -> ql | qh | scales | d
const WeightLayout kQ6_K =
    planes(256, 210, {128, 64, 16, 2}, {Seg{0, 128, 0, 0}, Seg{128, 64, 1, 0}, Seg{192, 16, 2, 0}, Seg{208, 2, 3, 0}});

}  // namespace

const WeightLayout& weight_layout(TensorType type) {
  switch (type) {
    case TensorType::F32: return kF32;
    case TensorType::F16: return kF16;
    case TensorType::BF16: return kBF16;
    case TensorType::Q4_0: return kQ4_0;
    case TensorType::MXFP4: return kMXFP4;
    case TensorType::Q4_1: return kQ4_1;
    case TensorType::Q5_0: return kQ5_0;
    case TensorType::Q5_1: return kQ5_1;
    case TensorType::Q8_0: return kQ8_0;
    case TensorType::Q2_K: return kQ2_K;
    case TensorType::Q3_K: return kQ3_K;
    case TensorType::Q4_K: return kQ4_K;
    case TensorType::Q5_K: return kQ5_K;
    case TensorType::Q6_K: return kQ6_K;
    default: fail("the CUDA backend has no kernels for weight type {}", tensor_type_name(type));
  }
}

uint64_t device_matrix_bytes(TensorType type, int64_t rows, int64_t cols) {
  const WeightLayout& l = weight_layout(type);
  // The mat-vec reads float rows 16 bytes at a time; everything else works in 32-element chunks.
  const int64_t unit = type == TensorType::F32 ? 4 : type == TensorType::F16 || type == TensorType::BF16 ? 8 : 32;
  if (cols % unit != 0 || cols % l.block_elems != 0) {
    fail("the CUDA backend needs rows of a multiple of {} elements for {}, got {}", std::max<int64_t>(unit, l.block_elems),
         tensor_type_name(type), cols);
  }
  const uint64_t blocks = uint64_t(rows) * uint64_t(cols / l.block_elems);
  uint64_t total = 0;
  for (int p = 0; p < l.n_planes; ++p) total += align_device(blocks * uint64_t(l.plane_bytes[p]));
  return total;
}

}  // namespace nt
