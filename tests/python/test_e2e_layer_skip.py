"""Layer skip on stories260K, against the float64 reference
(tests/reference/llama_ref.py): `calibrate-skip` measures per layer the mean
over tokens of the cosine similarity between the layer's input and output
hidden states, as the reference's hidden states give them; `--layer-skip`
with a count of 0 changes nothing, and with a count k runs the model without
the k layers the skip list ranks first, as the reference does with those
layers removed. Bad input ends with an error naming the file or flag."""

import json
import math
import os
import re
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from gguf import GGUFReader  # noqa: E402

from project_paths import NTRANSFORMER, REFERENCE_DIR, SHARED_MODELS, convert_stories260k  # noqa: E402
from test_e2e_perplexity import reference_perplexity  # noqa: E402
from test_e2e_stories import golden, golden_story_file  # noqa: E402
from tokenizer_oracles import read_llama2c_tokenizer, sentencepiece_processor  # noqa: E402

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

BOS = 1
CTX = 64
# F32 weights and KV cache: the engine's hidden states are the reference's to
# float32 rounding, so a cosine agrees to about 1e-7.
COSINE_ABS = 1e-5
LOGITS_REL = 1e-5  # as test_e2e_stories's TIGHT_REL
PPL_REL = 1e-4     # as test_e2e_perplexity's


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("layer_skip"))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """The golden story three times: several windows of CTX, the last one partial."""
    return golden_story_file(tmp_path_factory.mktemp("layer_skip"))


