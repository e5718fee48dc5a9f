"""`ntransformer serve` against the official `openai` and `anthropic` Python
clients, on loopback, on the default model (SmolLM2) on the CPU: greedy
replies equal `ntransformer run`'s, streamed and not; concurrent streams each
equal their request alone; bad requests get the right status and leave the
server serving. Every wait is bounded; nothing depends on timing."""

import concurrent.futures
import contextlib
import http.client
import json
import os
import re
import signal
import subprocess
import time

import pytest

from project_paths import MODELS_DIR, NTRANSFORMER, require_built

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

MODEL = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
TIMEOUT = 300


class Served:
    def __init__(self, *flags, model=MODEL):
        require_built(NTRANSFORMER)
        if not model.exists():
            pytest.skip(f"{model} is absent")
        self.proc = subprocess.Popen([str(NTRANSFORMER), "serve", "-m", str(model), "--device", "cpu", "-t", "2",
                                      "--port", "0", "-c", "1024", *map(str, flags)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + TIMEOUT
        self.log = ""
        while "listening on" not in self.log:
            assert time.monotonic() < deadline and self.proc.poll() is None, self.log
            self.log += self.proc.stderr.readline()
        self.port = int(re.search(r"http://127\.0\.0\.1:(\d+)", self.log)[1])
        self.base = f"http://127.0.0.1:{self.port}"
        while self.request("GET", "/health")[0] != 200:
            assert time.monotonic() < deadline and self.proc.poll() is None, "never became ready"
            time.sleep(0.1)

    def request(self, method, path, body=None, headers=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=TIMEOUT)
        try:
            payload = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
            connection.request(method, path, body=payload, headers={"Content-Type": "application/json", **(headers or {})})
            response = connection.getresponse()
            return response.status, response.read().decode(), dict(response.getheaders())
        except ConnectionError:
            return None, "", {}
        finally:
            connection.close()

    def openai(self, key="none"):
        return openai.OpenAI(base_url=self.base + "/v1", api_key=key, timeout=TIMEOUT, max_retries=0)

    def metric(self, name):
        text = self.request("GET", "/metrics")[1]
        return float(re.search(rf"^ntransformer_{name} (\S+)$", text, re.M)[1])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=TIMEOUT)
        finally:
            self.proc.kill()


@contextlib.contextmanager
def serving(*flags, model=MODEL):
    """A server of `model` with these flags, stopped at the end; it must exit cleanly."""
    server = Served(*flags, model=model)
    try:
        yield server
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.proc.stderr.read()


@pytest.fixture(scope="module")
def server():
    with serving("-np", 4) as served:
        yield served


def run_cli(*args):
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(MODEL), "--device", "cpu", "-t", "2", "--temp", "0",
                             *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT)
    assert result.returncode == 0, result.stderr
    return result


def chat(client, content, **extra):
    extra.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": content}], **extra)


# Replies

def test_greedy_chat_is_what_run_prints(server):
    reply = chat(server.openai(), "Name three colors.", max_tokens=24)
    assert reply.choices[0].message.content == run_cli("-p", "Name three colors.", "-n", 24).stdout
    ids = run_cli("-p", "Name three colors.", "-n", 0, "--show-ids").stderr
    prompt_ids = json.loads(re.search(r"prompt ids: (\[.*\])", ids)[1])
    assert reply.usage.prompt_tokens == len(prompt_ids)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.model == MODEL_ID


def test_greedy_completion_is_what_run_prints_raw(server):
    reply = server.openai().completions.create(model=MODEL_ID, prompt="The capital of France is", max_tokens=16,
                                               temperature=0)
    expected = run_cli("--raw", "--no-display-prompt", "-p", "The capital of France is", "-n", 16).stdout
    assert reply.choices[0].text == expected
    assert reply.usage.completion_tokens == 16 and reply.choices[0].finish_reason == "length"


def test_logit_bias_is_what_run_prints_with_the_same_bias(server, tmp_path):
    prompt = "The capital of France is"
    plain = run_cli("--raw", "--no-display-prompt", "-p", prompt, "-n", 8, "--ids-out", tmp_path / "ids.json").stdout
    first = json.loads((tmp_path / "ids.json").read_text())["generated"][0]
    client = server.openai()
    # Banning the greedy first token moves the reply off it, as run's --logit-bias does.
    banned = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=8, temperature=0,
                                       logit_bias={str(first): -100})
    expected = run_cli("--raw", "--no-display-prompt", "-p", prompt, "-n", 8, "--logit-bias", f"{first}-100").stdout
    assert banned.choices[0].text == expected and expected != plain
    # A strong bias on a token makes it every pick, sampled too.
    forced = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=3, temperature=0.8, seed=1,
                                       logit_bias={str(first): 100})
    status, text, _ = server.request("POST", "/detokenize", {"tokens": [first] * 3})
    assert status == 200 and forced.choices[0].text == json.loads(text)["content"]


