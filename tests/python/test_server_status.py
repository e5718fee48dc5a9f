"""GET /props and GET /slots of `ntransformer serve`, on the default model on
the CPU: /props against the GGUF file as the `gguf` package reads it and
the flags the server was started with; /slots while streams run (each
slot's request id is the id its stream's chunks carry, its counts those the
reply's usage reports) and after they end (a slot keeps its prompt's
cache). The page at / is served without the API key its own requests need
(tests/python/test_server_web.py drives it). Every wait is bounded; nothing depends on timing."""

import http.client
import json
import time

import gguf
import pytest

from test_server import MODEL, MODEL_ID, Served, TIMEOUT, serving

SLOTS = 2


@pytest.fixture(scope="module")
def server():
    with serving("-np", SLOTS, "--temp", 0.6, "--top-k", 17, "-n", 99) as served:
        yield served


def get(server, path):
    status, body, _ = server.request("GET", path)
    assert status == 200, body
    return json.loads(body)


def model_fields():
    reader = gguf.GGUFReader(MODEL)
    arch = reader.fields["general.architecture"].contents()
    keys = {"block_count": "block_count", "embedding_length": "embedding_length", "context_length": "context_length",
            "head_count": "attention.head_count", "head_count_kv": "attention.head_count_kv"}
    return {name: reader.fields[f"{arch}.{key}"].contents() for name, key in keys.items()} | {
        "arch": arch, "vocab": len(reader.fields["tokenizer.ggml.tokens"].contents())}


def test_props_describe_the_model_its_settings_and_where_its_layers_run(server):
    props = get(server, "/props")
    f = model_fields()
    assert props["model"]["id"] == MODEL_ID and props["model"]["path"] == str(MODEL)
    assert props["model"]["architecture"] == f["arch"] and props["model"]["n_layers"] == f["block_count"]
    assert props["model"]["n_embd"] == f["embedding_length"] and props["model"]["n_vocab"] == f["vocab"]
    assert props["model"]["n_ctx_train"] == f["context_length"]
    assert props["n_ctx"] == 1024 and props["total_slots"] == SLOTS  # Served's -c, and -np
    settings = props["default_generation_settings"]
    assert settings["temperature"] == pytest.approx(0.6) and settings["top_k"] == 17 and settings["max_tokens"] == 99
    plan = props["plan"]
    # On the CPU every layer is computed there, from host memory.
    assert plan["layers"] == ["cpu"] * f["block_count"]
    assert plan["counts"] == {"cpu": f["block_count"], "vram": 0, "ram": 0, "disk": 0}
    assert 0 < plan["weight_bytes_per_token"] <= MODEL.stat().st_size
    head_dim = f["embedding_length"] // f["head_count"]
    keys_and_values = 2 * f["block_count"] * f["head_count_kv"] * head_dim
    assert plan["kv_bytes_per_position"] in (keys_and_values * 2, keys_and_values * 4)  # F16 or F32 entries
    assert plan["kv_pool_positions"] >= props["n_ctx"] and plan["gpus"] == [] and plan["device"].startswith("cpu")


def test_idle_slots(server):
    slots = get(server, "/slots")
    assert [s["id"] for s in slots] == list(range(SLOTS))
    for s in slots:
        assert s["state"] == "idle" and not s["is_processing"] and s["id_task"] is None and s["request_id"] is None
        assert s["n_ctx"] == 1024 and s["next_token"]["has_next_token"] is False


def open_stream(server, content):
    """A reply streamed without end; the connection, and the id its first chunk carries."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=TIMEOUT)
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": -1, "stream": True, "temperature": 0}
    connection.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    line = response.readline()
    while not line.startswith(b"data: "):
        line = response.readline()
    return connection, response, json.loads(line[6:])["id"]


def wait_for(server, done, what):
    deadline = time.monotonic() + TIMEOUT
    while True:
        slots = get(server, "/slots")
        if done(slots):
            return slots
        assert time.monotonic() < deadline, f"{what}: {slots}"
        time.sleep(0.05)


def test_busy_slots_show_their_requests_and_keep_their_prompts_after(server):
    contents = ["Tell me a long story about a dragon.", "Tell me a long story about a ship."]
    prompt_tokens = [server.openai().chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": c}], max_tokens=1).usage.prompt_tokens for c in contents]
    streams = [open_stream(server, c) for c in contents]
    try:
        ids = [s[2] for s in streams]
        slots = wait_for(server, lambda slots: all(s["is_processing"] for s in slots), "both slots busy")
        assert sorted(s["request_id"] for s in slots) == sorted(ids)
        status, body, _ = server.request("GET", "/slots?fail_on_no_slot=1")
        assert status == 503 and "no slot is idle" in body
        by_request = {s["request_id"]: s for s in slots}
        for request_id, tokens in zip(ids, prompt_tokens):
            s = by_request[request_id]
            assert s["state"] == "processing" and isinstance(s["id_task"], int)
            assert s["n_prompt_tokens"] == tokens and 0 <= s["n_prompt_tokens_cached"] < tokens
            assert s["next_token"]["has_next_token"] and s["next_token"]["n_remain"] == -1  # max_tokens -1
        # Generation goes on: each slot's count of decoded tokens grows.
        first = {s["id"]: s["next_token"]["n_decoded"] for s in slots}
        wait_for(server, lambda later: all(s["next_token"]["n_decoded"] > first[s["id"]] for s in later), "decoding")
        slot_of = {s["request_id"]: s["id"] for s in slots}
    finally:
        for connection, _, _ in streams:
            connection.close()  # gone mid-stream: the requests are cancelled
    slots = wait_for(server, lambda slots: not any(s["is_processing"] for s in slots), "slots idle again")
    for request_id, tokens in zip(ids, prompt_tokens):
        s = slots[slot_of[request_id]]
        assert s["request_id"] is None and s["n_cached"] == tokens  # the prompt's cache, for a request that begins alike
    assert server.request("GET", "/slots?fail_on_no_slot=1")[0] == 200


def test_the_page_needs_no_key_but_its_requests_do():
    served = Served("--api-key", "s3cret", "-np", 1)
    try:
        status, body, headers = served.request("GET", "/")
        assert status == 200 and headers["Content-Type"].startswith("text/html") and "<script>" in body
        assert "http://" not in body and "https://" not in body  # it loads nothing from elsewhere
        assert served.request("GET", "/props")[0] == 401
        assert served.request("GET", "/props", headers={"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        served.stop()
