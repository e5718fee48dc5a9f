#!/usr/bin/env python3
"""Per-kernel totals of an ncu CSV (gpu__time_duration.sum, dram__bytes_read.sum),
e.g. of one decode step from `cuda_bench trace` (docs/PERFORMANCE.md):
    ncu --profile-from-start off --graph-profiling node --clock-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv cuda_bench trace /tmp > ncu.csv
    python3 bench/ncu_summary.py ncu.csv
"""
import csv, sys, collections, signal
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
rows = list(csv.reader(open(sys.argv[1])))
hdr = None; k = collections.OrderedDict()
for r in rows:
    if r and r[0] == 'ID': hdr = r; continue
    if hdr and len(r) == len(hdr):
        d = dict(zip(hdr, r))
        k.setdefault((d['ID'], d['Kernel Name'][:70], d['Grid Size']), {})[d['Metric Name']] = float(d['Metric Value'].replace(',', ''))
agg = collections.defaultdict(lambda: [0, 0.0, 0.0]); tot = totb = 0
for (i, n, g), m in k.items():
    t = m.get('gpu__time_duration.sum', 0); by = m.get('dram__bytes_read.sum', 0)
    a = agg[(n, g)]; a[0] += 1; a[1] += t; a[2] += by; tot += t; totb += by
print("kernels", len(k), "sum us %.1f" % (tot / 1e3), "dram GB %.3f" % (totb / 1e9))
for (n, g), (c, t, by) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print("%4d %8.1f us %7.2f us/each %7.1f MB %6.0f GB/s  %s grid %s" % (c, t / 1e3, t / 1e3 / c, by / 1e6 / c, by / t if t else 0, n, g))
