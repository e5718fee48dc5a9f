"""The architectures beside Llama (Qwen2, Qwen3, Gemma 3) and the mixtures of
experts (Mixtral, Qwen3-MoE) on the CPU, against the float64 numpy reference
(tests/reference/), on random-weight files that `make-model` writes with each
family's real layout: every position's logits of a prompt longer than Gemma 3's
sliding window, greedy continuations, and the spec read back from the file. An
unsupported architecture gets an error that names it."""

import json
import math
import subprocess
import sys

import gguf
import numpy as np
import pytest

from project_paths import NTRANSFORMER, REFERENCE_DIR, model_maker, require_built

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

FAMILIES = ["tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-mixtral", "tiny-qwen3moe"]
WINDOW = 16       # tiny-gemma3's sliding window (model/presets.cpp)
PROMPT_LEN = 40   # well past the window
TIGHT_REL = 1e-5  # relative L2 error of a row of logits, F32 weights and KV cache
MIN_MARGIN = 1e-3  # greedy paths are compared up to the first reference margin below this
MIN_ROUTE_MARGIN = 1e-4  # a mixture's experts must be chosen by more than rounding (router logits)


@pytest.fixture(scope="module")
def family_file(tmp_path_factory):
    return model_maker(tmp_path_factory, "f32", 8)


@pytest.fixture(scope="module")
def reference(family_file):
    models = {}

    def load(preset):
        if preset not in models:
            models[preset] = llama_ref.Model(str(family_file(preset)))
        return models[preset]

    return load


def bos_prefix(path):
    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("tokenizer.ggml.add_bos_token")
    if field is not None and not bool(field.parts[field.data[0]][0]):
        return []
    bos = reader.fields["tokenizer.ggml.bos_token_id"]
    return [int(bos.parts[bos.data[0]][0])]


def run(path, *args):
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(path), "--device", "cpu", "--raw", "--kv-f32", "--temp", "0",
                             *map(str, args)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result


def read_logits(path):
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        rows = np.fromfile(f, dtype="<f4")
    return rows.reshape(header["shape"]).astype(np.float64)


def rel_error(actual, expected):
    return np.linalg.norm(actual - expected, axis=-1) / np.linalg.norm(expected, axis=-1)


@pytest.mark.parametrize("preset", FAMILIES)
def test_every_position_matches_the_float64_reference(preset, family_file, reference, tmp_path):
    path = family_file(preset)
    ids = [int(t) for t in np.random.default_rng(11).integers(10, 4000, size=PROMPT_LEN)]
    listing = tmp_path / "ids.txt"
    listing.write_text(json.dumps(ids) + "\n")
    run(path, "-p", "", "--teacher-ids", listing, "--all-logits", "--logits-out", tmp_path / "l.f32")
    ours = read_logits(tmp_path / "l.f32")
    model = reference(preset)
    model.min_route_margin = math.inf
    expected, _ = llama_ref.generate(model, bos_prefix(path) + ids, 0)
    assert model.min_route_margin > MIN_ROUTE_MARGIN, "experts near-tied in a routing: choose another seed"
    assert ours.shape == expected.shape
    errors = rel_error(ours, expected)
    assert errors.max() <= TIGHT_REL, f"worst row {int(errors.argmax())}: {errors.max():.2e}"


@pytest.mark.parametrize("preset", FAMILIES)
def test_greedy_continuation_matches_the_reference(preset, family_file, reference, tmp_path):
    path = family_file(preset)
    prompt = bos_prefix(path)
    n = PROMPT_LEN
    _, expected = llama_ref.generate(reference(preset), prompt, n)
    run(path, "-p", "", "-n", n, "--ignore-eos", "--ids-out", tmp_path / "ids.json")
    ours = json.loads((tmp_path / "ids.json").read_text())["generated"]
    # Compare up to the first near-tie on the reference's path: row i of
    # `rows` chose expected[i].
    path_logits, _ = llama_ref.generate(reference(preset), prompt + expected, 0)
    rows = path_logits[len(prompt) - 1:]
    # make-model tiles matrices from a pool of 512 rows, so tokens 512 apart
    # tie exactly (in every engine: both take the lower id); the margin is to
    # the best other value.
    for i, row in enumerate(rows[:n]):
        values = np.unique(row)
        if values[-1] - values[-2] < MIN_MARGIN:
            n = i + 1  # this position's token may go either way
            break
    assert n > WINDOW, "the reference's path meets a near tie inside the window: choose another seed"
    assert ours[:n - 1] == expected[:n - 1]


@pytest.mark.parametrize("preset", FAMILIES)
def test_the_spec_reads_back_from_the_file(preset, family_file):
    out = subprocess.run([str(NTRANSFORMER), "inspect", str(family_file(preset))], capture_output=True, text=True,
                         check=True).stdout
    blocks = {
        "tiny-qwen2": "qkv bias, rope over halves",
        "tiny-qwen3": "q/k norm, rope over halves",
        "tiny-gemma3": f"q/k norm, post norms, GeGLU, sliding window {WINDOW} (rope theta 10000) on 5 of 6 layers, "
                       "rope over halves, embeddings x 16",
        "tiny-mixtral": "mixture of 8 experts (2 used, FFN 256)",
        "tiny-qwen3moe": "q/k norm, mixture of 8 experts (2 used, FFN 256), rope over halves",
    }
    assert f"layer blocks     {blocks[preset]}" in out


def test_an_unsupported_architecture_is_named(tmp_path):
    require_built(NTRANSFORMER)
    path = tmp_path / "mamba.gguf"
    writer = gguf.GGUFWriter(str(path), "mamba")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(path), "-p", "hi", "-n", "1"], capture_output=True,
                            text=True)
    assert result.returncode != 0
    assert "architecture 'mamba' is not supported (supported: llama, qwen2, qwen3, qwen3moe, gemma3, gpt-oss)" in result.stderr
    assert str(path) in result.stderr
