"""End to end on a real model: SmolLM2-135M-Instruct (Q4_1 matrices, Q8_0
embedding/output head, 30 layers) on the CPU engine against the float64
reference (tests/reference/llama_ref.py, dequantizing through the PyPI gguf
package). Prompt ids come from our tokenizer (it has its own oracle tests).

What can be held how tightly, measured:
- Without any rounding step (weights re-encoded to F16, which take f32
  activations, and an F32 KV cache) the engine matches the float64 reference
  to float32 rounding through all 30 layers: a tight bound.
- The shipped Q4_1 model rounds every matrix product's input to 8 bits, like
  every llama.cpp-family CPU engine, and by default its KV cache to float16.
  That moves the logits 1-10% (relative L2; up to ~20% at a few positions)
  from exact float64: a loose bound. The reference's --act-q8/--kv-f16
  arithmetic models these roundings exactly (single products agree to 7e-7:
  test_e2e_quant_types), but over 30 layers the model is chaotic under
  rounding: in the act-q8 reference itself, a 1e-7 relative change of the
  embeddings moves the logits by 2.5% (mean; 6.7% worst), and the engine
  (float32) lands a few roundings on the other side of a step than float64
  does, after which the two carry independent rounding noise. So the engine is
  held to the act-q8 reference statistically (its error against exact
  arithmetic has the modelled size) and on greedy paths whose top-2 margins
  exceed the measured noise.
"""

import functools
import json
import os
import subprocess
import sys

# The reference's many small float64 products run faster on one BLAS thread,
# and do not fight the engine's threads or a parallel ctest for the 2 CI cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from project_paths import BUILD_DIR, MODELS_DIR, NTRANSFORMER, REFERENCE_DIR, require_built  # noqa: E402

MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
LOGITS_TOOL = BUILD_DIR / "tests" / "logits_tool"
GENERATE_TOOL = BUILD_DIR / "tests" / "generate_tool"
TOKENIZE_TOOL = BUILD_DIR / "tests" / "tokenize_tool"

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

# Prompts whose every position's logits are compared (63 positions in all).
LOGIT_PROMPTS = {
    "fact": {"op": "encode", "text": "The capital of France is"},
    "code": {"op": "encode", "text": "def fibonacci(n):"},
    "story": {"op": "encode", "text": "Once upon a time, in a small village by the sea, there lived"},
    "chat": {"op": "chat", "messages": [{"role": "user", "content": "What is 2+2?"}]},
}
PATHS = {"prefill": [], "decode": ["--step"]}

# Q4_1 model, engine (F16 KV cache) vs plain float64, relative L2 error per
# position. Measured over the 4 prompts x 2 paths, with the AVX2/AVX-512 and
# the scalar kernels: worst position 0.25 (in the chat template), mean per
# prompt <= 0.051.
PLAIN_WORST = 0.4
PLAIN_MEAN = 0.08
# The same against the act-q8+kv-f16 reference, whose own rounding noise adds
# up with the engine's: worst position measured 0.35, mean per prompt <= 0.083.
MODELLED_WORST = 0.5
MODELLED_MEAN = 0.12
# Where the reference's top-2 logit margin is at least this, the engine must
# pick the same token. The measured error of a top-2 margin (engine vs either
# reference, on 6 prompts extended by 32 generated tokens, both paths) is at
# most 0.70 logits, 99th percentile <= 0.50.
CONFIDENT_MARGIN = 1.5
# Engine error vs plain float64 over the act-q8+kv-f16 reference's error vs
# plain float64, pooled over all positions: the engine's deviation from exact
# arithmetic is the modelled 8-bit/float16 noise, not more (measured
# 0.87..1.05 with either kernel set and path; 0.56..1.24 for single prompts).
NOISE_RATIO = (0.6, 1.6)
# F16 re-encoding with an F32 KV cache vs plain float64: measured <= 4.8e-6.
F16_TIGHT_REL = 5e-5

# Greedy continuations compared token for token with the references': prompts
# whose top-2 margin in exact float64 stays >= CONFIDENT_MARGIN for all
# GREEDY_TOKENS steps (measured minimum: 1.90, 2.31, 1.88 logits), so that
# rounding noise, the engine's or the act-q8 reference's (measured minimum
# margins along its path: 1.73, 2.27, 1.85), cannot flip a choice. The margins
# are taken from exact float64 because they are reproducible: the act-q8
# reference's own rounding noise depends on BLAS summation order.
GREEDY_PROMPTS = ["1, 2, 3, 4, 5, 6, 7, 8,", "2, 4, 6, 8, 10, 12,", "101, 102, 103, 104,"]
GREEDY_TOKENS = 32


def rel_error(actual, expected):
    return np.linalg.norm(actual - expected, axis=-1) / np.linalg.norm(expected, axis=-1)


def top2_margin(logits):
    top = np.sort(logits, axis=-1)
    return top[..., -1] - top[..., -2]


@pytest.fixture(scope="module")
def tools():
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent (fetch it with scripts/fetch_default_model.sh)")
    require_built(NTRANSFORMER, LOGITS_TOOL, GENERATE_TOOL, TOKENIZE_TOOL)


def tokenize(requests):
    result = subprocess.run([str(TOKENIZE_TOOL), str(MODEL)], input="".join(json.dumps(r) + "\n" for r in requests),
                            capture_output=True, text=True, check=True)
    return [json.loads(line)["ids"] for line in result.stdout.splitlines()]


def engine_logits(model, prompts, flags, folder):
    """Engine logits of each prompt (each its own context), one call for all."""
    out = folder / "logits.f32"
    subprocess.run([str(LOGITS_TOOL), str(model), ";".join(",".join(map(str, p)) for p in prompts), str(out), *flags],
                   check=True)
    rows = np.fromfile(out, dtype=np.float32).reshape(sum(map(len, prompts)), -1).astype(np.float64)
    return np.split(rows, np.cumsum([len(p) for p in prompts])[:-1])


