"""Log-probabilities through `ntransformer serve` with the official `openai`
client, on the default model (SmolLM2) on the CPU.

The reference is computed apart from the server: the C API's Python package
(python/ntransformer) evaluates the prompt in one batch and then each greedy
token alone, as the server's scheduler does, and numpy takes the log-softmax
of each row in float64; the prompt's ids come from `ntransformer run
--show-ids`. The server's values are that log-softmax (of the raw logits,
temperature 1); its top tokens are the reference's likeliest; a greedy token
is its own top 1; streamed and whole replies agree."""

import json
import math
import os
import re
import sys

import numpy as np
import pytest

from project_paths import BUILD_DIR, SOURCE_DIR, require_built
from test_server import MODEL, MODEL_ID, openai, run_cli, serving

PROMPT = "The capital of France is"
N_GEN = 12
TOP = 5
# The reference runs the server's kernels on the same rows: what is left is
# float32 rounding in the log-softmax's sum.
TOLERANCE = 1e-4
LIBRARY = BUILD_DIR / "src" / "capi" / "libntransformer.so"


@pytest.fixture(scope="module")
def server():
    with serving("-np", 2) as served:
        yield served


def log_softmax(row):
    row = np.asarray(row, dtype=np.float64)
    top = row.max()
    return row - top - np.log(np.exp(row - top).sum())


@pytest.fixture(scope="module")
def reference():
    """The greedy continuation's ids and, for each, the log-softmax of the row it was picked from."""
    require_built(LIBRARY)
    os.environ["NT_LIBRARY"] = str(LIBRARY)
    sys.path.insert(0, str(SOURCE_DIR / "python"))
    import ntransformer as nt
    shown = run_cli("--raw", "--no-display-prompt", "-p", PROMPT, "-n", 0, "--show-ids").stderr
    prompt = json.loads(re.search(r"prompt ids: (\[.*\])", shown)[1])
    generated, rows = [], []
    with nt.Model(MODEL, device="cpu") as model, model.context(n_ctx=1024, n_threads=2) as ctx:
        batch = nt.Batch(len(prompt))
        for i, t in enumerate(prompt):
            batch.add(t, i, 0, i == len(prompt) - 1)
        ctx.decode(batch)
        for _ in range(N_GEN):
            rows.append(log_softmax(ctx.logits()))
            generated.append(int(np.argmax(rows[-1])))
            ctx.decode(batch.clear().add(generated[-1], len(prompt) + len(generated) - 1, 0, True))
    return generated, rows


def piece(server, token_id):
    status, body, _ = server.request("POST", "/detokenize", {"tokens": [token_id]})
    assert status == 200, body
    return json.loads(body)["content"]


def test_completion_logprobs_are_the_log_softmax_of_the_raw_logits(server, reference):
    generated, expected = reference
    reply = server.openai().completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=N_GEN, temperature=0,
                                               logprobs=TOP)
    lp = reply.choices[0].logprobs
    text = reply.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == N_GEN
    assert lp.tokens == [piece(server, t) for t in generated]
    assert "".join(lp.tokens) == text
    assert lp.text_offset == [len("".join(lp.tokens[:i]).encode()) for i in range(N_GEN)]
    for i, token_id in enumerate(generated):
        row = expected[i]
        assert abs(lp.token_logprobs[i] - row[token_id]) <= TOLERANCE, (i, lp.token_logprobs[i], row[token_id])
        # The reference's likeliest tokens, clear of near-ties at the cut, are the reply's top ones.
        order = np.argsort(-row)
        top = lp.top_logprobs[i]
        assert len(top) <= TOP
        clear = [int(t) for t in order[:TOP] if row[t] - row[order[TOP]] > 2 * TOLERANCE]
        for token in clear:
            assert abs(top[piece(server, token)] - row[token]) <= TOLERANCE
        # Greedy: the chosen token is the top one, and no alternative beats it.
        assert max(top.values()) == pytest.approx(lp.token_logprobs[i], abs=1e-6)
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-6
    # The chosen tokens' probabilities, from the whole vocabulary's softmax, are below 1 and above 0.
    assert all(-50 < v <= 0 for v in lp.token_logprobs)


