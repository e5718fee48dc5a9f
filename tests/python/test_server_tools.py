"""Tools and reasoning through `ntransformer serve`, with the official `openai`
and `anthropic` clients, on SmolLM2 serving real chat templates from
tests/data/chat_templates (--chat-template-file):

- the prompt a request with tools, tool calls and tool results renders
  (/apply-template) is what Python jinja2 renders from the same template and
  the same conversation, as the server hands it to the template;
- a tool_choice naming a function writes the start of its call ahead of the
  model, so SmolLM2 (which calls nothing by itself) answers with a call: the
  reply carries it as OpenAI tool_calls and Anthropic tool_use, streamed or
  not, alike; a template that opens the model's reasoning (QwQ) sends the
  reply to reasoning_content and thinking blocks;
- what a template or the server cannot do is refused with 400 naming the field.

Greedy decoding makes every reply repeatable; nothing depends on timing."""

import json
import re

import pytest

import project_paths
from test_chat_templates import ENV
from test_server import MODEL_ID, TIMEOUT, anthropic, openai, serving

TEMPLATES = project_paths.SOURCE_DIR / "tests" / "data" / "chat_templates"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}},
]
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]
ARGUMENTS = {"city": "Zürich", "unit": "celsius"}

# A conversation as a client sends it: a call (content null, arguments as JSON text) and its result.
CONVERSATION = [
    {"role": "system", "content": "You can call tools."},
    {"role": "user", "content": "What's the weather in Zürich?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call00001", "type": "function",
         "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS, ensure_ascii=False)}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": '{"temperature": 21.5, "sky": "clear"}'},
    {"role": "assistant", "content": "It is 21.5 °C and clear in Zürich."},
    {"role": "user", "content": "And in Bern?"},
]


def as_the_template_sees_it(messages):
    """The conversation as the server gives it to a template: content a string, a call's
    arguments the object they spell (these templates render them with tojson)."""
    out = []
    for m in messages:
        m = {**m, "content": m.get("content") or ""}
        if "tool_calls" in m:
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


SMOLLM2_BOS, SMOLLM2_EOS = "<|im_start|>", "<|im_end|>"  # ids 1 and 2 of its vocabulary


def jinja2_prompt(template, messages, tools):
    source = (TEMPLATES / template).read_bytes().decode("utf-8")
    context = {"messages": as_the_template_sees_it(messages), "add_generation_prompt": True,
               "bos_token": SMOLLM2_BOS, "eos_token": SMOLLM2_EOS}
    if tools:
        context["tools"] = tools
    return ENV.from_string(source).render(**context)


def undated(prompt):
    """gpt-oss's template writes today's date; the oracle's clock is fixed."""
    return re.sub(r"Current date: \d{4}-\d{2}-\d{2}", "Current date: DATE", prompt)


FORMATS = ["qwen2.5-instruct.jinja", "qwen3-0.6b.jinja", "llama-3.3-70b-instruct.jinja",
           "mistral-nemo-instruct-2407.jinja", "gpt-oss-120b.jinja"]


@pytest.fixture(scope="module", params=FORMATS, ids=[f.removesuffix(".jinja") for f in FORMATS])
def served(request):
    """SmolLM2 with each format's template."""
    with serving("-np", 1, "--chat-template-file", TEMPLATES / request.param) as server:
        server.template = request.param
        yield server


@pytest.fixture(scope="module")
def hermes():
    """Qwen2.5's template (Hermes calls), for what one format shows well enough."""
    with serving("-np", 1, "--chat-template-file", TEMPLATES / "qwen2.5-instruct.jinja") as server:
        yield server


@pytest.fixture(scope="module")
def smol():
    """SmolLM2's own template, which renders no tools."""
    with serving("-np", 1) as server:
        yield server


def anthropic_client(server):
    return anthropic.Anthropic(base_url=server.base, api_key="none", timeout=TIMEOUT, max_retries=0)


def test_the_vocabulary_specials_are_the_oracles(smol):
    assert json.loads(smol.request("POST", "/detokenize", {"tokens": [1, 2]})[1])["content"] == SMOLLM2_BOS + SMOLLM2_EOS


def test_tools_and_tool_history_render_as_jinja2_renders_them(served):
    status, body, _ = served.request("POST", "/apply-template", {"messages": CONVERSATION, "tools": TOOLS})
    assert status == 200, body
    assert undated(json.loads(body)["prompt"]) == undated(jinja2_prompt(served.template, CONVERSATION, TOOLS))
    # tool_choice "none" leaves the tools out.
    status, body, _ = served.request("POST", "/apply-template",
                                     {"messages": CONVERSATION, "tools": TOOLS, "tool_choice": "none"})
    assert undated(json.loads(body)["prompt"]) == undated(jinja2_prompt(served.template, CONVERSATION, None))


def called(client, stream=False, max_tokens=48):
    """A request whose tool_choice names get_weather: (name, arguments, id, finish_reason, content)."""
    args = dict(model=MODEL_ID, temperature=0, max_tokens=max_tokens, tools=TOOLS,
                messages=[{"role": "user", "content": "What's the weather in Paris?"}],
                tool_choice={"type": "function", "function": {"name": "get_weather"}})
    if not stream:
        choice = client.chat.completions.create(**args).choices[0]
        (call,) = choice.message.tool_calls
        return call.function.name, call.function.arguments, call.id, choice.finish_reason, choice.message.content
    name, arguments, ids, finish, content = None, "", set(), None, None
    for chunk in client.chat.completions.create(stream=True, **args):
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            if choice.delta.content:
                content = (content or "") + choice.delta.content
            for call in choice.delta.tool_calls or []:
                assert call.index == 0
                if call.id:
                    ids.add(call.id)
                    name = call.function.name
                arguments += call.function.arguments or ""
    (call_id,) = ids
    return name, arguments, call_id, finish, content


