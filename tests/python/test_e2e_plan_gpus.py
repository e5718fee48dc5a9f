"""`ntransformer plan --gpus ... --split ...` without a GPU (per-GPU budgets
and rates given): the printed placement obeys the planner's rules (layer
ranges cover every layer once and follow the budgets, tensor shards cover
every KV head and FFN column once on block boundaries, no GPU over its
budget), auto picks the fastest printed split, and bad lists name the flag."""

import os
import re
import subprocess

import pytest

from project_paths import MODELS_DIR, NTRANSFORMER, require_built

MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
LAYERS, KV_HEADS, FFN = 30, 3, 1536  # SmolLM2-135M
# Each GPU holds the runner's buffers besides layers (123 MiB here: the 64 MiB
# upload buffer, landing buffers, GEMM scratch), so budgets start above that.
BASE = ["plan", "-c", "512", "--batch", "16", "--h2d-gbps", "8", "--disk-gbps", "2", "--gpu-gbps", "500"]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
PLACEMENT = re.compile(r"^  GPU (\d+) +layers (\S+)  KV heads (\S+)  FFN columns (\S+)  tiers (\d+) vram \+ (\d+) ram "
                       r"\+ (\d+) disk  VRAM ([\d.]+ \w+) of ([\d.]+ \w+)$", re.M)
PREDICTED = re.compile(r"^  (layer|tensor) +(?:([\d.]+) s = .*?(  <- chosen)?|cannot: (.*))$", re.M)