def test_a_stream_carries_the_same_logprobs_as_the_whole_reply(server):
    client = server.openai()
    args = dict(model=MODEL_ID, messages=[{"role": "user", "content": "Name three colors."}], max_tokens=16,
                temperature=0, logprobs=True, top_logprobs=3)
    whole = client.chat.completions.create(**args)
    content = whole.choices[0].logprobs.content
    assert "".join(t.token for t in content) == whole.choices[0].message.content
    assert len(content) == whole.usage.completion_tokens
    for t in content:
        assert bytes(t.bytes) == t.token.encode()
        assert len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token
        assert t.top_logprobs[0].logprob == pytest.approx(t.logprob, abs=1e-6)
        assert [a.logprob for a in t.top_logprobs] == sorted((a.logprob for a in t.top_logprobs), reverse=True)
    streamed, text = [], ""
    for chunk in client.chat.completions.create(**args, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs and choice.logprobs.content:
                streamed += choice.logprobs.content
    assert text == whole.choices[0].message.content
    assert [t.token for t in streamed] == [t.token for t in content]
    assert [t.logprob for t in streamed] == pytest.approx([t.logprob for t in content], abs=1e-4)


def test_logprobs_without_top_and_a_legacy_stream(server):
    client = server.openai()
    reply = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                           temperature=0, logprobs=True)
    assert all(t.top_logprobs == [] for t in reply.choices[0].logprobs.content)
    plain = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                           temperature=0)
    assert plain.choices[0].logprobs is None
    tokens, offsets, text = [], [], ""
    for chunk in client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=8, temperature=0, logprobs=2,
                                           stream=True):
        text += chunk.choices[0].text
        if chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.tokens
            offsets += chunk.choices[0].logprobs.text_offset
    assert "".join(tokens) == text and len(tokens) == 8
    assert offsets == [len("".join(tokens[:i]).encode()) for i in range(8)]


def test_a_stop_string_leaves_its_own_tokens_out(server):
    client = server.openai()
    whole = client.completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, logprobs=1)
    tokens, text = whole.choices[0].logprobs.tokens, whole.choices[0].text
    # A token whose text first occurs where it begins: a stop string that ends the reply right before it.
    cut_at = next(i for i, t in enumerate(tokens) if i > 0 and t and text.find(t) == len("".join(tokens[:i])))
    cut = client.completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=12, temperature=0, logprobs=1,
                                    stop=[tokens[cut_at]])
    assert cut.choices[0].text == "".join(tokens[:cut_at])
    assert cut.choices[0].logprobs.tokens == tokens[:cut_at]


def test_sampled_choices_report_the_tokens_they_drew(server):
    reply = server.openai().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Tell me a word."}], max_tokens=8, temperature=1.0,
        seed=3, n=2, logprobs=True, top_logprobs=20)
    for choice in reply.choices:
        content = choice.logprobs.content
        assert "".join(t.token for t in content) == choice.message.content
        for t in content:
            assert len(t.top_logprobs) == 20
            # A drawn token is among the likeliest 20, or less likely than all of them.
            listed = {a.token: a.logprob for a in t.top_logprobs}
            assert listed.get(t.token, t.logprob) == pytest.approx(t.logprob, abs=1e-6)
            assert t.token in listed or t.logprob <= t.top_logprobs[-1].logprob + 1e-6


BAD = [  # path, body, param, words
    ("/v1/chat/completions", {"top_logprobs": 3}, "top_logprobs", "needs logprobs: true"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs", "from 0 to 20"),
    ("/v1/chat/completions", {"logprobs": 1}, "logprobs", "expected true or false"),
    ("/v1/completions", {"logprobs": -1}, "logprobs", "from 0 to 20"),
    ("/v1/completions", {"logprobs": True}, "logprobs", "from 0 to 20"),
    ("/v1/completions", {"logprobs": 2, "top_logprobs": 2}, "top_logprobs", "a chat field"),
]


@pytest.mark.parametrize("path, extra, param, words", BAD)
def test_bad_logprobs_fields_get_400_naming_them(server, path, extra, param, words):
    body = {"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x"}
    status, text, _ = server.request("POST", path, {**body, "max_tokens": 2, **extra})
    error = json.loads(text)["error"]
    assert status == 400 and words in error["message"] and error["param"] == param, text
    assert server.request("GET", "/health")[0] == 200
