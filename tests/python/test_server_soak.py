"""A bounded soak of `ntransformer serve`: for SOAK_SECONDS, client threads
send one server (the default model on the CPU, Qwen2.5's template so tools
render) a random mix of chat and completion requests, streamed and not,
with tools, stop strings, log-probabilities and bad fields, among clients
that go away mid-stream or before the reply starts.

Every request whose client stays gets a complete, well-formed reply (or, for
a bad field, its 400); the clients that left harm no one, and once all is
answered every slot is idle again. The server's resident memory after the
soak is within MEMORY_SLACK of what it was after a warm-up that ran every
kind of request once: the KV pool is allocated (and touched) when the model
loads, so what a soak could add is leaked request state, not cache.

Nothing depends on timing: the soak's length bounds how many requests run,
not what any of them must get."""

import http.client
import json
import random
import threading
import time

import pytest

import project_paths
from test_server import MODEL_ID, TIMEOUT, Served, openai

SOAK_SECONDS = 60
CLIENTS = 6
SLOTS = 4
# What a server that leaks nothing still adds after the warm-up: its HTTP
# pool has 2 x (slots + --max-waiting) threads (136 here), each touching the
# first pages of its stack the first time it serves, and glibc gives threads
# that allocate at once arenas of their own (up to 8 a core), each keeping
# some freed memory. Measured on 2 cores: 8 MiB over the first 250 requests,
# then 2, 1 and 1 over each next 250 (it levels off; a leak would not).
MEMORY_SLACK = 48 << 20
TEMPLATE = project_paths.SOURCE_DIR / "tests" / "data" / "chat_templates" / "qwen2.5-instruct.jinja"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
TOPICS = ["the sea", "a red fox", "bread", "winter", "a lighthouse", "numbers", "rain", "a small town"]


def resident_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Soak:
    """The actions a client picks from; each returns normally or raises what went wrong."""

    def __init__(self, server, rng):
        self.server, self.rng = server, rng
        self.client = server.openai()

    def messages(self):
        m = [{"role": "user", "content": f"Write about {self.rng.choice(TOPICS)}."}]
        if self.rng.random() < 0.5:
            m.insert(0, {"role": "system", "content": "You are a helpful assistant. Answer briefly."})
        return m

    def sampling(self):
        max_tokens = self.rng.randint(1, 24)
        s = {"max_tokens": max_tokens, "temperature": self.rng.choice([0, 0.7, 1.0]), "seed": self.rng.randint(0, 99)}
        if self.rng.random() < 0.3:
            s["stop"] = [self.rng.choice([".", ",", "\n", " the"])]
        if self.rng.random() < 0.2:
            s["logprobs"] = True
            s["top_logprobs"] = self.rng.randint(0, 5)
        return s, max_tokens

    def chat(self):
        s, max_tokens = self.sampling()
        reply = self.client.chat.completions.create(model=MODEL_ID, messages=self.messages(), **s)
        choice = reply.choices[0]
        assert choice.finish_reason in ("stop", "length") and isinstance(choice.message.content, str)
        assert reply.usage.completion_tokens <= max_tokens
        for stop in s.get("stop", []):
            assert stop not in choice.message.content
        if "logprobs" in s:
            # One per generated token; with a stop string, less its own tokens.
            reported = len(choice.logprobs.content)
            assert reported == reply.usage.completion_tokens if "stop" not in s else reported <= reply.usage.completion_tokens
            assert all(len(t.top_logprobs) == s["top_logprobs"] for t in choice.logprobs.content)

    def chat_stream(self):
        s, max_tokens = self.sampling()
        text, finish, usage = "", None, None
        for chunk in self.client.chat.completions.create(model=MODEL_ID, messages=self.messages(), stream=True,
                                                         stream_options={"include_usage": True}, **s):
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        assert finish in ("stop", "length") and usage is not None and usage.completion_tokens <= max_tokens
        for stop in s.get("stop", []):
            assert stop not in text

    def completion(self):
        s, max_tokens = self.sampling()
        if "logprobs" in s:
            s["logprobs"] = s.pop("top_logprobs")
        prompt = f"Once upon a time, {self.rng.choice(TOPICS)}"
        if self.rng.random() < 0.5:
            reply = self.client.completions.create(model=MODEL_ID, prompt=prompt, **s)
            assert reply.choices[0].finish_reason in ("stop", "length")
            assert reply.usage.completion_tokens <= max_tokens
            if "logprobs" in s:
                assert "".join(reply.choices[0].logprobs.tokens).startswith(reply.choices[0].text)
        else:
            finish = None
            for chunk in self.client.completions.create(model=MODEL_ID, prompt=prompt, stream=True, **s):
                finish = chunk.choices[0].finish_reason or finish
            assert finish in ("stop", "length")

    def tool_call(self):
        reply = self.client.chat.completions.create(
            model=MODEL_ID, messages=[{"role": "user", "content": "What's the weather in Paris?"}], tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}}, temperature=0,
            max_tokens=self.rng.choice([12, 48]))
        choice = reply.choices[0]
        assert choice.finish_reason in ("tool_calls", "length")
        assert [c.function.name for c in choice.message.tool_calls] == ["get_weather"]
        if choice.finish_reason == "tool_calls":
            json.loads(choice.message.tool_calls[0].function.arguments)

    def raw_stream(self):
        """Reads the Server-Sent Events itself: every event is JSON until [DONE], the last."""
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=TIMEOUT)
        try:
            body = {"messages": self.messages(), "stream": True, "max_tokens": self.rng.randint(1, 16)}
            connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200
            events = [e for e in response.read().decode().split("\n\n") if e]
            assert events[-1] == "data: [DONE]"
            finishes = [json.loads(e[6:])["choices"][0]["finish_reason"] for e in events[:-1]]
            assert finishes[-1] in ("stop", "length") and not any(finishes[:-1])
        finally:
            connection.close()

    def bad_request(self):
        body = self.rng.choice([{"messages": [{"role": "user", "content": "x"}], "top_p": 7},
                                {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 30, "logprobs": True},
                                {"messages": "nope"}])
        status, text, _ = self.server.request("POST", "/v1/chat/completions", body)
        assert status == 400 and json.loads(text)["error"]["param"], text

    def leave(self):
        """A client that goes away: before its reply starts, or after some of it."""
        connection = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=TIMEOUT)
        try:
            body = {"messages": self.messages(), "stream": True, "max_tokens": -1}
            connection.request("POST", "/v1/chat/completions", body=json.dumps(body),
                               headers={"Content-Type": "application/json"})
            if self.rng.random() < 0.5:
                response = connection.getresponse()
                for _ in range(self.rng.randint(1, 6)):
                    response.readline()
        finally:
            connection.close()

    def stream_closed_by_the_client(self):
        """The openai client's stream, closed after a few chunks."""
        stream = self.client.chat.completions.create(model=MODEL_ID, messages=self.messages(), stream=True,
                                                     max_tokens=200)
        for i, _ in enumerate(stream):
            if i == 2:
                break
        stream.close()

    ACTIONS = [("chat", 4), ("chat_stream", 4), ("completion", 3), ("tool_call", 1), ("raw_stream", 2),
               ("bad_request", 1), ("leave", 2), ("stream_closed_by_the_client", 1)]

    def pick(self):
        names, weights = zip(*self.ACTIONS)
        return self.rng.choices(names, weights)[0]