def plan(*extra, code=0, ram_budget="1GiB"):
    require_built(NTRANSFORMER)
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent")
    env = {**os.environ, "NT_MODELS_DIR": str(MODELS_DIR), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([str(NTRANSFORMER), *BASE, "--ram-budget", ram_budget, "-m", str(MODEL), *extra],
                       capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == code, r.stdout + r.stderr
    for crash in ("terminate called", "what():", "Segmentation"):
        assert crash not in r.stderr
    return r


def size(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def span(text):
    """'3-7' -> (3, 8); '4' -> (4, 5): half-open."""
    a, _, b = text.partition("-")
    return int(a), int(b or a) + 1


def placement(out):
    rows = []
    for m in PLACEMENT.finditer(out):
        rows.append({"gpu": int(m[1]), "layers": span(m[2]), "kv": span(m[3]), "ffn": span(m[4]),
                     "tiers": tuple(int(x) for x in m.groups()[4:7]), "vram": size(m[8]), "budget": size(m[9])})
    return rows


def predicted(out):
    """{split: seconds or None when it cannot be made}, and the chosen split."""
    times, chosen = {}, None
    for m in PREDICTED.finditer(out):
        times[m[1]] = float(m[2]) if m[2] else None
        if m[3]:
            chosen = m[1]
    return times, chosen


def covers(spans, end):
    """Half-open spans in order, contiguous from 0 to end."""
    position = 0
    for a, b in spans:
        assert a == position and b > a, spans
        position = b
    assert position == end, spans


def check_budgets(rows):
    for r in rows:
        assert r["vram"] <= r["budget"] * 1.0001, r  # sizes print with 2 decimals


def test_layer_split_covers_every_layer_once_and_follows_the_budgets():
    out = plan("--gpus", "0,1", "--vram-budget", "170MiB,270MiB", "--split", "layer").stdout
    rows = placement(out)
    assert [r["gpu"] for r in rows] == [0, 1], out
    covers([r["layers"] for r in rows], LAYERS)
    check_budgets(rows)
    for r in rows:
        assert sum(r["tiers"]) == r["layers"][1] - r["layers"][0], r
        assert r["kv"] == (0, KV_HEADS) and r["ffn"] == (0, FFN), "the layer split does not cut matrices"
    counts = [r["layers"][1] - r["layers"][0] for r in rows]
    assert counts[1] > counts[0], "the larger budget runs more layers"
    times, chosen = predicted(out)
    assert chosen == "layer" and set(times) == {"layer", "tensor"}, out


def test_tensor_split_covers_every_head_and_column_once():
    out = plan("--gpus", "1,0", "--vram-budget", "220MiB", "--split", "tensor").stdout
    rows = placement(out)
    assert [r["gpu"] for r in rows] == [1, 0], "GPUs in the order given"
    check_budgets(rows)
    covers([r["kv"] for r in rows], KV_HEADS)
    covers([r["ffn"] for r in rows], FFN)
    for r in rows:
        assert r["layers"] == (0, LAYERS), "every GPU runs every layer"
        assert r["ffn"][0] % 32 == 0, "ffn_down cut on a block boundary (Q4_1 and Q8_0 blocks of 32)"
        assert sum(r["tiers"]) == LAYERS


def test_tensor_split_streams_shards_from_ram_but_not_from_storage():
    # The runner streams a rank's cuts from pinned RAM: a budget that streams shards from RAM gets no note, one
    # whose RAM budget leaves layers on storage gets the note that the runner would refuse it.
    note = "streams a tensor split's cuts from pinned RAM only"
    out = plan("--gpus", "0,1", "--vram-budget", "180MiB", "--split", "tensor").stdout
    rows = placement(out)
    assert any(r["tiers"][1] > 0 for r in rows) and all(r["tiers"][2] == 0 for r in rows), out
    assert note not in out, out
    out = plan("--gpus", "0,1", "--vram-budget", "180MiB", "--split", "tensor", ram_budget="8MiB").stdout
    assert any(r["tiers"][2] > 0 for r in placement(out)), out
    assert note in out, out


def test_one_gpu_for_every_rank_is_the_test_mode_and_never_chosen():
    out = plan("--gpus", "0,0", "--vram-budget", "1GiB,1GiB", "--split", "tensor").stdout
    rows = placement(out)
    assert [r["gpu"] for r in rows] == [0, 0], out
    covers([r["kv"] for r in rows], KV_HEADS)
    out = plan("--gpus", "0,0", "--vram-budget", "1GiB,1GiB").stdout
    assert predicted(out)[1] == "layer", out


def test_auto_picks_the_fastest_printed_split():
    for peer in ("0.001", "1000"):
        out = plan("--gpus", "0,1", "--vram-budget", "220MiB", "--peer-gbps", peer).stdout
        times, chosen = predicted(out)
        feasible = {s: t for s, t in times.items() if t is not None}
        assert chosen == min(feasible, key=feasible.get), out
        assert placement(out), out
        if peer == "0.001":
            # 60 all-reduces against one hand-off over a crawling link.
            assert chosen == "layer", out


def test_tensor_split_that_cannot_be_cut_is_explained():
    # Three KV heads do not go round four GPUs.
    r = plan("--gpus", "0,1,2,3", "--vram-budget", "170MiB", "--split", "tensor", code=1)
    assert "tensor split over 4 GPUs" in r.stderr, r.stderr
    times, chosen = predicted(plan("--gpus", "0,1,2,3", "--vram-budget", "170MiB").stdout)
    assert times["tensor"] is None and chosen == "layer"


def test_a_gpu_too_small_is_named():
    r = plan("--gpus", "0,5", "--vram-budget", "270MiB,1MiB", "--split", "layer", code=1)
    assert "GPU 5" in r.stderr, r.stderr


@pytest.mark.parametrize("extra, message", [
    (["--gpus", "0,x", "--vram-budget", "1GiB"], "--gpus '0,x': 'x' is not a GPU index"),
    (["--gpus", "0,1,0", "--vram-budget", "1GiB", "--split", "tensor"], "GPU 0 is listed twice"),
    (["--gpus", "0,,1", "--vram-budget", "1GiB"], "--gpus '0,,1': an empty item"),
    (["--gpus", "0,1", "--vram-budget", "1GiB,2GiB,3GiB"], "3 values for 2 GPUs"),
    (["--vram-budget", "1GiB", "--split", "tensor"], "--split needs --gpus"),
    (["--gpus", "0,1", "--vram-budget", "1GiB", "--split", "rows"], "--split"),
])
def test_bad_values_name_the_flag(extra, message):
    r = plan(*extra, code=1)
    assert message in r.stderr, r.stderr


def test_without_a_gpu_or_budgets_the_plan_says_what_it_assumed():
    out = plan("--gpus", "0,1").stdout
    assert out.count("ASSUMED: a 24 GiB card, no GPU to ask; pass --vram-budget") >= 1, out


def ntransformer(*args):
    require_built(NTRANSFORMER)
    env = {**os.environ, "NT_MODELS_DIR": str(MODELS_DIR), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([str(NTRANSFORMER), *args], capture_output=True, text=True, timeout=60, env=env)
    for crash in ("terminate called", "what():", "Segmentation"):
        assert crash not in r.stderr
    return r


@pytest.mark.parametrize("args, message", [
    (["rank", "--gpus", "0", "--rank", "1", "--nccl-id", "id"], "at least two"),
    (["rank", "--gpus", "0,1", "--rank", "2", "--nccl-id", "id"], "are 1 to 1"),
    (["rank", "--gpus", "0,1", "--rank", "0", "--nccl-id", "id"], "are 1 to 1"),
    (["rank", "--gpus", "0,1", "--rank", "1"], "--nccl-id"),
    (["rank", "--gpus", "0,1", "--rank", "1", "--nccl-id", "id"], "GPU 1"),
    (["run", "--gpus", "0,1", "--split", "layer", "--nccl-id", "id", "-p", "x"], "add --split tensor"),
    (["run", "--nccl-id", "id", "-p", "x"], "add --split tensor"),
])
def test_process_per_gpu_flags_are_checked_before_any_gpu_is_needed(args, message):
    """`ntransformer rank` and --nccl-id: a wrong rank, a missing flag, or a split
    other than tensor is named; a rank without its GPU names the GPU."""
    r = ntransformer(*args)
    assert r.returncode == 1, r.stdout + r.stderr
    if message == "GPU 1" and "CUDA: off" in ntransformer("--version").stdout:
        message = "this build has no CUDA backend"  # a rank needs a GPU, which a CPU-only build cannot reach
    assert message in r.stderr, r.stderr
