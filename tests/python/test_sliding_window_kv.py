"""Sliding-window layers keep only their window: Gemma 3's and gpt-oss's
local layers cache their last positions (plus a margin to step back into) in
a pool of their own whose pages are reused as the sequence moves on, instead
of a whole context per layer. The runs here are several times that pool, so
its pages are reused many times over; every token and every logit must equal
those of --swa-full, which keeps every position of every layer (its window
attention is checked against the float64 reference in test_architectures)."""

import json
import re
import subprocess

import numpy as np
import pytest

from project_paths import NTRANSFORMER, model_maker

PRESETS = ["tiny-gemma3", "tiny-gpt-oss"]
LENGTH = 1500  # positions a run covers: several times the window pool (window 16, margin 256, chunk 256)


@pytest.fixture(scope="module")
def family_file(tmp_path_factory):
    return model_maker(tmp_path_factory, "f32", 8)


def run(path, *args):
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(path), "--device", "cpu", "--raw", "--temp", "0",
                             "-c", "2048", *map(str, args)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result


def window_positions(stderr):
    """The window pool's positions, as the run's model line says them; None without one."""
    found = re.search(r"(\d+) sliding-window layers: (\d+) positions", stderr)
    return int(found.group(2)) if found else None


def generated(path, tmp_path, *args):
    out = tmp_path / "ids.json"
    result = run(path, "-p", "Once", "-n", LENGTH, "--ignore-eos", "--ids-out", out, *args)
    return json.loads(out.read_text())["generated"], result.stderr


@pytest.mark.parametrize("preset", PRESETS)
def test_decoding_through_the_window_pool_is_decoding_with_every_position(preset, family_file, tmp_path):
    path = family_file(preset)
    windowed, stderr = generated(path, tmp_path, "--kv-f32")
    full, full_stderr = generated(path, tmp_path, "--kv-f32", "--swa-full")
    pool = window_positions(stderr)
    assert pool is not None and pool * 2 < LENGTH, stderr
    assert window_positions(full_stderr) is None
    assert windowed == full


@pytest.mark.parametrize("preset", PRESETS)
def test_prompt_chunks_through_the_window_pool_give_every_logit_of_swa_full(preset, family_file, tmp_path):
    """A prompt of many chunks: each chunk claims its positions in the window
    pool, releasing what the chunk before it no longer needs."""
    ids = [int(t) for t in np.random.default_rng(5).integers(10, 4000, size=LENGTH)]
    listing = tmp_path / "ids.txt"
    listing.write_text(json.dumps(ids) + "\n")
    logits = []
    for extra in ([], ["--swa-full"]):
        out = tmp_path / f"logits{len(extra)}.f32"
        run(path := family_file(preset), "-p", "Once", "--teacher-ids", listing, "--all-logits", "--logits-out", out,
            "--kv-f32", *extra)
        with open(out, "rb") as f:
            f.readline()
            logits.append(np.fromfile(f, dtype="<f4"))
    assert logits[0].size > 0
    assert np.array_equal(logits[0], logits[1]), path


@pytest.mark.parametrize("preset", PRESETS)
def test_a_draft_model_steps_back_inside_the_window_pool(preset, family_file, tmp_path):
    """Speculation with a draft model whose own cache has a window pool: its
    rejected drafts step back, and the output is still plain greedy decoding."""
    path = family_file(preset)
    plain, _ = generated(path, tmp_path, "--kv-f32")
    drafted, stderr = generated(path, tmp_path, "--kv-f32", "--draft-model", path, "--draft-max", 8)
    assert drafted == plain, stderr


def test_the_server_reports_the_window_pool_beside_the_kv_pool(family_file):
    """/metrics counts the window pool's pages apart: fewer than the KV pool's,
    and held once a request has run (its slot keeps the prompt's cache)."""
    test_server = pytest.importorskip("test_server")
    path = family_file("tiny-gemma3")
    with test_server.serving("-np", 2, model=path) as server:
        assert server.metric("kv_window_pool_pages_used") == 0
        server.openai().completions.create(model=path.stem, prompt="Once upon a time", max_tokens=40, temperature=0)
        assert 0 < server.metric("kv_window_pool_pages") < server.metric("kv_pool_pages")
        assert 0 < server.metric("kv_window_pool_pages_used") <= server.metric("kv_window_pool_pages")
