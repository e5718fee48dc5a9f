// A sequence's cached keys and values as bytes (ModelRunner::read_rows and
// write_rows, what a saved sequence state holds): per position every layer's
// K row, then every layer's V row, kv_dim f16 values each in head order, the
// CPU runner's F16 layout, read from and written into the runner's paged
// device caches through a device staging block.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "backend/cuda/kernels/kv_rows.h"

namespace nt {

// Bytes of one position: 2 * n_layers * kv_dim f16 values.
uint64_t saved_row_bytes(const KvRowsParams& caches, int n_layers);

// The rows (pool rows: page * page_size + position in the page) of the
// layers 0 .. n_layers - 1 of `caches` (their layout: layers, rows and
// staging unset) into `out`, saved_row_bytes() a row; synchronizes `stream`.
void read_saved_rows(const KvRowsParams& caches, int n_layers, std::span<const int64_t> rows, std::span<uint8_t> out,
                     cudaStream_t stream);

// The reverse: `in`'s rows into the caches; synchronizes `stream`.
void write_saved_rows(const KvRowsParams& caches, int n_layers, std::span<const int64_t> rows, std::span<const uint8_t> in,
                      cudaStream_t stream);

}  // namespace nt
