"""Whole generated text: what `ntransformer run` prints (the prompt, then its
continuation as it streams) is what the reference decoders make of the same
ids, with and without a prompt. `batch` prints each continuation alone, and a
chat only its reply: what the reference's text of prompt and continuation adds
to its text of the prompt.

References, never our own output:
- SentencePiece (stories260K, llama2.c's tok512 vocabulary): the ids come from
  the float64 reference forward pass (tests/reference/llama_ref.py) after the
  `sentencepiece` library's encoding of the prompt, and the text is that
  library's decoding of prompt and continuation as one text. A continuation
  keeps the space of its first piece; only the start of a text (after BOS)
  loses SentencePiece's dummy-prefix space.
- Byte-level BPE (SmolLM2): the text is transformers' tokenizer's decoding of
  the ids the engine generated.
"""

import json
import os
import re
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from project_paths import (BUILD_DIR, NTRANSFORMER, REFERENCE_DIR, SHARED_MODELS,  # noqa: E402
                           convert_stories260k, require_built)
from tokenizer_oracles import (SMOLLM2_GGUF, hf_backend_from_gguf, read_llama2c_tokenizer,  # noqa: E402
                               sentencepiece_processor)

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

GENERATE_TOOL = BUILD_DIR / "tests" / "generate_tool"
STORIES_BOS, STORIES_EOS = 1, 2
SPM_PROMPTS = ["", "The little dog", "Lily and Ben went to the park. They"]
SPM_TOKENS = 24
# With an F32 KV cache the engine's logits are the float64 reference's to
# float32 rounding (relative 1e-5, test_e2e_stories): a greedy choice can only
# differ at a near tie, which this premise rules out.
SPM_MIN_MARGIN = 1e-3
BPE_PROMPTS = ["Once upon a time", "def fibonacci(n):", "1, 2, 3, 4, 5, 6, 7, 8,"]
BPE_TOKENS = 24


def run(model, prompt, n, *flags):
    """What `run` prints, and the prompt and generated ids it reports (--show-ids)."""
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(model), "-p", prompt, "-n", str(n), "--temp", "0",
                             "--show-ids", *flags], check=True, capture_output=True, text=True)
    ids = dict(re.findall(r"^(prompt|generated) ids: (\[.*\])$", result.stderr, re.M))
    return result.stdout, json.loads(ids["prompt"]), json.loads(ids["generated"])


def run_text(model, prompt, n, *flags):
    return run(model, prompt, n, "--raw", *flags)[0]


def reply_text(decode, prompt_ids, ids):
    """What a reference decoder's text of prompt + ids adds to its text of the prompt."""
    whole, head = decode(prompt_ids + ids), decode(prompt_ids)
    assert whole.startswith(head)
    return whole[len(head):]


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("text"))


@pytest.fixture(scope="module")
def spm():
    tokenizer = SHARED_MODELS / "tok512.bin"
    if not tokenizer.exists():
        pytest.skip(f"{tokenizer} is absent")
    return sentencepiece_processor(*read_llama2c_tokenizer(tokenizer))


def reference_greedy(model, prompt, n):
    """Greedy ids (up to EOS) of the float64 reference, and each choice's top-2 margin."""
    cache = llama_ref.KVCache(model.config.n_layers)
    last = llama_ref.forward(model, prompt, 0, cache)[-1]
    ids, margins = [], []
    while len(ids) < n:
        top = np.sort(last)
        margins.append(top[-1] - top[-2])
        ids.append(int(np.argmax(last)))
        if ids[-1] == STORIES_EOS:
            break
        last = llama_ref.forward(model, [ids[-1]], len(prompt) + len(ids) - 1, cache)[-1]
    return ids, min(margins)


@pytest.mark.parametrize("prompt", SPM_PROMPTS)
def test_sentencepiece_run_prints_the_reference_text(stories, spm, prompt):
    prompt_ids = [STORIES_BOS] + spm.encode(prompt)
    ids, margin = reference_greedy(llama_ref.Model(str(stories)), prompt_ids, SPM_TOKENS)
    assert margin >= SPM_MIN_MARGIN, f"near tie on the reference's path (margin {margin:.2e}): choose another prompt"
    text_ids = prompt_ids[1:] + [t for t in ids if t != STORIES_EOS]
    assert run_text(stories, prompt, SPM_TOKENS, "--kv-f32") == spm.decode(text_ids)


def test_sentencepiece_batch_texts_continue_their_prompts(stories, spm):
    """`batch` prints each request's continuation alone: after a prompt with
    text it starts with the space of its first piece."""
    requests = "".join(json.dumps({"prompt": p, "max_tokens": SPM_TOKENS, "temperature": 0}) + "\n"
                       for p in SPM_PROMPTS)
    result = subprocess.run([str(NTRANSFORMER), "batch", "-m", str(stories), "--kv-f32", "--parallel", "2"],
                            input=requests, check=True, capture_output=True, text=True)
    replies = [json.loads(line)["text"] for line in result.stdout.splitlines()]
    model = llama_ref.Model(str(stories))
    for prompt, reply in zip(SPM_PROMPTS, replies, strict=True):
        prompt_ids = [STORIES_BOS] + spm.encode(prompt)
        ids, margin = reference_greedy(model, prompt_ids, SPM_TOKENS)
        assert margin >= SPM_MIN_MARGIN, f"near tie on the reference's path (margin {margin:.2e})"
        assert reply == reply_text(spm.decode, prompt_ids, [t for t in ids if t != STORIES_EOS]), prompt


def test_sentencepiece_chat_reply_continues_the_template(stories, spm):
    """A chat reply follows the template's "[/INST]": it keeps its first space."""
    text, prompt_ids, ids = run(stories, "Tell me a story.", SPM_TOKENS, "--chat-template", "llama2", "--kv-f32")
    assert prompt_ids[0] == STORIES_BOS and spm.decode(prompt_ids) == "[INST] Tell me a story. [/INST]"
    assert text == reply_text(spm.decode, prompt_ids, [t for t in ids if t != STORIES_EOS])


@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2_GGUF.exists():
        pytest.skip(f"{SMOLLM2_GGUF} is absent (fetch it with scripts/fetch_default_model.sh)")
    require_built(NTRANSFORMER, GENERATE_TOOL)
    return hf_backend_from_gguf(SMOLLM2_GGUF)


def generate(*args):
    result = subprocess.run([str(GENERATE_TOOL), str(SMOLLM2_GGUF), *args], check=True, capture_output=True, text=True)
    return json.loads(result.stdout)


@pytest.mark.parametrize("prompt", BPE_PROMPTS)
def test_bpe_run_prints_the_reference_text(smollm2, prompt):
    text, prompt_ids, ids = run(SMOLLM2_GGUF, prompt, BPE_TOKENS, "--raw")
    assert prompt_ids == smollm2.encode(prompt).ids
    assert text == smollm2.decode(prompt_ids + ids, skip_special_tokens=True)


def test_bpe_chat_reply(smollm2):
    text, prompt_ids, ids = run(SMOLLM2_GGUF, "What is 2+2?", BPE_TOKENS)
    assert text == reply_text(lambda t: smollm2.decode(t, skip_special_tokens=True), prompt_ids, ids)


def test_bpe_text_after_a_special_token_alone(smollm2):
    """No text before the continuation: it starts after a special token."""
    bos = smollm2.token_to_id("<|im_start|>")
    out = generate("--ids", str(bos), "-n", str(BPE_TOKENS))
    assert out["text"] == smollm2.decode([bos] + out["ids"], skip_special_tokens=True)
