"""Checks of the float64 numpy reference model (tests/reference/llama_ref.py).

The reference is the oracle for our engine's logits, so it is itself held to
outside truths: llama2.c's golden greedy output for stories260K (which also
proves our llama2.c -> GGUF converter) and a real model's factual continuation.
"""

import math
import subprocess
import sys

import numpy as np
import pytest

from project_paths import MODELS_DIR, REFERENCE_DIR, convert_stories260k

REFERENCE = REFERENCE_DIR / "llama_ref.py"

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

# From shared/models/README.md: llama2.c's greedy ids after BOS for stories260K.
STORIES_GOLDEN = [int(t) for t in """
403 407 261 378 432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337 410 408 419 292 411 322 265 282
295 433 426 385 328 432 358 394 261 370 432 352 266 268 388 426 338 391 266 267 337 335 312 432 398 312 286 267
414 270 333 415 426 13 438 310""".split()]

SMOLLM = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def stories_gguf(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("stories"))


def test_converted_stories260k_reproduces_golden_greedy_ids(stories_gguf):
    model = llama_ref.Model(str(stories_gguf))
    _, generated = llama_ref.generate(model, [1], len(STORIES_GOLDEN))
    assert generated == STORIES_GOLDEN


def test_cli_writes_logits_of_every_position_and_greedy_ids(stories_gguf, tmp_path):
    out = tmp_path / "logits.npy"
    prompt = [1] + STORIES_GOLDEN[:4]
    result = subprocess.run(
        [sys.executable, str(REFERENCE), str(stories_gguf), "--tokens", ",".join(map(str, prompt)),
         "--out", str(out), "--greedy", "8"],
        check=True, capture_output=True, text=True)
    logits = np.load(out)
    assert logits.shape == (len(prompt), 512) and logits.dtype == np.float64
    # Teacher forcing along the golden path: each position predicts the next golden id.
    assert list(np.argmax(logits, axis=-1)) == STORIES_GOLDEN[:len(prompt)]
    assert [int(t) for t in result.stdout.split()] == STORIES_GOLDEN[4:12]


def test_batched_prompt_matches_token_by_token_decoding(stories_gguf):
    model = llama_ref.Model(str(stories_gguf))
    tokens = [1] + STORIES_GOLDEN[:9]
    batched = llama_ref.forward(model, tokens, 0, llama_ref.KVCache(model.config.n_layers))
    cache = llama_ref.KVCache(model.config.n_layers)
    stepped = np.concatenate([llama_ref.forward(model, [t], pos, cache) for pos, t in enumerate(tokens)])
    np.testing.assert_allclose(batched, stepped, rtol=1e-12, atol=1e-12)


def test_rope_matches_complex_rotation():
    """Adjacent pairs (2i, 2i+1) are complex numbers rotated by pos * theta_i."""
    rng = np.random.default_rng()
    head_dim, rope_dim, n_heads = 16, 12, 3
    config = llama_ref.Config(
        n_layers=1, dim=n_heads * head_dim, ffn_dim=1, n_heads=n_heads, n_kv_heads=n_heads, head_dim=head_dim,
        vocab_size=1, rms_eps=1e-5, rope_theta=rng.uniform(1e3, 1e6), rope_dim=rope_dim, rope_scaling="none",
        rope_factor=1.0, rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_original_context=8192)
    inv_freq = llama_ref.rope_frequencies(config, None)
    positions = rng.integers(0, 4096, size=5)
    x = rng.standard_normal((len(positions), n_heads, head_dim))

    rotated = llama_ref.apply_rope(x, positions, inv_freq, config)

    for t, pos in enumerate(positions):
        for h in range(n_heads):
            for i in range(rope_dim // 2):
                theta = config.rope_theta ** (-2 * i / rope_dim)
                z = complex(x[t, h, 2 * i], x[t, h, 2 * i + 1]) * complex(math.cos(pos * theta), math.sin(pos * theta))
                assert rotated[t, h, 2 * i] == pytest.approx(z.real, rel=1e-12, abs=1e-12)
                assert rotated[t, h, 2 * i + 1] == pytest.approx(z.imag, rel=1e-12, abs=1e-12)
            np.testing.assert_array_equal(rotated[t, h, rope_dim:], x[t, h, rope_dim:])


def test_llama3_frequencies_follow_the_published_rule():
    """Meta's Llama 3.1 rule, one frequency at a time: keep short wavelengths,
    slow long ones by `factor`, interpolate in between."""
    config = llama_ref.Config(
        n_layers=1, dim=128, ffn_dim=1, n_heads=1, n_kv_heads=1, head_dim=128, vocab_size=1, rms_eps=1e-5,
        rope_theta=500000.0, rope_dim=128, rope_scaling="llama3", rope_factor=8.0,
        rope_low_freq_factor=1.0, rope_high_freq_factor=4.0, rope_original_context=8192)
    scaled = llama_ref.rope_frequencies(config, None)

    kinds = set()
    for i, got in enumerate(scaled):
        freq = 500000.0 ** (-2 * i / 128)
        wavelen = 2 * math.pi / freq
        if wavelen < 8192 / 4.0:
            expected, kind = freq, "kept"
        elif wavelen > 8192 / 1.0:
            expected, kind = freq / 8.0, "slowed"
        else:
            smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0)
            expected, kind = (1 - smooth) * freq / 8.0 + smooth * freq, "blended"
        kinds.add(kind)
        assert got == pytest.approx(expected, rel=1e-12)
    assert kinds == {"kept", "slowed", "blended"}


def smollm_tokenizer(path):
    """transformers' own GGUF tokenizer. AutoTokenizer(gguf_file=...) reads the file
    through torch, which the test venv lacks, so the metadata is read with the gguf
    package and handed to the same transformers converter."""
    from gguf import GGUFReader
    from transformers.integrations.gguf import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

    reader = GGUFReader(str(path))
    metadata = {}
    for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items():
        field = reader.fields.get("tokenizer." + key)
        if field is not None:
            metadata[name] = field.contents()
    tokenizer, _ = convert_gguf_tokenizer(reader.fields["general.architecture"].contents(), metadata)
    return tokenizer


@pytest.mark.skipif(not SMOLLM.exists(), reason=f"{SMOLLM} is absent")
def test_smollm2_continues_capital_of_france_with_paris():
    tokenizer = smollm_tokenizer(SMOLLM)
    prompt = tokenizer.encode("The capital of France is", add_special_tokens=False).ids
    model = llama_ref.Model(str(SMOLLM))
    _, generated = llama_ref.generate(model, prompt, 8)
    assert " Paris" in tokenizer.decode(generated)