def test_a_stream_adds_up_to_the_whole_reply_and_ends_with_its_usage(server):
    client = server.openai()
    whole = chat(client, "Write a haiku about rain.", max_tokens=32)
    pieces, finish, usage = [], None, None
    for chunk in chat(client, "Write a haiku about rain.", max_tokens=32, stream=True,
                      stream_options={"include_usage": True}):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert "".join(pieces) == whole.choices[0].message.content
    assert finish == whole.choices[0].finish_reason
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_stop_strings_end_the_reply_before_them(server):
    whole = server.openai().completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=24, temperature=0)
    text = whole.choices[0].text
    assert "," in text
    cut = server.openai().completions.create(model=MODEL_ID, prompt="1, 2, 3, 4,", max_tokens=24, temperature=0,
                                             stop=[","])
    assert cut.choices[0].text == text[:text.index(",")] and cut.choices[0].finish_reason == "stop"


def test_a_prompt_of_token_ids_is_the_prompt_those_ids_encode(server):
    text = "The capital of France is"
    shown = run_cli("--raw", "-p", text, "-n", 0, "--show-ids").stderr
    ids = json.loads(re.search(r"prompt ids: (\[.*\])", shown)[1])
    client = server.openai()
    expected = client.completions.create(model=MODEL_ID, prompt=text, max_tokens=12, temperature=0)
    for prompt in (ids, [ids]):
        reply = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0)
        assert reply.choices[0].text == expected.choices[0].text
        assert reply.usage.prompt_tokens == len(ids)
    status, body, _ = server.request("POST", "/v1/completions", {"prompt": [ids[0], 10 ** 9], "max_tokens": 2})
    error = json.loads(body)["error"]
    assert status == 400 and "outside the vocabulary" in error["message"] and error["param"] == "prompt"
    status, body, _ = server.request("POST", "/v1/completions", {"prompt": [1, "two"], "max_tokens": 2})
    assert status == 400 and "expected a token id" in json.loads(body)["error"]["message"]


def test_ignore_eos_generates_past_the_end_of_the_reply(server):
    ended = chat(server.openai(), "Say hi.", max_tokens=64)
    assert ended.choices[0].finish_reason == "stop" and ended.usage.completion_tokens < 64  # the model's own end
    longer = chat(server.openai(), "Say hi.", max_tokens=64, extra_body={"ignore_eos": True})
    assert longer.choices[0].finish_reason == "length" and longer.usage.completion_tokens == 64
    assert longer.choices[0].message.content.startswith(ended.choices[0].message.content)


def test_n_choices_sample_apart_and_a_seed_repeats_them(server):
    client = server.openai()
    first = chat(client, "Tell me a word.", max_tokens=12, n=3, seed=7, temperature=1.0)
    again = chat(client, "Tell me a word.", max_tokens=12, n=3, seed=7, temperature=1.0)
    assert [c.index for c in first.choices] == [0, 1, 2]
    assert [c.message.content for c in first.choices] == [c.message.content for c in again.choices]


def test_the_anthropic_client_gets_the_same_greedy_reply(server):
    client = anthropic.Anthropic(base_url=server.base, api_key="none", timeout=TIMEOUT, max_retries=0)
    expected = chat(server.openai(), "Name three colors.", max_tokens=24).choices[0].message.content
    # This client version takes no temperature argument: it goes in the body as the API defines it.
    message = client.messages.create(model=MODEL_ID, max_tokens=24, extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": "Name three colors."}])
    assert message.content[0].text == expected and message.stop_reason in ("end_turn", "max_tokens")
    with client.messages.stream(model=MODEL_ID, max_tokens=24, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "Name three colors."}]) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == expected and final.usage.output_tokens == message.usage.output_tokens


