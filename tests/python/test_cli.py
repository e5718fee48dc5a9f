"""What the commands print around their work, as a user or a log sees it:
progress in a log, option help, the version, the benchmark table."""

import re
import subprocess

import pytest

from project_paths import BUILD_DIR, NTRANSFORMER, SOURCE_DIR, convert_stories260k, require_built


def ntransformer(*args):
    """Runs the binary with stdout and stderr as bytes: decoding them as text
    would turn a carriage return into a newline."""
    return subprocess.run([str(NTRANSFORMER), *map(str, args)], check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    require_built(NTRANSFORMER)
    path = tmp_path_factory.mktemp("cli") / "tiny.gguf"
    ntransformer("make-model", "--preset", "tiny", "--type", "q4_k", "--out", path)
    return path


def test_quantize_writes_plain_lines_to_a_log(tiny, tmp_path):
    out = tmp_path / "tiny-q8_0.gguf"
    stderr = ntransformer("quantize", tiny, out, "--type", "q8_0").stderr.decode()
    assert "\r" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("quantizing to Q8_0: ") and "(100%" in lines[0], lines
    assert lines[1].startswith(f"wrote {out} ("), lines


def test_version_names_the_commit_and_cuda_architectures():
    require_built(NTRANSFORMER)
    lines = ntransformer("--version").stdout.decode().splitlines()
    version = re.search(r"project\(ntransformer VERSION ([\d.]+)", (SOURCE_DIR / "CMakeLists.txt").read_text())[1]
    assert lines[0] == f"ntransformer {version}"
    head = subprocess.run(["git", "-C", str(SOURCE_DIR), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("the sources are not a git checkout")
    commit = re.fullmatch(r"commit: (?:.*-g)?([0-9a-f]{12})(-dirty)?", lines[1])
    assert commit and head.stdout.startswith(commit[1]), (lines[1], head.stdout)
    cache = (BUILD_DIR / "CMakeCache.txt").read_text()
    archs = re.search(r"^CMAKE_CUDA_ARCHITECTURES:\w+=(.*)$", cache, re.M)
    # build.ninja is what this configuration builds (a libntcuda.a may remain from another).
    if "libntcuda.a" not in (BUILD_DIR / "build.ninja").read_text():
        assert lines[2] == "CUDA: off"
    elif archs:  # given at configure time (scripts/setup.sh gives it)
        assert lines[2].startswith("CUDA: architectures ") and archs[1].replace(";", " ") in lines[2], lines[2]


def test_bench_prints_mean_and_spread_of_the_repetitions(tmp_path):
    model = convert_stories260k(tmp_path)
    for reps in (1, 3):
        out = ntransformer("bench", "-m", model, "-p", 16, "-n", 4, "-r", reps, "-t", 1).stdout.decode()
        rows = {}
        for line in out.splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 7 and cells[2] in ("pp16", "tg4 @ 0"):
                rows[cells[2]] = cells[3]
        assert set(rows) == {"pp16", "tg4 @ 0"}, out
        for test, cell in rows.items():
            m = re.fullmatch(r"([\d.]+) ± ([\d.]+)", cell)
            assert m and float(m[1]) > 0, (test, cell)
            assert (float(m[2]) == 0) == (reps == 1), (test, cell)  # one sample has no spread


def test_bench_holds_decode_against_the_memory_ceiling_measured_now(tmp_path):
    """After its table, bench names the memory path that bounds a decode step
    (on the CPU the host's read rate, measured right after the test) and the
    share of it the step reached: the last decode row's own figures."""
    model = convert_stories260k(tmp_path)
    out = ntransformer("bench", "-m", model, "-p", 0, "-n", 8, "-r", 1, "-t", 1).stdout.decode()
    row = next([c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if "| tg8 @ 0 |" in line)
    ms, with_kv = float(row[4]), float(row[6])
    m = re.search(r"^decode ceiling: weights \+ KV ([\d.]+) GB a token at ([\d.]+) ms a token = ([\d.]+) GB/s; "
                  r"measured now: host memory read \((\d+) threads?\) ([\d.]+) GB/s \((\d+)%\)$", out, re.M)
    assert m, out
    gb, line_ms, reached, threads, ceiling, percent = (float(g) for g in m.groups())
    assert line_ms == pytest.approx(ms, abs=1e-3) and threads == 1, (m[0], row)
    assert reached == pytest.approx(with_kv, abs=0.11), (m[0], row)
    # GB to 3 significant digits, ms to thousandths, GB/s to tenths.
    low, high = gb * (1 - 5e-3) / (line_ms + 5e-4) * 1e3, gb * (1 + 5e-3) / max(line_ms - 5e-4, 1e-9) * 1e3
    assert low - 0.05 <= reached <= high + 0.05, m[0]
    # The share comes from the unrounded figures: it lies within what the tenths
    # allow (a slow ceiling on a loaded machine widens that range).
    assert ceiling > 0.05, m[0]
    lowest = 100 * max(reached - 0.05, 0) / (ceiling + 0.05) - 0.5
    highest = 100 * (reached + 0.05) / (ceiling - 0.05) + 0.5
    assert lowest <= percent <= highest, m[0]


def test_batched_bench_rows_and_their_share_of_the_ceiling(tmp_path):
    """bench -npl, after llama-batched-bench: a row per batch size whose
    counts follow from the flags and whose rates from its own times, then each
    row's weights + KV a decode step against the memory ceiling measured now."""
    model = convert_stories260k(tmp_path)
    out = ntransformer("bench", "-m", model, "-npp", 8, "-ntg", 4, "-npl", "1,3", "-t", 1).stdout.decode()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.count("|") == 14]
    rows = [r for r in rows if r[0].isdigit()]
    assert [(int(r[0]), int(r[1]), int(r[2]), int(r[3])) for r in rows] == [(8, 4, 1, 12), (8, 4, 3, 36)], out
    for r in rows:  # T_TG is printed to thousandths of a second, S_TG to tenths of a token
        b, t_tg, s_tg = int(r[2]), float(r[6]), float(r[7])
        assert b * 4 / (t_tg + 5e-4) - 0.05 <= s_tg <= (b * 4 / (t_tg - 5e-4) if t_tg > 5e-4 else float("inf")), r
    m = re.search(r"^decode ceiling: measured now: host memory read \(1 threads?\) ([\d.]+) GB/s; "
                  r"a decode step's weights \+ KV reached (\d+)% at B = 1, (\d+)% at B = 3$", out, re.M)
    assert m, out
    # The GB/s figures are printed to tenths and the shares to whole percents:
    # the share lies within what those roundings allow of the printed figures.
    ceiling = float(m[1])
    for r, percent in zip(rows, (m[2], m[3])):
        gbps = float(r[12])
        lowest = 100 * max(gbps - 0.05, 0) / (ceiling + 0.05) - 0.5
        highest = 100 * (gbps + 0.05) / max(ceiling - 0.05, 1e-9) + 0.5
        assert lowest - 1e-9 <= int(percent) <= highest + 1e-9, (m[0], r)


def test_bench_pass_tokens_times_one_pass_of_each_size(tmp_path):
    model = convert_stories260k(tmp_path)
    out = ntransformer("bench", "-m", model, "-p", 0, "-n", 0, "--pass-tokens", "1,3,8", "-r", 2, "-t", 1).stdout.decode()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in out.splitlines() if line.count("|") == 7]
    passes = [r for r in rows if r[2].isdigit()]
    assert [int(r[2]) for r in passes] == [1, 3, 8], out
    ms = [float(r[3].split(" ± ")[0]) for r in passes]
    assert all(m > 0 for m in ms), out
    assert float(passes[0][4]) == 1.0, out  # the ratio is to the first size
    half = 0.005  # the ms cells are rounded to hundredths
    for r, m in zip(passes, ms):
        assert (m - half) / (ms[0] + half) - 1e-3 <= float(r[4]) <= (m + half) / max(ms[0] - half, 1e-9) + 1e-3, r
        assert int(r[2]) / (m + half) * 1e3 - 0.1 <= float(r[5]) <= int(r[2]) / max(m - half, 1e-9) * 1e3 + 0.1, r
    bad = subprocess.run([str(NTRANSFORMER), "bench", "-m", str(model), "-c", "16", "-p", "0", "-n", "0", "--pass-tokens", "4,32"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--pass-tokens 32" in bad.stderr and "raise -c" in bad.stderr, bad.stderr


def test_batched_bench_rows_the_pool_cannot_hold_are_refused_before_the_first(tmp_path):
    """A pool of 64 positions in 32-position pages holds two sequences of 12
    (-npp 8 -ntg 4) but not three: refused before any row runs, naming the flags."""
    model = convert_stories260k(tmp_path)
    ok = ntransformer("bench", "-m", model, "-npp", 8, "-ntg", 4, "-npl", "2", "--kv-pool", 64, "-t", 1)
    assert "| 8 | 4 | 2 | 24 |" in ok.stdout.decode()
    bad = subprocess.run([str(NTRANSFORMER), "bench", "-m", str(model), "-npp", "8", "-ntg", "4", "-npl", "1,3",
                          "--kv-pool", "64", "-t", "1"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0
    assert "-npl 3: 3 sequences of 12 positions (-npp + -ntg) need 3 KV pages of 32 positions, and the pool has 2" \
        in bad.stderr, bad.stderr
    assert "| 8 | 4 | 1 |" not in bad.stdout, bad.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("run", "-t", -1), "--threads: must be 0 or more, got -1"),
        (("run", "-t", "many"), "--threads: expected a number, got 'many'"),
        (("batch", "--parallel", 0), "--parallel: must be more than 0, got 0"),
        (("plan", "--sequences", 0), "--sequences: must be more than 0, got 0"),
        (("bench", "-r", 0), "--repetitions: must be more than 0, got 0"),
        # Each item of a comma list: not CLI11's "Could not convert: --npl = 2,x".
        (("bench", "-npl", "2,x"), "--npl: expected a number, got 'x'"),
        (("bench", "-npl", "1,0"), "--npl: must be more than 0, got 0"),
        (("bench", "-npp", "128,-1"), "--npp: must be 0 or more, got -1"),
    ],
)
def test_out_of_range_numbers_name_the_flag_and_what_it_takes(args, message):
    """A bad count stops before any model loads, with the flag, what it takes
    and what it got: not CLI11's "not in range 0.000000 to 1797..." (a range
    up to DBL_MAX that the rejected 0 seems to meet)."""
    require_built(NTRANSFORMER)
    result = subprocess.run([str(NTRANSFORMER), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "not in range" not in result.stderr, result.stderr