def wait_until_idle(server):
    deadline = time.monotonic() + TIMEOUT
    while True:
        slots = json.loads(server.request("GET", "/slots")[1])
        if server.metric("requests_running") == 0 and not any(s["is_processing"] for s in slots):
            return
        assert time.monotonic() < deadline, f"requests still running: {slots}"
        time.sleep(0.1)


def test_a_minute_of_mixed_requests_fails_none_and_leaks_nothing():
    server = Served("-np", SLOTS, "--chat-template-file", TEMPLATE)
    try:
        # Warm-up: every action once, so buffers sized by the work are at their size.
        warm = Soak(server, random.Random(0))
        for name, _ in Soak.ACTIONS:
            getattr(warm, name)()
        wait_until_idle(server)
        rss_start = resident_bytes(server.proc.pid)

        failures, counts, lock = [], {}, threading.Lock()
        deadline = time.monotonic() + SOAK_SECONDS

        def client(seed):
            soak = Soak(server, random.Random(seed))
            # Every action once, in an order of its own, however long that takes; then at random until the deadline.
            first = [name for name, _ in Soak.ACTIONS]
            soak.rng.shuffle(first)
            while first or time.monotonic() < deadline:
                name = first.pop() if first else soak.pick()
                try:
                    getattr(soak, name)()
                except (AssertionError, openai.OpenAIError, OSError, ValueError) as e:
                    with lock:
                        failures.append(f"{name}: {type(e).__name__}: {e}")
                with lock:
                    counts[name] = counts.get(name, 0) + 1

        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(1, CLIENTS + 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SOAK_SECONDS + TIMEOUT)
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert failures == [], f"{len(failures)} of {sum(counts.values())} requests failed: {failures[:5]}"
        assert all(counts[name] >= CLIENTS for name, _ in Soak.ACTIONS), counts

        wait_until_idle(server)
        assert server.request("GET", "/health")[0] == 200
        Soak(server, random.Random(99)).chat()  # still serving
        growth = resident_bytes(server.proc.pid) - rss_start
        assert growth <= MEMORY_SLACK, f"resident memory grew {growth >> 20} MiB over {sum(counts.values())} requests"
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.proc.stderr.read()