def test_models_tokenize_detokenize_and_apply_template(server):
    assert [m.id for m in server.openai().models.list()] == [MODEL_ID]
    status, body, _ = server.request("POST", "/tokenize", {"content": "Hello world"})
    tokens = json.loads(body)["tokens"]
    assert status == 200 and tokens
    status, body, _ = server.request("POST", "/detokenize", {"tokens": tokens})
    assert json.loads(body)["content"] == "Hello world"
    status, body, _ = server.request("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200 and "<|im_start|>user\nHi<|im_end|>" in json.loads(body)["prompt"]


# Many at once

def test_concurrent_streams_each_get_their_reply_alone_and_share_a_system_prompt(server):
    system = "You are a helpful assistant who answers in one short sentence. " * 3
    prompts = [f"What is {a} plus {b}?" for a, b in zip(range(2, 18), range(5, 21))]
    client = server.openai()

    def ask(prompt, stream):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
        if not stream:
            return client.chat.completions.create(model=MODEL_ID, messages=messages, temperature=0,
                                                  max_tokens=16).choices[0].message.content
        return "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model=MODEL_ID, messages=messages, temperature=0, max_tokens=16, stream=True) if c.choices)

    alone = [ask(p, False) for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        together = list(pool.map(lambda p: ask(p, True), prompts))
    assert together == alone
    assert server.metric("batch_sequences_max") > 1
    assert server.metric("prompt_tokens_cached_total") > 0


# Bad requests

BAD = [  # body, status, words of the message, param
    ('{"messages": [', 400, "malformed JSON", None),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, 400, "expected a number", "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 2}, 400, "must be from 0 to 1, got 2", "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "model": "gpt-9"}, 404, "not served here", "model"),
    ({"messages": [{"role": "narrator", "content": "x"}]}, 400, "not a chat role", "messages[0].role"),
    ({"messages": []}, 400, "non-empty list", "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, 400,
     "constrained output", "response_format"),
    ({"messages": [{"role": "user", "content": "word " * 2000}]}, 400, "but the context holds 1024", None),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"hello": 1}}, 400, "must be a token id",
     "logit_bias.hello"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"5": 101}}, 400, "from -100 to 100", "logit_bias.5"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"999999": 1}}, 400,
     "logit_bias names token 999999, outside the vocabulary", None),
]


@pytest.mark.parametrize("body, status, words, param", BAD)
def test_bad_requests_get_the_right_status_and_the_server_goes_on(server, body, status, words, param):
    got, text, _ = server.request("POST", "/v1/chat/completions", body)
    error = json.loads(text)["error"]
    assert got == status and words in error["message"], text
    assert error["param"] == param
    assert server.request("GET", "/health")[0] == 200


def test_unknown_routes_and_huge_bodies(server):
    status, text, _ = server.request("GET", "/v1/nothing")
    assert status == 404 and "no route" in json.loads(text)["error"]["message"]
    status, text, _ = server.request("POST", "/v1/chat/completions", b"x" * (17 << 20))
    assert status in (413, None), text  # the server may close the connection before reading it all
    assert server.request("GET", "/health")[0] == 200


def test_a_client_gone_mid_stream_frees_its_slot(server):
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": -1, "stream": True}
    connection.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200 and response.read1(64)
    connection.close()  # gone mid-stream
    deadline = time.monotonic() + TIMEOUT
    while server.metric("requests_running") > 0:
        assert time.monotonic() < deadline, "the cancelled request kept running"
        time.sleep(0.1)
    assert chat(server.openai(), "Hi", max_tokens=4).choices[0].message.content is not None


def test_an_api_key_is_required_when_set():
    served = Served("--api-key", "s3cret", "-np", 1)
    try:
        assert served.request("GET", "/health")[0] == 200  # no key needed to ask whether it is up
        assert served.request("GET", "/v1/models")[0] == 401
        assert served.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        with pytest.raises(openai.AuthenticationError):
            served.openai("wrong").models.list()
        assert [m.id for m in served.openai("s3cret").models.list()] == [MODEL_ID]
        assert served.request("GET", "/v1/models", headers={"x-api-key": "s3cret"})[0] == 200
    finally:
        served.stop()


def test_a_full_queue_answers_503_with_retry_after():
    served = Served("-np", 1, "--max-waiting", 0)
    try:
        connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=TIMEOUT)
        body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": -1, "stream": True}
        connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and response.read1(64)  # it holds the only slot
        status, text, headers = served.request("POST", "/v1/chat/completions",
                                               {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        assert status == 503 and headers.get("Retry-After") == "1", text
        connection.close()
    finally:
        served.stop()
