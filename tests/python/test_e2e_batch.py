"""`ntransformer batch` end to end on the default model (SmolLM2) on the CPU:
JSONL in, one object per input line out, in input order; bad lines get an
error object naming their line and field while the others complete.

The references are independent of the batch path: each completed line's text
must be what `ntransformer run` (the single-sequence Generator) prints for the
same prompt, seed and sampling parameters, and its prompt_tokens what the
tokenizer (which has its own oracle tests) gives for the prompt.
"""

import json
import subprocess
import threading

import pytest

from project_paths import BUILD_DIR, MODELS_DIR, NTRANSFORMER, require_built

MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
TOKENIZE_TOOL = BUILD_DIR / "tests" / "tokenize_tool"
STOP_REASONS = {"token limit", "end of text", "stop string", "context full"}

GOOD = {
    "greedy": {"id": "greedy", "prompt": "The capital of France is", "max_tokens": 12, "temperature": 0},
    "chat": {"id": "chat", "messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 16,
             "temperature": 0},
    "sampled": {"id": 7, "prompt": "Once upon a time", "max_tokens": 20, "temperature": 0.9, "top_k": 20,
                "top_p": 0.9, "min_p": 0.02, "seed": 1234},
    "stopped": {"id": "stopped", "prompt": "Here is a list of fruits:\n1.", "max_tokens": 40, "seed": 99,
                "stop": ["\n3."]},
    "penalized": {"id": "penalized", "prompt": "One, two, three,", "max_tokens": 20, "temperature": 0,
                  "repeat_penalty": 1.5, "repeat_last_n": 16, "frequency_penalty": 0.5, "presence_penalty": 0.25},
    # 7042 is " Paris", the greedy first token; 30 a raised one.
    "biased": {"id": "biased", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0,
               "logit_bias": {"7042": -100, "30": 2.5}},
}

# (input line, id echoed back, field the error must name, words it must
# contain); field None: the error is about the whole line.
BAD = [
    ('{"id": "broken", "prompt": ', None, None, "malformed JSON"),  # no id to echo from a broken line
    ('{"id": "hot", "prompt": "x", "temperature": "hot"}', "hot", "temperature", "expected a number"),
    ('{"id": "wide", "prompt": "x", "top_p": 1.5}', "wide", "top_p", "must be from 0 to 1, got 1.5"),
    ('{"id": "empty"}', "empty", "prompt", "missing"),
    ('{"id": "typo", "prompt": "x", "max_token": 3}', "typo", "max_token", "unknown field"),
    ('{"id": "flat", "prompt": "x", "repeat_penalty": 0}', "flat", "repeat_penalty", "must be more than 0"),
    ('{"id": "window", "prompt": "x", "repeat_last_n": -2}', "window", "repeat_last_n", "must be -1 or more, got -2"),
    ('{"id": "odd", "prompt": "x", "presence_penalty": "a"}', "odd", "presence_penalty", "expected a number"),
    ('{"id": 12, "messages": [{"role": "user"}]}', 12, "messages[0].content", "missing"),
    ('["not", "an", "object"]', None, None, "expected a JSON object"),
    ('{"id": "guess", "prompt": "x", "prediction": 5}', "guess", "prediction", "expected a string"),
    ('{"id": "bias", "prompt": "x", "logit_bias": {"a": 1}}', "bias", "logit_bias.a", "must be a token id"),
    ('{"id": "kind", "prompt": "x", "prediction": {"type": "text", "content": "y"}}', "kind", "prediction.type",
     'expected "content"'),
    ('{"id": "huge", "prompt": "x", "temperature": 1e999}', None, None, "number overflow"),  # past a double
    # Deeper than any request: refused before anything recurses over it (this line once crashed the whole batch).
    ('{"id": "deep", "prompt": "x", "stop": ' + "[" * 200000 + "]" * 200000 + "}", None, None, "nested deeper than"),
]


def input_lines():
    """The JSONL lines, a blank one among them, with what each output line must be."""
    lines, expected = [], []
    good = list(GOOD.items())
    for i in range(max(len(good), len(BAD))):
        if i < len(good):
            lines.append(json.dumps(good[i][1]))
            expected.append(("good", good[i][0]))
        if i == 1:
            lines.append("   ")  # skipped, but counted in line numbers
        if i < len(BAD):
            lines.append(BAD[i][0])
            expected.append(("bad", i))
    return lines, expected