class Reference:
    """The float64 reference of one model file, with results cached for the session."""

    def __init__(self, path):
        self.model = llama_ref.Model(str(path))

    @functools.cache
    def logits(self, prompt, step=False, act_q8=False, kv_f16=False):
        self.model.arithmetic = llama_ref.Arithmetic(act_q8=act_q8, kv_f16=kv_f16)
        return llama_ref.generate(self.model, list(prompt), 0, step=step)[0]

    @functools.cache
    def greedy(self, prompt, n, act_q8=False, kv_f16=False):
        """Greedy ids and the top-2 margin of each choice."""
        self.model.arithmetic = llama_ref.Arithmetic(act_q8=act_q8, kv_f16=kv_f16)
        cache = llama_ref.KVCache(self.model.config.n_layers)
        last = llama_ref.forward(self.model, list(prompt), 0, cache)[-1]
        ids, margins = [], []
        for i in range(n):
            ids.append(int(np.argmax(last)))
            margins.append(top2_margin(last))
            last = llama_ref.forward(self.model, [ids[-1]], len(prompt) + i, cache)[-1]
        return ids, np.array(margins)


@pytest.fixture(scope="module")
def reference(tools):
    return Reference(MODEL)


@pytest.fixture(scope="module")
def prompts(tools):
    return dict(zip(LOGIT_PROMPTS, map(tuple, tokenize(LOGIT_PROMPTS.values()))))


@pytest.mark.parametrize("path", PATHS)
def test_logits_within_loose_bound_of_float64_reference(reference, prompts, tmp_path, path):
    engine = engine_logits(MODEL, list(prompts.values()), PATHS[path], tmp_path)
    for (name, ids), logits in zip(prompts.items(), engine):
        expected = reference.logits(ids)
        rel = rel_error(logits, expected)
        assert rel.max() <= PLAIN_WORST, f"{name}: position {rel.argmax()} off by {rel.max():.3f}"
        assert rel.mean() <= PLAIN_MEAN, f"{name}: mean error {rel.mean():.3f}"
        confident = top2_margin(expected) >= CONFIDENT_MARGIN
        disagree = np.flatnonzero(confident & (logits.argmax(-1) != expected.argmax(-1)))
        assert disagree.size == 0, f"{name}: confident positions {disagree.tolist()} pick another token"


@pytest.mark.parametrize("path", PATHS)
def test_error_is_the_modelled_rounding_noise(reference, prompts, tmp_path, path):
    engine = engine_logits(MODEL, list(prompts.values()), PATHS[path], tmp_path)
    engine_err, modelled_err = [], []
    for (name, ids), logits in zip(prompts.items(), engine):
        exact = reference.logits(ids)
        modelled = reference.logits(ids, step=path == "decode", act_q8=True, kv_f16=True)
        rel = rel_error(logits, modelled)
        assert rel.max() <= MODELLED_WORST, f"{name}: position {rel.argmax()} off by {rel.max():.3f}"
        assert rel.mean() <= MODELLED_MEAN, f"{name}: mean error {rel.mean():.3f}"
        engine_err.append(rel_error(logits, exact))
        modelled_err.append(rel_error(modelled, exact))
    ratio = np.concatenate(engine_err).mean() / np.concatenate(modelled_err).mean()
    assert NOISE_RATIO[0] <= ratio <= NOISE_RATIO[1], f"engine/modelled error ratio {ratio:.2f}"


@pytest.fixture(scope="module")
def f16_model(prompts, tmp_path_factory):
    """SmolLM2 re-encoded to F16 and the reference logits of two prompts on it."""
    path = tmp_path_factory.mktemp("smollm2_f16") / "smollm2-f16.gguf"
    subprocess.run([str(NTRANSFORMER), "quantize", str(MODEL), str(path), "--type", "f16"], check=True,
                   capture_output=True)
    chosen = [prompts["chat"], prompts["story"]]
    model = llama_ref.Model(str(path))
    return path, chosen, [llama_ref.generate(model, list(ids), 0)[0] for ids in chosen]


@pytest.mark.parametrize("path", PATHS)
def test_f16_reencoding_matches_float64_reference_tightly(f16_model, tmp_path, path):
    model, chosen, expected = f16_model
    engine = engine_logits(model, chosen, ["--kv-f32", *PATHS[path]], tmp_path)
    for logits, reference_logits in zip(engine, expected):
        rel = rel_error(logits, reference_logits)
        assert rel.max() <= F16_TIGHT_REL, f"position {rel.argmax()}: {rel.max():.2e}"


@pytest.mark.parametrize("text", GREEDY_PROMPTS)
def test_greedy_continuation_matches_both_references(reference, text):
    [ids] = tokenize([{"op": "encode", "text": text}])
    result = subprocess.run([str(GENERATE_TOOL), str(MODEL), "--ids", ",".join(map(str, ids)),
                             "-n", str(GREEDY_TOKENS), "--ignore-eos"], capture_output=True, text=True, check=True)
    engine = json.loads(result.stdout)["ids"]
    exact, margins = reference.greedy(tuple(ids), GREEDY_TOKENS)
    # The premise: no near-tie along the path (else choose another prompt).
    assert margins.min() >= CONFIDENT_MARGIN, f"step {margins.argmin()}: top-2 margin {margins.min():.2f}"
    modelled, _ = reference.greedy(tuple(ids), GREEDY_TOKENS, act_q8=True, kv_f16=True)
    assert engine == modelled
    assert engine == exact
