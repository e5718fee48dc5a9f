"""calibrate-experts counts each layer's routing over a text; the counts equal
the float64 reference's routing of the same token ids (tiny-qwen3moe, F32
weights, every choice clear of rounding), and `plan --expert-counts` places
the most chosen experts in VRAM and predicts the share of choices they take,
computed here from the file. Counts made on one model are refused by
another, naming the file."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from project_paths import NTRANSFORMER, REFERENCE_DIR, model_maker

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

TEXT = ("The lighthouse keeper climbed the stairs each evening to light the lamp. Ships passed in the dark, and "
        "their captains trusted the beam. One winter night a storm rose from the sea, and the keeper stayed awake "
        "until dawn, watching the waves break against the rocks below.")
MIN_ROUTE_MARGIN = 1e-4  # the reference's choices must clear rounding for a count to be comparable


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return model_maker(tmp_path_factory, "f32", 8)


@pytest.fixture(scope="module")
def calibrated(model, tmp_path_factory):
    work = tmp_path_factory.mktemp("calibration")
    text = work / "text.txt"
    text.write_text(TEXT)
    out = work / "counts.json"
    result = subprocess.run([str(NTRANSFORMER), "calibrate-experts", "-m", str(model("tiny-qwen3moe")), "-f", str(text),
                             "-o", str(out), "-c", "256", "-t", "2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return text, json.loads(out.read_text()), out


def token_ids(path, text):
    result = subprocess.run([str(NTRANSFORMER), "tokenize", "-m", str(path), "-f", str(text), "--ids"],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def test_counts_equal_the_reference_routing(model, calibrated):
    text, counts, _ = calibrated
    path = model("tiny-qwen3moe")
    ids = token_ids(path, text)
    assert len(ids) < 256, "one window"
    reference = llama_ref.Model(str(path))
    llama_ref.forward(reference, ids, 0, llama_ref.KVCache(reference.config.n_layers))
    assert reference.min_route_margin > MIN_ROUTE_MARGIN, "experts near-tied in a routing: choose another text"
    assert counts["calibration"]["tokens"] == len(ids)
    k = reference.config.n_experts_used
    for layer, row in enumerate(counts["counts"]):
        assert row == reference.route_counts[layer].tolist(), f"layer {layer}"
        assert sum(row) == k * len(ids)


def plan_hit_rate(path, budget, *extra):
    result = subprocess.run([str(NTRANSFORMER), "plan", "-m", str(path), "--vram-budget", budget, "--ram-budget", "1GiB",
                             "-c", "256", "--h2d-gbps", "8", "--gpu-gbps", "500", *extra],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    placed = next(line for line in result.stdout.splitlines() if line.strip().startswith("experts ("))
    slots = int(placed.split("(")[1].split(" of ")[0])
    hit = next(line for line in result.stdout.splitlines() if line.strip().startswith("in VRAM"))
    return slots, float(hit.split()[2].rstrip("%")), result.stdout


def test_plan_places_the_most_chosen_experts(model, calibrated):
    _, counts, out = calibrated
    path = model("tiny-qwen3moe")
    # A budget between all experts and none: "total" less the experts, then
    # room for a dozen and the landing buffer a miss copies into (one expert's
    # file bytes, this model's device bytes too).
    slots_all, _, roomy = plan_hit_rate(path, "2GiB")
    expert_row = next(line for line in roomy.splitlines() if line.strip().startswith("experts ("))
    total_line = next(line for line in roomy.splitlines() if line.strip().startswith("total"))
    unit = {"KiB": 2**-10, "MiB": 1}
    each = float(expert_row.split(", ")[1].split()[0]) * unit[expert_row.split(", ")[1].split()[1]]
    fixed = float(total_line.split()[1]) * unit[total_line.split()[2]] - slots_all * each
    budget = f"{fixed + 13.5 * each:.3f}MiB"
    slots, uniform, _ = plan_hit_rate(path, budget)
    assert slots == 12 and math.isclose(uniform, round(100 * 12 / slots_all, 1))
    slots, hit, text = plan_hit_rate(path, budget, "--expert-counts", str(out))
    flat = np.array(counts["counts"]).ravel()
    order = sorted(range(len(flat)), key=lambda x: (-flat[x], x))
    expected = 100 * flat[order[:slots]].sum() / flat.sum()
    assert math.isclose(hit, round(expected, 1), abs_tol=0.051), text
    assert hit > uniform, "the most chosen experts take more than their share"


def test_counts_of_another_model_are_refused(model, calibrated):
    _, _, out = calibrated
    result = subprocess.run([str(NTRANSFORMER), "plan", "-m", str(model("tiny-mixtral")), "--vram-budget", "2GiB",
                             "--expert-counts", str(out), "--h2d-gbps", "8", "--gpu-gbps", "500"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert f"{out}: calibrated on" in result.stderr, result.stderr


def test_a_dense_model_has_nothing_to_count(model, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    result = subprocess.run([str(NTRANSFORMER), "calibrate-experts", "-m", str(model("tiny-qwen3")), "-f", str(text),
                             "-o", str(tmp_path / "c.json")], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "has no mixture of experts" in result.stderr, result.stderr


def test_run_checks_the_counts_it_is_given(model, calibrated):
    _, _, out = calibrated
    base = [str(NTRANSFORMER), "run", "--device", "cpu", "-p", "Once", "-n", "2", "--expert-counts", str(out), "-m"]
    ran = subprocess.run(base + [str(model("tiny-qwen3moe"))], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    dense = subprocess.run(base + [str(model("tiny-qwen3"))], capture_output=True, text=True, timeout=120)
    assert dense.returncode != 0
    assert "has no mixture of experts" in dense.stderr, dense.stderr
    other = subprocess.run(base + [str(model("tiny-mixtral"))], capture_output=True, text=True, timeout=120)
    assert other.returncode != 0
    assert f"{out}: calibrated on" in other.stderr, other.stderr