def run_batch(*args, stdin=None, timeout=600):
    result = subprocess.run([str(NTRANSFORMER), "batch", "-m", str(MODEL), "--device", "cpu", "--keep-going", *map(str, args)],
                            input=stdin, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return result


def without_seconds(objects):
    return [{k: v for k, v in o.items() if k != "seconds"} for o in objects]


@pytest.fixture(scope="module")
def model():
    require_built(NTRANSFORMER, TOKENIZE_TOOL)
    if not MODEL.exists():
        pytest.skip(f"{MODEL} is absent (scripts/setup.sh fetches it)")
    return MODEL


@pytest.fixture(scope="module")
def batch_output(model):
    lines, expected = input_lines()
    result = run_batch("-np", 2, stdin="\n".join(lines) + "\n")
    return lines, expected, [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def run_alone(request):
    """What `ntransformer run` prints for the request: the single-sequence reference."""
    args = ["run", "-m", str(MODEL), "--device", "cpu", "-n", str(request["max_tokens"])]
    if "prompt" in request:
        args += ["--raw", "-p", request["prompt"]]
    else:
        args += ["-p", request["messages"][-1]["content"]]
    for field, flag in [("temperature", "--temp"), ("top_k", "--top-k"), ("top_p", "--top-p"), ("min_p", "--min-p"),
                        ("seed", "--seed"), ("repeat_penalty", "--repeat-penalty"), ("repeat_last_n", "--repeat-last-n"),
                        ("frequency_penalty", "--frequency-penalty"), ("presence_penalty", "--presence-penalty")]:
        if field in request:
            args += [flag, str(request[field])]
    for stop in request.get("stop", []):
        args += ["--stop", stop]
    for token, bias in request.get("logit_bias", {}).items():
        args += ["--logit-bias", f"{token}{bias:+g}"]
    result = subprocess.run([str(NTRANSFORMER), *args], capture_output=True, text=True, timeout=300, check=True)
    echo = request.get("prompt", "")  # a raw prompt is echoed before the text
    assert result.stdout.startswith(echo)
    return result.stdout[len(echo):]


def prompt_token_count(request):
    op = {"op": "encode", "text": request["prompt"]} if "prompt" in request else \
        {"op": "chat", "messages": request["messages"]}
    result = subprocess.run([str(TOKENIZE_TOOL), str(MODEL)], input=json.dumps(op) + "\n", capture_output=True,
                            text=True, check=True)
    return len(json.loads(result.stdout)["ids"])


def test_one_object_per_line_in_input_order(batch_output):
    _, expected, out, _ = batch_output
    assert len(out) == len(expected)
    for (kind, key), obj in zip(expected, out):
        assert obj["id"] == (GOOD[key]["id"] if kind == "good" else BAD[key][1]), obj


def test_bad_lines_name_their_line_and_field(batch_output):
    lines, expected, out, stderr = batch_output
    for (kind, key), obj in zip(expected, out):
        if kind != "bad":
            continue
        text, _, field, words = BAD[key]
        number = lines.index(text) + 1
        assert obj["line"] == number
        assert obj["error"].startswith(f"line {number}: "), obj
        assert words in obj["error"], obj
        if field is None:
            assert "field" not in obj
        else:
            assert obj["field"] == field
            assert f'field "{field}"' in obj["error"]
        assert "text" not in obj
    assert f"{len(BAD)} of {len(expected)} lines could not run" in stderr
    assert "tok/s" in stderr  # the progress line


def test_good_lines_match_the_single_sequence_run(batch_output):
    _, expected, out, _ = batch_output
    for (kind, key), obj in zip(expected, out):
        if kind != "good":
            continue
        request = GOOD[key]
        assert set(obj) == {"id", "text", "prompt_tokens", "completion_tokens", "stop_reason", "seconds"}, obj
        assert obj["text"] == run_alone(request), key
        assert obj["prompt_tokens"] == prompt_token_count(request), key
        assert 0 < obj["completion_tokens"] <= request["max_tokens"]
        assert obj["stop_reason"] in STOP_REASONS
        assert obj["seconds"] >= 0
    stopped = out[[k for _, k in expected].index("stopped")]
    assert stopped["stop_reason"] == "stop string" and "\n3." not in stopped["text"]


def test_files_in_and_out_give_what_stdin_and_stdout_give(batch_output, tmp_path):
    lines, _, out, _ = batch_output
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(lines) + "\n")
    result = run_batch("-i", src, "-o", dst, "--parallel", 3)
    assert result.stdout == ""
    from_file = [json.loads(line) for line in dst.read_text().splitlines()]
    assert without_seconds(from_file) == without_seconds(out)


def test_lines_are_taken_as_they_arrive(batch_output):
    """A pipe still being written: the first line's object comes before the second line is sent."""
    _, expected, out, _ = batch_output
    want = {key: obj for (kind, key), obj in zip(expected, out) if kind == "good"}
    proc = subprocess.Popen([str(NTRANSFORMER), "batch", "-m", str(MODEL), "--device", "cpu", "-np", "2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = []
        reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
        proc.stdin.write(json.dumps(GOOD["greedy"]) + "\n")
        proc.stdin.flush()
        reader.start()
        reader.join(timeout=120)
        assert lines, "no object for the first line while the input stayed open"
        proc.stdin.write(json.dumps(GOOD["chat"]) + "\n")
        proc.stdin.close()
        rest = proc.stdout.read()  # to its end: the input is closed, so the batch finishes
        assert proc.wait(timeout=300) == 0
    finally:
        proc.kill()
    got = [json.loads(line) for line in lines + rest.splitlines()]
    assert without_seconds(got) == without_seconds([want["greedy"], want["chat"]])


def test_many_lines_through_few_slots_come_back_whole_and_in_order(model):
    """More lines than the read-ahead (twice the slots), the last without a newline."""
    request = {"prompt": "One, two, three,", "max_tokens": 3, "temperature": 0}
    lines = [json.dumps({"id": i, **request}) for i in range(23)]
    out = [json.loads(line) for line in run_batch("-np", 2, stdin="\n".join(lines)).stdout.splitlines()]
    assert [o["id"] for o in out] == list(range(23))
    assert {o["text"] for o in out} == {run_alone(request)}


def test_a_prompt_past_the_context_fails_alone(model):
    long_prompt = " ".join(["word"] * 80)
    lines = [json.dumps({"id": "short", "prompt": "Hello", "max_tokens": 4, "temperature": 0}),
             json.dumps({"id": "long", "prompt": long_prompt, "max_tokens": 4}),
             json.dumps({"id": "after", "prompt": "The sky is", "max_tokens": 4, "temperature": 0})]
    out = [json.loads(line) for line in run_batch("-c", 32, "-np", 2, stdin="\n".join(lines) + "\n").stdout.splitlines()]
    assert [o["id"] for o in out] == ["short", "long", "after"]
    assert out[1]["line"] == 2 and "context holds 32" in out[1]["error"], out[1]
    assert out[1]["prompt_tokens"] > 32
    for o in (out[0], out[2]):
        assert o["completion_tokens"] == 4 and o["stop_reason"] == "token limit", o


# Speculation: prompts whose continuations repeat what they hold, so lookup drafts get accepted.
SPECULATED = [
    {"id": "list", "prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 24, "temperature": 0},
    {"id": "repeat", "prompt": "The cat sat on the mat. The dog sat on the log. The cat sat on the mat. The dog",
     "max_tokens": 24, "temperature": 0},
    {"id": "chat", "messages": [{"role": "user", "content": "Repeat after me: red, green, blue, red, green, blue."}],
     "max_tokens": 20, "temperature": 0},
    {"id": "sampled", "prompt": "A B C D A B C D A B", "max_tokens": 20, "temperature": 0.8, "seed": 42},
]


@pytest.fixture(scope="module")
def lookup_output(model):
    stdin = "\n".join(json.dumps(r) for r in SPECULATED) + "\n"
    result = run_batch("-np", 3, "--lookup", "--draft-max", 4, stdin=stdin)
    return [json.loads(line) for line in result.stdout.splitlines()], result.stderr


def test_lookup_greedy_lines_are_plain_batch_and_run_output(model, lookup_output):
    out, _ = lookup_output
    greedy = [r for r in SPECULATED if r["temperature"] == 0]
    plain = [json.loads(line) for line in
             run_batch("-np", 3, stdin="\n".join(json.dumps(r) for r in greedy) + "\n").stdout.splitlines()]
    by_id = {o["id"]: o for o in out}
    for request, reference in zip(greedy, plain):
        got = by_id[request["id"]]
        assert got["text"] == reference["text"] == run_alone(request), request["id"]
        assert got["completion_tokens"] == reference["completion_tokens"]
    assert sum(by_id[r["id"]]["accepted"] for r in greedy) > 0, "no lookup draft was accepted on repeating prompts"


def test_lookup_sampled_line_is_reproducible_and_is_run_with_lookup(model, lookup_output):
    out, _ = lookup_output
    request = SPECULATED[-1]
    got = next(o for o in out if o["id"] == request["id"])
    again = json.loads(run_batch("--lookup", "--draft-max", 4, stdin=json.dumps(request) + "\n").stdout)
    assert without_seconds([got]) == without_seconds([again])
    # The single-sequence speculative decoder with the same seed is the reference (its distribution is tested there).
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(MODEL), "--device", "cpu", "--raw", "-p",
                             request["prompt"], "-n", str(request["max_tokens"]), "--temp", str(request["temperature"]),
                             "--seed", str(request["seed"]), "--lookup", "--draft-max", "4"],
                            capture_output=True, text=True, timeout=300, check=True)
    assert result.stdout == request["prompt"] + got["text"]


def test_lookup_lines_report_drafts_and_the_progress_line_tokens_per_pass(lookup_output):
    out, stderr = lookup_output
    for o in out:
        assert set(o) == {"id", "text", "prompt_tokens", "completion_tokens", "stop_reason", "seconds", "drafted",
                          "accepted"}, o
        assert 0 <= o["accepted"] <= o["drafted"]
    assert "tokens per sequence per pass" in stderr


def test_a_predicted_output_drafts_and_leaves_the_text_unchanged(model, batch_output):
    """A line whose prediction is its plain greedy text accepts nearly every draft; one with an unrelated
    prediction still gets its plain text. Both forms of the field (a string, OpenAI's object) work."""
    _, expected, out, _ = batch_output
    request = GOOD["greedy"]
    plain = out[[k for _, k in expected].index("greedy")]["text"]
    lines = [dict(request, id="right", prediction=plain),
             dict(request, id="object", prediction={"type": "content", "content": plain}),
             dict(request, id="wrong", prediction="Bananas are yellow and grow in bunches.")]
    got = {o["id"]: o for o in map(json.loads, run_batch("-np", 2,
                                                           stdin="\n".join(map(json.dumps, lines)) + "\n")
                                   .stdout.splitlines())}
    for key in ("right", "object", "wrong"):
        assert got[key]["text"] == plain, key
        assert 0 <= got[key]["accepted"] <= got[key]["drafted"], key
    for key in ("right", "object"):
        assert got[key]["accepted"] >= 0.8 * got[key]["drafted"] > 0, got[key]
    assert got["wrong"]["accepted"] < got["right"]["accepted"]


def test_a_pool_smaller_than_every_context_gives_the_same_lines(batch_output):
    """--kv-pool shares 160 positions among 4 sequences of up to 128: requests
    wait for pages instead of holding a whole context each, and every line is
    what the roomy run gave (the stopped line's 40 tokens need 2 pages)."""
    lines, _, out, _ = batch_output
    result = run_batch("--parallel", 4, "-c", 128, "--kv-pool", 160, stdin="\n".join(lines) + "\n")
    assert "KV cache of 160 positions, context 128" in result.stderr
    assert without_seconds([json.loads(line) for line in result.stdout.splitlines()]) == without_seconds(out)


def test_a_pool_that_cannot_hold_one_context_is_refused(model):
    result = subprocess.run([str(NTRANSFORMER), "batch", "-m", str(MODEL), "--device", "cpu", "-c", "128", "--kv-pool", "100"],
                            input="", capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--kv-pool 100" in result.stderr and "128 positions" in result.stderr, result.stderr


def test_batch_invariant_lines_are_the_default_lines_on_the_cpu(batch_output):
    """--batch-invariant (prompts in passes of their own, one-token kernels for
    every step) changes nothing on the CPU, whose batches already compute each
    sequence as alone: every line is the default run's."""
    lines, _, out, _ = batch_output
    result = run_batch("--parallel", 3, "--batch-invariant", stdin="\n".join(lines) + "\n")
    assert without_seconds([json.loads(line) for line in result.stdout.splitlines()]) == without_seconds(out)


def test_batch_invariant_refuses_cpu_layers(model):
    result = subprocess.run([str(NTRANSFORMER), "batch", "-m", str(MODEL), "--device", "cpu", "--batch-invariant",
                             "--cpu-layers", "3"], input="", capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--batch-invariant with --cpu-layers 3" in result.stderr, result.stderr
