"""`ntransformer plan` without a GPU: given a VRAM budget and a link speed it
prints a four-tier plan for the default model (SmolLM2-135M), the CPU's share
follows the rates, --cpu-layers overrides it, and bad values name the flag."""

import os
import re
import subprocess

import pytest

from project_paths import MODELS_DIR, NTRANSFORMER, require_built

MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
# A budget that keeps some of SmolLM2's 30 layers resident and streams the rest
# (a 512-token context and 16-token batches keep the reserve small; the
# runner's 64 MiB upload buffer and 54 MiB GEMM scratch are most of it).
BASE = ["plan", "--vram-budget", "200MiB", "--ram-budget", "1GiB", "-c", "512", "--batch", "16",
        "--h2d-gbps", "8", "--disk-gbps", "2", "--gpu-gbps", "500", "--batch-tokens", "16"]


def plan(*extra, code=0):
    require_built(NTRANSFORMER)
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent")
    env = {**os.environ, "NT_MODELS_DIR": str(MODELS_DIR), "CUDA_VISIBLE_DEVICES": ""}  # no GPU, as the acceptance asks
    r = subprocess.run([str(NTRANSFORMER), *BASE, *extra], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == code, r.stdout + r.stderr
    return r


def passes(out):
    """{tokens: (vram, ram, disk, cpu)} from the 'pass of N tokens' sections."""
    found = {}
    for m in re.finditer(r"pass of (\d+) tokens?: .*\n  split +(\d+) vram \+ (\d+) ram-streamed \+ (\d+) disk-streamed "
                         r"\+ (\d+) cpu", out):
        found[int(m[1])] = tuple(int(x) for x in m.groups()[1:])
    return found


def tiers(out):
    return {t: int(n) for t, n in re.findall(r"^  (vram|ram|disk) +layers \S+ +(\d+) layers", out, re.M)}


def test_prints_a_hybrid_plan_without_a_gpu():
    out = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20").stdout
    t = tiers(out)
    assert t["vram"] > 0 and t["ram"] > 0, out
    p = passes(out)
    assert set(p) == {1, 16}, out
    for split in p.values():
        assert sum(split) == 30 and split[0] == t["vram"] and split[1] + split[3] == t["ram"], out
    assert p[1][3] > 0, "a CPU far faster than the link takes layers at one token"
    assert p[16][3] <= p[1][3], "more tokens per pass never give the CPU more layers"
    assert "other splits" in out and "<- chosen" in out


def widths(out):
    """{tokens: CPU layers} from the 'passes by width' table."""
    table = out.split("passes by width", 1)[1]
    return {int(t): int(k) for t, k in re.findall(r"^ +(\d+) +(\d+) +[\d.]+ +[\d.]+ +[\d.]+x$", table, re.M)}


def test_passes_by_width_give_wider_passes_a_smaller_share():
    out = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20", "--cpu-wide-gbps", "4").stdout
    w = widths(out)
    assert list(w) == [1, 2, 4, 8, 16, 32, 64], out
    assert w[1] == passes(out)[1][3], "one token takes the decode split's CPU layers"
    assert all(w[a] >= w[b] for a, b in zip(list(w), list(w)[1:])), "a wider pass never gets more CPU layers"
    assert w[64] < w[1], "a CPU 50 times slower a token at 64 tokens keeps fewer layers"
    # A CPU slower than streaming at any width past one token keeps them for decode only.
    slow = widths(plan("--cpu-gbps", "200", "--cpu-batch-gbps", "0.01", "--cpu-wide-gbps", "0.001").stdout)
    assert slow[1] > 0 and all(k == 0 for t, k in slow.items() if t > 1), slow


def test_memory_plan_is_the_runners_and_shows_the_kv_pool():
    one = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20").stdout
    assert "GPU      132 SMs (ASSUMED: the H200's 132, no GPU to ask; pass --gpu-sms)" in one, one
    assert re.search(r"upload and landing buffers +\S+ MiB", one), one
    two = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20", "--parallel", "2", "--gpu-sms", "16").stdout
    assert "GPU      16 SMs (given)" in two, two
    assert "KV cache (F16, 2 x 512 tokens)" in two, two
    # 30 layers x 512 positions x 2 (K, V) x 192 (3 KV heads of 64) x 2 bytes = 11.25 MiB a sequence.
    assert re.search(r"KV cache \(F16, 2 x 512 tokens\) +22\.50 MiB", two), two
    m = re.search(r"2 sequences' KV caches \(11\.25 MiB more than one's\) push (\d+) layers out of VRAM "
                  r"\((\d+) resident with one sequence\)", two)
    assert m and int(m[1]) > 0 and int(m[2]) == tiers(one)["vram"], two


def test_a_shared_kv_pool_costs_its_positions_not_every_context():
    out = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20", "--parallel", "8", "--kv-pool", "1024").stdout
    # 1024 positions x 30 layers x 2 (K, V) x 192 x 2 bytes = 22.50 MiB, where 8 whole contexts of 512 take 90.
    assert re.search(r"KV cache \(F16, a pool of 1024 tokens for 8 sequences\) +22\.50 MiB", out), out
    refused = plan("--kv-pool", "500", code=1).stderr
    assert "--kv-pool 500: the pool must hold at least one sequence's context of 512 positions" in refused, refused


def test_slow_cpu_gets_no_layers():
    out = plan("--cpu-gbps", "0.01", "--cpu-batch-gbps", "0.001").stdout
    assert all(split[3] == 0 for split in passes(out).values()), out
    assert "auto: no split beats streaming alone" in out


def test_cpu_layers_override():
    out = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20", "--cpu-layers", "3").stdout
    assert all(split[3] == 3 for split in passes(out).values()), out
    assert "given by --cpu-layers" in out
    out = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20", "--cpu-layers", "0").stdout
    assert all(split[3] == 0 for split in passes(out).values()), out


def test_cpu_rate_is_measured_when_not_given():
    out = plan().stdout
    assert re.search(r"CPU at +1 token .* GB/s of weights \(measured: cpu::matmul", out), out
    assert re.search(r"CPU at +16 tokens .* GB/s of weights \(measured: cpu::matmul", out), out


@pytest.mark.parametrize("value", ["abc", "-1", "2.5", "999"])
def test_bad_cpu_layers_name_the_flag(value):
    r = plan("--cpu-gbps", "200", "--cpu-layers", value, code=1)
    assert "--cpu-layers" in r.stderr, r.stderr
    for crash in ("terminate called", "what():"):
        assert crash not in r.stderr


def test_projection_is_marked():
    out = plan("--cpu-gbps", "200", "--cpu-batch-gbps", "20", "--project").stdout
    assert "PROJECTION" in out and "RTX 4090" in out and "RTX 3090" in out, out


def plan_with_budget(budget, *extra, code=0):
    """plan at another VRAM budget (BASE's own replaced), the CPU rates given."""
    args = list(BASE)
    args[args.index("--vram-budget") + 1] = budget
    require_built(NTRANSFORMER)
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent")
    env = {**os.environ, "NT_MODELS_DIR": str(MODELS_DIR), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([str(NTRANSFORMER), *args, "--cpu-gbps", "200", "--cpu-batch-gbps", "20", *extra],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == code, r.stdout + r.stderr
    return r


def mib(text):
    value, unit = text.split()
    return float(value) * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def test_draft_model_takes_its_vram_from_the_budget():
    # SmolLM2 as its own draft: a budget that holds every layer alone, and only part of them beside the draft.
    alone = plan_with_budget("540MiB").stdout
    beside = plan_with_budget("540MiB", "--draft-model", str(MODEL)).stdout
    without, left = tiers(alone)["vram"], tiers(beside)["vram"]
    assert 0 < left < without == 30, beside
    m = re.search(r"the draft model \S+ \((\S+ \S+) of VRAM, resident\) pushes (\d+) layers out of VRAM "
                  r"\((\d+) resident without it\)", beside)
    assert m and int(m[2]) == without - left and int(m[3]) == without, beside
    rows = {k: mib(v) for k, v in re.findall(r"^  (draft model weights|draft model KV cache \(512 tokens\)|draft model "
                                             r"buffers) +(\S+ \S+)$", beside, re.M)}
    assert len(rows) == 3, beside
    assert abs(sum(rows.values()) - mib(m[1])) < 0.02, beside
    # The draft's KV cache is its own 30 layers x 512 positions x (K, V) x 192 x 2 bytes, as the target's.
    assert rows["draft model KV cache (512 tokens)"] == 11.25, beside
    total, budget = re.search(r"^  total +(\S+ \S+) of (\S+ \S+)$", beside, re.M).groups()
    assert mib(total) <= mib(budget) == 540, beside


def test_draft_model_larger_than_the_budget_names_it():
    r = plan_with_budget("300MiB", "--draft-model", str(MODEL), code=1)
    assert f"--draft-model {MODEL}: the draft needs" in r.stderr, r.stderr
    assert "more than the whole VRAM budget of 300.00 MiB" in r.stderr, r.stderr
