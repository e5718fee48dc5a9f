"""`ntransformer perplexity` on stories260K against the float64 reference
(tests/reference/llama_ref.py), by llama-perplexity's method: `-c` is the
context, the text is cut into windows that fill it, each window starts with
BOS, and the second half of each is scored. The text is llama2.c's golden
story, tokenized by the `sentencepiece` library."""

import math
import os
import re
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from project_paths import NTRANSFORMER, REFERENCE_DIR, SHARED_MODELS, convert_stories260k  # noqa: E402
from test_e2e_stories import golden_story_file  # noqa: E402
from tokenizer_oracles import read_llama2c_tokenizer, sentencepiece_processor  # noqa: E402

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

BOS = 1
STORIES_CONTEXT = 512  # the model's trained context (llama2.c seq_len)
# F32 weights and KV cache: the engine's logits are the reference's to float32
# rounding (relative 1e-5), so the perplexity agrees far more closely than this.
PPL_REL = 1e-4


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("ppl"))


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """The golden story three times: more than one window of the model's whole context."""
    return golden_story_file(tmp_path_factory.mktemp("ppl"))


def reference_perplexity(model, tokens, n_ctx):
    nll = []
    for w in range(len(tokens) // n_ctx):
        window = [BOS] + tokens[w * n_ctx + 1:(w + 1) * n_ctx]
        logits = llama_ref.forward(model, window, 0, llama_ref.KVCache(model.config.n_layers))
        for i in range(n_ctx // 2, n_ctx - 1):
            row = logits[i]
            top = row.max()
            nll.append(math.log(np.exp(row - top).sum()) + top - row[window[i + 1]])
    return math.exp(sum(nll) / len(nll)), len(nll)


@pytest.mark.parametrize("ctx", [64, 0])
def test_perplexity_matches_float64_reference(stories, text_file, ctx):
    sp = sentencepiece_processor(*read_llama2c_tokenizer(SHARED_MODELS / "tok512.bin"))
    tokens = [BOS] + sp.encode(text_file.read_text(encoding="utf-8"))
    n_ctx = ctx or STORIES_CONTEXT  # -c 0: the model's context, as in every command
    expected, scored = reference_perplexity(llama_ref.Model(str(stories)), tokens, n_ctx)
    result = subprocess.run([str(NTRANSFORMER), "perplexity", "-m", str(stories), "-f", str(text_file),
                             "-c", str(ctx), "--kv-f32"], check=True, capture_output=True, text=True)
    m = re.fullmatch(r"PPL = ([\d.]+) \+/- [\d.]+ \((\d+) tokens scored in (\d+) windows of (\d+)\)\n", result.stdout)
    assert m, result.stdout
    assert (int(m[2]), int(m[3]), int(m[4])) == (scored, len(tokens) // n_ctx, n_ctx)
    assert float(m[1]) == pytest.approx(expected, rel=PPL_REL)


def test_context_option_says_it_is_the_context(stories):
    help_text = subprocess.run([str(NTRANSFORMER), "perplexity", "--help"], check=True, capture_output=True,
                               text=True).stdout
    line = next(line for line in help_text.splitlines() if "-c,--ctx-size" in line)
    description = help_text[help_text.index(line) + len(line):].split("\n  -")[0]
    assert line.strip().endswith("=512")
    assert "Context length in tokens" in line + description and "window" in line + description