def run(command, *args, code=0):
    result = subprocess.run([str(NTRANSFORMER), command, *map(str, args)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == code, f"exit {result.returncode}, stderr: {result.stderr}"
    for crash in ("terminate called", "Segmentation", "Aborted", "what():"):
        assert crash not in result.stderr
    return result


def calibrate(stories, text_file, out, *flags):
    run("calibrate-skip", "-m", stories, "-f", text_file, "-o", out, "-c", CTX, "--kv-f32", *flags)
    return json.loads(out.read_text())


def text_tokens(text_file):
    sp = sentencepiece_processor(*read_llama2c_tokenizer(SHARED_MODELS / "tok512.bin"))
    return [BOS] + sp.encode(text_file.read_text(encoding="utf-8"))


def reference_similarity(model, tokens, n_ctx, windows):
    """Per layer, the mean over every token of every window (from BOS) of cos(input, output)."""
    sums = np.zeros(model.config.n_layers)
    count = 0

    def on_layer(layer, x_in, x_out):
        cos = (x_in * x_out).sum(axis=1) / (np.linalg.norm(x_in, axis=1) * np.linalg.norm(x_out, axis=1))
        sums[layer] += cos.sum()

    for w in range(windows):
        window = [BOS] + tokens[w * n_ctx + 1:(w + 1) * n_ctx]
        llama_ref.forward(model, window, 0, llama_ref.KVCache(model.config.n_layers), on_layer)
        count += len(window)
    return sums / count, count


def tensor_digest(path):
    """FNV-1a 64 of the tensor directory, from the gguf package's reading of the file."""
    reader = GGUFReader(str(path))
    h = 0xcbf29ce484222325

    def feed(data):
        nonlocal h
        for byte in data:
            h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF

    for t in reader.tensors:
        feed(t.name.encode() + b"\0")
        feed(int(t.tensor_type).to_bytes(4, "little"))
        feed(len(t.shape).to_bytes(8, "little"))
        for d in t.shape:
            feed(int(d).to_bytes(8, "little", signed=True))
        feed((t.data_offset - reader.data_offset).to_bytes(8, "little"))
    return f"{h:016x}"


@pytest.fixture(scope="module")
def skip_list(stories, text_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("layer_skip") / "skip.json"
    return out, calibrate(stories, text_file, out)


@pytest.mark.parametrize("chunks", [0, 1])
def test_calibration_matches_the_reference_hidden_states(stories, text_file, tmp_path, chunks):
    data = calibrate(stories, text_file, tmp_path / "skip.json", *(["--chunks", chunks] if chunks else []))
    tokens = text_tokens(text_file)
    windows = chunks or math.ceil(len(tokens) / CTX)
    expected, count = reference_similarity(llama_ref.Model(str(stories)), tokens, CTX, windows)
    assert data["calibration"]["tokens"] == count and data["calibration"]["windows"] == windows
    assert data["calibration"]["context"] == CTX
    np.testing.assert_allclose(data["similarity"], expected, rtol=0, atol=COSINE_ABS)
    order = sorted(range(len(expected)), key=lambda layer: -expected[layer])
    gaps = np.diff(np.sort(expected))
    assert gaps.min() > 10 * COSINE_ABS, "layers too close to rank reliably; change the text"
    assert data["most_skippable_first"] == order


def test_skip_list_names_the_model(stories, skip_list):
    _, data = skip_list
    assert data["model"] == {"file": stories.name, "layers": 5, "tensor_digest": tensor_digest(stories)}


def test_skip_count_zero_changes_nothing(stories, skip_list, tmp_path):
    path, _ = skip_list
    common = ["-m", stories, "-p", "Once upon a time", "-n", 40, "--temp", 0, "--kv-f32", "--all-logits"]
    plain = run("run", *common, "--logits-out", tmp_path / "plain.f32")
    skip = run("run", *common, "--logits-out", tmp_path / "skip.f32", "--layer-skip", path, "--layer-skip-count", 0)
    assert skip.stdout == plain.stdout
    assert (tmp_path / "skip.f32").read_bytes() == (tmp_path / "plain.f32").read_bytes()
    assert "every pass leaves out 0 of 5 layers: none" in skip.stderr


def read_logits(path):
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        return np.fromfile(f, "<f4").reshape(header["shape"]).astype(np.float64)


def model_without(stories, skipped):
    model = llama_ref.Model(str(stories))
    model.layers = [layer for i, layer in enumerate(model.layers) if i not in skipped]
    return model


@pytest.mark.parametrize("count", [1, 2])
def test_skip_count_runs_the_model_without_the_top_ranked_layers(stories, skip_list, tmp_path, count):
    path, data = skip_list
    skipped = sorted(data["most_skippable_first"][:count])
    ids, _ = golden()
    prompt = [BOS] + ids[:20]
    out = tmp_path / "logits.f32"
    result = run("run", "-m", stories, "--teacher-ids", ",".join(map(str, prompt[1:])), "--raw", "-p", "",
                 "--kv-f32", "--all-logits", "--logits-out", out, "--layer-skip", path, "--layer-skip-count", count)
    assert f"leaves out {count} of 5 layers: {', '.join(map(str, skipped))}" in result.stderr
    got = read_logits(out)
    expected = llama_ref.generate(model_without(stories, skipped), prompt, 0)[0]
    assert got.shape == expected.shape
    assert np.linalg.norm(got - expected) <= LOGITS_REL * np.linalg.norm(expected)
    full = llama_ref.generate(llama_ref.Model(str(stories)), prompt, 0)[0]
    assert np.linalg.norm(got - full) > 1e-3 * np.linalg.norm(full), "skipping layers changed nothing"


def test_perplexity_with_skipped_layers_is_the_reference_without_them(stories, skip_list, text_file):
    path, data = skip_list
    skipped = sorted(data["most_skippable_first"][:2])
    result = run("perplexity", "-m", stories, "-f", text_file, "-c", CTX, "--kv-f32", "--layer-skip", path,
                 "--layer-skip-count", 2)
    expected, _ = reference_perplexity(model_without(stories, skipped), text_tokens(text_file), CTX)
    assert float(re.match(r"PPL = ([\d.]+)", result.stdout)[1]) == pytest.approx(expected, rel=PPL_REL)


def test_threshold_skips_the_layers_at_least_that_similar(stories, skip_list):
    path, data = skip_list
    sim = data["similarity"]
    ranked = data["most_skippable_first"]
    threshold = (sim[ranked[1]] + sim[ranked[2]]) / 2  # between the second and the third
    result = run("bench", "-m", stories, "-p", 8, "-n", 4, "-r", 1, "--layer-skip", path,
                 "--layer-skip-threshold", threshold)
    assert f"leaves out 2 of 5 layers: {', '.join(map(str, sorted(ranked[:2])))}" in result.stderr
    assert "| tg4 @ 0 |" in result.stdout


def test_self_draft_with_layer_skip_is_exact_greedy(stories, skip_list):
    path, data = skip_list
    common = ["-m", stories, "-p", "Once upon a time", "-n", 80, "--temp", 0]
    plain = run("run", *common)
    spec = run("run", *common, "--draft-self", "--layer-skip", path, "--layer-skip-count", 2)
    assert spec.stdout == plain.stdout
    skipped = ", ".join(map(str, sorted(data["most_skippable_first"][:2])))
    assert f"the draft leaves out 2 of 5 layers: {skipped}; every layer verifies" in spec.stderr
    assert "tokens per pass" in spec.stderr and "layer skip (lossy)" not in spec.stderr


def edited(skip_list, tmp_path, edit):
    path, data = skip_list
    data = json.loads(json.dumps(data))
    edit(data)
    out = tmp_path / "edited.json"
    out.write_text(json.dumps(data))
    return out


def thirty_layers(data):
    """A well-formed list for a model of 30 layers."""
    data["model"]["layers"] = 30
    data["similarity"] = [0.5] * 30
    data["most_skippable_first"] = list(range(30))


@pytest.mark.parametrize("edit, message", [
    (thirty_layers, "calibrated on 'stories260K.gguf' with 30 layers, but 'stories260K.gguf' has 5"),
    (lambda d: d["model"].update(tensor_digest="0123456789abcdef"), "tensor directory 0123456789abcdef"),
    (lambda d: d.pop("similarity"), "the field 'similarity' is missing"),
    (lambda d: d["model"].update(layers="five"), "the field 'model/layers' has the wrong type"),
    (lambda d: d.update(most_skippable_first=[0, 1, 1, 2, 3]), "'most_skippable_first' must list each of the 5 layers once"),
    (lambda d: d.update(format="something else"), "not a layer-skip file"),
])
def test_a_skip_list_that_does_not_fit_is_refused(stories, skip_list, tmp_path, edit, message):
    path = edited(skip_list, tmp_path, edit)
    stderr = run("perplexity", "-m", stories, "-f", path, "--layer-skip", path, "--layer-skip-count", 1, code=1).stderr
    assert message in stderr and str(path) in stderr


def test_flag_errors_name_the_flag(stories, skip_list, tmp_path):
    path, _ = skip_list
    base = ["-m", stories, "-p", "Hi", "-n", 2, "--temp", 0]
    cases = [
        (["--layer-skip", path], "--layer-skip needs --layer-skip-count N or --layer-skip-threshold T"),
        (["--layer-skip-count", 1], "--layer-skip"),
        (["--layer-skip", path, "--layer-skip-count", 5], "a layer-skip count of 5: the model has 5 layers, so skip 0 to 4"),
        (["--layer-skip", path, "--layer-skip-count", 1, "--layer-skip-threshold", 0.5], "excludes"),
        (["--layer-skip", path, "--layer-skip-threshold", -1], "skips all 5 layers"),
        (["--layer-skip", tmp_path / "absent.json", "--layer-skip-count", 1], "absent.json"),
        (["--layer-skip", path, "--layer-skip-count", 1, "--draft-self", 2], "--draft-self 2 with --layer-skip"),
        (["--layer-skip", path, "--layer-skip-count", 0, "--draft-self"], "the draft would be the whole model"),
    ]
    for flags, message in cases:
        assert message in run("run", *base, *flags, code=1).stderr, flags
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    stderr = run("run", *base, "--layer-skip", bad_json, "--layer-skip-count", 1, code=1).stderr
    assert f"{bad_json}: not a layer-skip file" in stderr


def test_calibration_errors_name_the_file(stories, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "the file is empty" in run("calibrate-skip", "-m", stories, "-f", empty, code=1).stderr
    missing = tmp_path / "missing.txt"
    assert "missing.txt" in run("calibrate-skip", "-m", stories, "-f", missing, code=1).stderr
    out = tmp_path / "no_such_dir" / "skip.json"
    story = tmp_path / "story.txt"
    story.write_text("Once upon a time there was a cat.")
    assert str(out) in run("calibrate-skip", "-m", stories, "-f", story, "-o", out, code=1).stderr


def test_a_text_shorter_than_one_window_is_calibrated_with_a_warning(stories, text_file, tmp_path):
    story = tmp_path / "story.txt"
    story.write_text("Once upon a time there was a cat.")
    n = len(text_tokens(story))
    short = run("calibrate-skip", "-m", stories, "-f", story, "-o", tmp_path / "short.json", "-c", CTX).stderr
    assert f"warning: -f {story} is {n} tokens, less than one window of {CTX}" in short, short
    whole = run("calibrate-skip", "-m", stories, "-f", text_file, "-o", tmp_path / "whole.json", "-c", CTX).stderr
    assert "warning" not in whole, whole


def test_help_says_layer_skip_is_lossy():
    for command in ("run", "perplexity", "bench"):
        help_text = run(command, "--help").stdout
        assert "--layer-skip" in help_text and "LOSSY" in help_text