def test_a_named_tool_choice_gets_a_call_streamed_or_not(served):
    client = served.openai()
    name, arguments, call_id, finish, content = called(client)
    assert name == "get_weather" and re.fullmatch(r"[A-Za-z0-9]{9}", call_id)
    assert finish in ("tool_calls", "length")
    streamed = called(client, stream=True)
    assert streamed[0] == name and streamed[1] == arguments and streamed[3] == finish and streamed[4] == content


def test_the_anthropic_client_gets_tool_use(hermes):
    client = anthropic_client(hermes)
    # Enough tokens for SmolLM2 to close the call: its input is then the JSON of the OpenAI call's arguments.
    args = dict(model=MODEL_ID, max_tokens=200, tools=ANTHROPIC_TOOLS, extra_body={"temperature": 0},
                tool_choice={"type": "tool", "name": "get_weather"},
                messages=[{"role": "user", "content": "What's the weather in Paris?"}])
    message = client.messages.create(**args)
    uses = [b for b in message.content if b.type == "tool_use"]
    assert len(uses) == 1 and uses[0].name == "get_weather"
    _, arguments, _, finish, _ = called(hermes.openai(), max_tokens=200)
    assert finish == "tool_calls" and message.stop_reason == "tool_use"
    assert uses[0].input == json.loads(arguments)
    with client.messages.stream(**args) as stream:
        final = stream.get_final_message()
    streamed = [b for b in final.content if b.type == "tool_use"]
    assert [(b.name, b.input) for b in streamed] == [(b.name, b.input) for b in uses]
    assert final.stop_reason == message.stop_reason
    # The call and its result go back into the conversation.
    follow = client.messages.create(**{**args, "tool_choice": {"type": "auto"}, "messages": [
        args["messages"][0], {"role": "assistant", "content": [b.model_dump() for b in message.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "21 C, clear"}]}]})
    assert follow.content


def test_reasoning_goes_apart_from_the_content():
    """QwQ's template opens <think> for the model: SmolLM2's reply is reasoning until it closes it."""
    with serving("-np", 1, "--chat-template-file", TEMPLATES / "qwq-32b.jinja") as server:
        client = server.openai()
        args = dict(model=MODEL_ID, temperature=0, max_tokens=24, messages=[{"role": "user", "content": "What is 2+2?"}])
        inline = client.chat.completions.create(extra_body={"reasoning_format": "none"}, **args).choices[0].message
        raw = inline.content
        assert raw and getattr(inline, "reasoning_content", None) is None
        apart = client.chat.completions.create(**args).choices[0].message
        if "</think>" in raw:
            thought, _, answer = raw.partition("</think>")
            assert apart.reasoning_content == thought.strip() and apart.content == answer.lstrip()
        else:
            assert apart.reasoning_content == raw.lstrip() and apart.content == ""
        reasoning, content = "", ""
        for chunk in client.chat.completions.create(stream=True, **args):
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
        assert (reasoning, content) == (apart.reasoning_content, apart.content)
        message = anthropic_client(server).messages.create(model=MODEL_ID, max_tokens=24, extra_body={"temperature": 0},
                                                           messages=args["messages"])
        assert message.content[0].type == "thinking" and message.content[0].thinking == apart.reasoning_content
    # The server's flag keeps it inline for every request.
    with serving("-np", 1, "--chat-template-file", TEMPLATES / "qwq-32b.jinja", "--reasoning-format", "none") as server:
        assert server.openai().chat.completions.create(**args).choices[0].message.content == raw


REFUSED = [  # body, param, words
    ({"tools": [{"type": "code_interpreter"}]}, "tools[0].type", "only"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "no tool"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ({"reasoning_format": "secret"}, "reasoning_format", "expected"),
]


@pytest.mark.parametrize("extra, param, words", REFUSED)
def test_bad_tool_fields_are_refused_by_name(hermes, extra, param, words):
    body = {"messages": [{"role": "user", "content": "x"}], **extra}
    status, text, _ = hermes.request("POST", "/v1/chat/completions", body)
    error = json.loads(text)["error"]
    assert status == 400 and error["param"] == param and words in error["message"], text
    assert hermes.request("GET", "/health")[0] == 200


def test_a_template_without_tools_refuses_them(smol):
    with pytest.raises(openai.BadRequestError) as e:
        smol.openai().chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "x"}], tools=TOOLS)
    error = e.value.body.get("error", e.value.body)
    assert error["param"] == "tools" and "no tool-call format" in error["message"]
    with pytest.raises(anthropic.BadRequestError) as e:
        anthropic_client(smol).messages.create(model=MODEL_ID, max_tokens=4, tools=ANTHROPIC_TOOLS,
                                               messages=[{"role": "user", "content": "x"}])
    assert "tools" in str(e.value)
    status, text, _ = smol.request("POST", "/v1/chat/completions", {"messages": CONVERSATION})
    assert status == 400 and json.loads(text)["error"]["param"] == "messages"
    # Without tools the plain reply is unchanged.
    reply = smol.openai().chat.completions.create(model=MODEL_ID, temperature=0, max_tokens=8,
                                                  messages=[{"role": "user", "content": "Hi"}]).choices[0]
    assert reply.message.content and reply.message.tool_calls is None
