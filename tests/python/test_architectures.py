"""The architectures beside Llama (Qwen2, Qwen3, Gemma 3) and the mixtures of
experts (Mixtral, Qwen3-MoE, gpt-oss) on the CPU, against the float64 numpy
reference (tests/reference/), on random-weight files that `make-model` writes
with each family's real layout: every position's logits of a prompt longer
than the sliding windows (Gemma 3's, gpt-oss's), greedy continuations, and the
spec read back from the file. gpt-oss's logits are also shown to depend on its
attention sinks and its window: the reference without either misses them by
far more than the comparison allows. An unsupported architecture gets an
error that names it."""

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

FAMILIES = ["tiny-qwen2", "tiny-qwen3", "tiny-gemma3", "tiny-mixtral", "tiny-qwen3moe", "tiny-gpt-oss"]
WINDOW = 16       # tiny-gemma3's and tiny-gpt-oss's sliding window (model/presets.cpp)
PROMPT_LEN = 40   # well past the window
TIGHT_REL = 1e-5  # relative L2 error of a row of logits, F32 weights and KV cache
# gpt-oss's experts are MXFP4 in every file, whose products the engine takes
# with 8-bit activations: the reference models that rounding (--act-q8) and
# matches to 8e-7 (scalar, AVX2 and AVX-512 kernels). The bound leaves room for
# an input that float32 and float64 round to different 8-bit steps, and is
# still 30x below what ignoring the sinks or the window costs (3.5e-2 and more).
ACT_Q8_REL = 1e-3
ARITHMETIC = {"tiny-gpt-oss": llama_ref.Arithmetic(act_q8=True)}
# A prompt text for the families that add no BOS (gpt-oss), whose empty prompt holds no token.
NO_BOS_PROMPT = "Once"
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
            models[preset] = llama_ref.Model(str(family_file(preset)), ARITHMETIC.get(preset, llama_ref.Arithmetic()))
        return models[preset]

    return load


def adds_bos(path):
    field = gguf.GGUFReader(str(path)).fields.get("tokenizer.ggml.add_bos_token")
    return field is None or bool(field.parts[field.data[0]][0])


def prompt_text(path):
    """The run's prompt: empty (BOS alone) where the file adds BOS, else a word."""
    return "" if adds_bos(path) else NO_BOS_PROMPT


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


def teacher_forced(path, tmp_path):
    """Our logits at every position of the prompt, then PROMPT_LEN random ids
    read after it; and all those ids (the prompt's as we tokenized it)."""
    ids = [int(t) for t in np.random.default_rng(11).integers(10, 4000, size=PROMPT_LEN)]
    listing = tmp_path / "ids.txt"
    listing.write_text(json.dumps(ids) + "\n")
    run(path, "-p", prompt_text(path), "--teacher-ids", listing, "--all-logits", "--logits-out", tmp_path / "l.f32",
        "--ids-out", tmp_path / "ids.json")
    prompt = json.loads((tmp_path / "ids.json").read_text())["prompt"]
    return read_logits(tmp_path / "l.f32"), prompt + ids


@pytest.mark.parametrize("preset", FAMILIES)
def test_every_position_matches_the_float64_reference(preset, family_file, reference, tmp_path):
    path = family_file(preset)
    ours, ids = teacher_forced(path, tmp_path)
    model = reference(preset)
    model.min_route_margin = math.inf
    expected, _ = llama_ref.generate(model, ids, 0)
    assert model.min_route_margin > MIN_ROUTE_MARGIN, "experts near-tied in a routing: choose another seed"
    assert ours.shape == expected.shape
    errors = rel_error(ours, expected)
    bound = ACT_Q8_REL if model.arithmetic.act_q8 else TIGHT_REL
    assert errors.max() <= bound, f"worst row {int(errors.argmax())}: {errors.max():.2e}"


@pytest.mark.parametrize("ignored", ["ignore_sinks", "ignore_window"])
def test_gpt_oss_logits_need_the_sinks_and_the_window(ignored, family_file, tmp_path):
    """The reference without the sinks (every row) or without the window (the
    rows past it) misses our logits by far more than ACT_Q8_REL: the
    comparison above would fail if the engine ignored either."""
    path = family_file("tiny-gpt-oss")
    ours, ids = teacher_forced(path, tmp_path)
    model = llama_ref.Model(str(path), ARITHMETIC["tiny-gpt-oss"])
    setattr(model, ignored, True)
    without, _ = llama_ref.generate(model, ids, 0)
    rows = slice(WINDOW, None) if ignored == "ignore_window" else slice(None)
    assert rel_error(ours, without)[rows].min() > 10 * ACT_Q8_REL


@pytest.mark.parametrize("preset", FAMILIES)
def test_greedy_continuation_matches_the_reference(preset, family_file, reference, tmp_path):
    path = family_file(preset)
    n = PROMPT_LEN
    run(path, "-p", prompt_text(path), "-n", n, "--ignore-eos", "--ids-out", tmp_path / "ids.json")
    written = json.loads((tmp_path / "ids.json").read_text())
    prompt, ours = written["prompt"], written["generated"]
    _, expected = llama_ref.generate(reference(preset), prompt, n)
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
        "tiny-gpt-oss": f"qkv bias, output bias, attention sinks, clamped SwiGLU, sliding window {WINDOW} (rope theta "
                        "150000) on 2 of 4 layers, mixture of 8 experts (4 used, FFN 256, biases, softmax over the chosen), "
                        "rope over halves",
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
