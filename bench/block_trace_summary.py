#!/usr/bin/env python3
"""Summarizes a decode step recorded block by block (`cuda_bench trace` in a
build with -DNT_CUDA_BLOCK_TRACE=ON): per kernel of a layer, averaged over the
middle layers, how long after the previous kernel's last block it was
released from its dependency wait, how its waits spread (waves), and when its
last and median blocks ended, in microseconds.

    python3 bench/block_trace_summary.py /tmp/block_trace.bin
"""
import sys

import numpy as np

RECORD = np.dtype([("grid", "<u8"), ("kind", "<u4"), ("block", "<u4"), ("smid", "<u4"), ("pad", "<u4"), ("t", "<u8", (4,))])
KINDS = {1: "rms_norm", 2: "rope", 3: "quantize", 4: "matvec", 5: "matvec_parts", 6: "attention"}


def launches(records):
    t0 = int(records["t"][:, 0].min())
    out = []
    for grid in np.unique(records["grid"]):
        r = records[records["grid"] == grid]
        t = (r["t"].astype(np.int64) - t0) / 1000.0
        t[r["t"] == 0] = np.nan
        out.append(dict(kind=KINDS.get(int(r["kind"][0]), "?"), blocks=len(r), start=np.nanmin(t[:, 0]),
                        wait_min=np.nanmin(t[:, 1]), wait_max=np.nanmax(t[:, 1]),
                        end_med=np.nanmedian(t[:, 3]), end_max=np.nanmax(t[:, 3])))
    return sorted(out, key=lambda d: d["start"])


def main(path):
    seq = launches(np.fromfile(path, dtype=RECORD))
    # A layer starts at its attention RMSNorm: the rms_norm right before the Q/K/V mat-vec.
    starts = [i for i in range(len(seq) - 1) if seq[i]["kind"] == "rms_norm" and seq[i + 1]["kind"] == "matvec_parts"]
    if len(starts) < 4:
        sys.exit(f"{path}: found {len(starts)} layers, need 4")
    per_layer = starts[2] - starts[1]
    middle = starts[1:-1]
    span = max(d["end_max"] for d in seq) - min(d["start"] for d in seq)
    period = np.mean([seq[starts[i + 1]]["end_max"] - seq[starts[i]]["end_max"] for i in range(1, len(starts) - 1)])
    print(f"{len(seq)} launches, {len(starts)} layers of {per_layer}, step {span:.1f} us, layer period {period:.2f} us "
          f"(mean of {len(middle)} middle layers)")
    print(f"{'#':>2} {'kernel':<13} {'blocks':>6} {'released':>8} {'wait spread':>11} {'last end':>8} {'median end':>10}")
    total = 0.0
    for j in range(per_layer):
        rows = []
        for s in middle:
            d, prev = seq[s + j], seq[s + j - 1]
            rows.append([d["wait_min"] - prev["end_max"], d["wait_max"] - d["wait_min"], d["end_max"] - d["wait_min"],
                         d["end_med"] - d["wait_min"]])
        m = np.nanmean(np.array(rows), axis=0)
        total += m[0] + m[2]
        d = seq[middle[0] + j]
        print(f"{j:>2} {d['kind']:<13} {d['blocks']:>6} {m[0]:8.2f} {m[1]:11.2f} {m[2]:8.2f} {m[3]:10.2f}")
    print(f"released + last end, summed: {total:.2f} us per layer")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/block_trace.bin")
