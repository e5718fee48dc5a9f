"""The C++ Jinja engine (src/chat) against Python jinja2 configured as Hugging Face transformers
configures it for apply_chat_template: every template in tests/data/chat_templates with several
conversations, and small templates exercising one feature each. Expected text always comes from
jinja2; the C++ side is tests/tools/chat_template_tool. Where jinja2 fails (a template rejecting a
conversation), the tool must fail too, carrying raise_exception's message."""

import json
import os
import subprocess
import traceback
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

import project_paths

TOOL = Path(os.environ.get("NT_CHAT_TEMPLATE_TOOL", project_paths.BUILD_DIR / "tests" / "chat_template_tool"))
TEMPLATES_DIR = project_paths.SOURCE_DIR / "tests" / "data" / "chat_templates"
TEMPLATES = sorted(TEMPLATES_DIR.glob("*.jinja"))
NOW = datetime(2024, 7, 26, 14, 5, 9)  # strftime_now's fixed clock, given to the tool as --now


# --- the oracle: jinja2 as transformers' chat_template_utils sets it up --------------------------


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} tag (AssistantTracker) renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateNamespace(jinja2.utils.Namespace):
    """transformers' namespace(): refuses underscore-prefixed attributes."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute."
            )


class TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


ENV = make_env()


def alias_reasoning(messages):
    """transformers copies a message's reasoning under `reasoning_content` and `thinking`."""
    out = []
    for m in messages:
        reasoning = next((m[k] for k in ("reasoning_content", "thinking", "reasoning") if m.get(k) is not None), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def jinja_render(source, context):
    """("ok", text) or ("error", exception, template line or None)."""
    try:
        return ("ok", ENV.from_string(source).render(**context))
    except jinja2.exceptions.TemplateSyntaxError as e:
        return ("error", e, e.lineno)
    except Exception as e:  # noqa: BLE001 - any failure of the template is an expected outcome
        lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if f.filename == "<template>"]
        return ("error", e, lines[-1] if lines else None)


def tool_render(tmp_path, template_path, context):
    context_path = tmp_path / "context.json"
    context_path.write_text(json.dumps(context, ensure_ascii=False), encoding="utf-8")
    return subprocess.run(
        [str(TOOL), "--now", NOW.strftime("%Y-%m-%dT%H:%M:%S"), str(template_path), str(context_path)],
        capture_output=True,
    )


def check(tmp_path, template_path, context, check_line=False):
    """Renders with both and asserts the same text, or that both fail."""
    source = template_path.read_bytes().decode("utf-8")  # exact bytes: no newline translation
    expected = jinja_render(source, context)
    got = tool_render(tmp_path, template_path, context)
    stderr = got.stderr.decode("utf-8", "replace")
    if expected[0] == "ok":
        assert got.returncode == 0, f"jinja2 rendered {expected[1]!r} but the tool failed: {stderr}"
        assert got.stdout.decode("utf-8") == expected[1]
        return
    error, line = expected[1], expected[2]
    assert got.returncode == 1, f"jinja2 failed ({type(error).__name__}: {error}) but the tool rendered {got.stdout!r}"
    assert stderr.startswith("error: ")
    if type(error) is jinja2.exceptions.TemplateError:  # raise_exception: the template's own message
        assert str(error) in stderr
    if check_line and line is not None:
        assert f"(line {line}," in stderr, f"jinja2 placed {type(error).__name__}: {error} on line {line}"


@pytest.fixture(scope="module", autouse=True)
def tool_built():
    project_paths.require_built(TOOL)


# --- real templates with conversations ----------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to look for"},
                    "limit": {"type": "integer", "default": 5},
                    "filters": {"type": "array", "items": {"type": "string"}},
                    "strict": {"type": "boolean"},
                },
                "required": ["query"],
            },
        },
    },
]

TOOL_CALL = {
    "id": "call00001",  # 9 alphanumerics, as Mistral's templates require
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}},
}
TOOL_RESULT = {
    "role": "tool",
    "tool_call_id": "call00001",
    "name": "get_weather",
    "content": '{"temperature": 21.5, "sky": "clear"}',
}

CONVERSATIONS = {
    "user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "system_user": {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant.\n"},
            {"role": "user", "content": "  What is 2+2?  "},
        ]
    },
    "multi_turn": {
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "Bonjour, ça va ? 你好 😀"},
            {"role": "assistant", "content": "Très bien, merci ! \u00a0"},
            {"role": "user", "content": "Tell me a joke about «numbers» — 12345."},
        ]
    },
    "tools": {
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "What's the weather in Zürich?"},
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            TOOL_RESULT,
            {"role": "assistant", "content": "It is 21.5 °C and clear in Zürich."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": TOOLS,
        "extra": {"functions": json.dumps(TOOLS), "datetime": "2024-07-26"},  # firefunction-v2 reads these
    },
    "tool_call_content_none": {
        "messages": [
            {"role": "user", "content": "Weather in Zürich?"},
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
            TOOL_RESULT,
        ],
        "tools": TOOLS,
    },
    "tool_call_string_arguments": {
        "messages": [
            {"role": "user", "content": "Search for jinja"},
            {
                "role": "assistant",
                "content": "Let me search.",
                "tool_calls": [
                    {
                        "id": "call00002",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"query": "jinja", "limit": 3}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call00002", "name": "search", "content": "No results."},
        ],
        "tools": TOOLS,
    },
    "reasoning": {
        "messages": [
            {"role": "user", "content": "Is 17 prime?"},
            {"role": "assistant", "content": "Yes.", "reasoning_content": "17 has no divisors but 1 and 17."},
            {"role": "user", "content": "And 21?"},
            {"role": "assistant", "content": "<think>\n21 = 3 * 7\n</think>\n\nNo."},
        ],
        "extra": {"enable_thinking": False, "reasoning_effort": "high"},
    },
    "roles_not_alternating": {
        "messages": [{"role": "user", "content": "One"}, {"role": "user", "content": "Two"}],
    },
    "system_only": {"messages": [{"role": "system", "content": "Only a system message."}]},
    "content_blocks": {
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is in the picture?  "}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
            {"role": "user", "content": "Thanks."},
        ]
    },
    "documents": {
        "messages": [{"role": "user", "content": "Where is Zürich?"}],
        "documents": [
            {"doc_id": 1, "title": "Zürich", "text": "Zürich is the largest city in Switzerland."},
            {"doc_id": 2, "title": "Lakes", "text": "Lake Zürich lies south-east of the city."},
        ],
        "extra": {"controls": {"citations": True}},
    },
}


def conversation_context(conversation, add_generation_prompt):
    context = {
        "messages": alias_reasoning(conversation["messages"]),
        "tools": conversation.get("tools"),
        "documents": conversation.get("documents"),
        "add_generation_prompt": add_generation_prompt,
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    context.update(conversation.get("extra", {}))
    return context


def test_corpus_is_present():
    assert len(TEMPLATES) >= 15
    sources = (TEMPLATES_DIR / "SOURCES.md").read_text(encoding="utf-8")
    for template in TEMPLATES:
        assert f"`{template.name}`" in sources, f"{template.name} has no origin in SOURCES.md"


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("conversation", sorted(CONVERSATIONS))
@pytest.mark.parametrize("template", TEMPLATES, ids=[t.stem for t in TEMPLATES])
def test_real_template(tmp_path, template, conversation, add_generation_prompt):
    check(tmp_path, template, conversation_context(CONVERSATIONS[conversation], add_generation_prompt))


@pytest.mark.parametrize("template", TEMPLATES, ids=[t.stem for t in TEMPLATES])
def test_oracle_is_transformers(template):
    """The oracle above renders as transformers' own render_jinja_template (the code behind
    apply_chat_template) does, for the templates whose output does not depend on the clock."""
    utils = pytest.importorskip("transformers.utils.chat_template_utils")
    source = template.read_bytes().decode("utf-8")
    if "strftime_now" in source:
        pytest.skip("renders today's date")
    for conversation in CONVERSATIONS.values():
        for add_generation_prompt in (True, False):
            context = conversation_context(conversation, add_generation_prompt)
            ours = jinja_render(source, context)
            extra = {k: v for k, v in context.items() if k not in ("messages", "tools", "documents", "add_generation_prompt")}
            try:
                rendered, _ = utils.render_jinja_template(
                    conversations=[conversation["messages"]], tools=conversation.get("tools"),
                    documents=conversation.get("documents"), chat_template=source,
                    add_generation_prompt=add_generation_prompt, **extra)
                theirs = ("ok", rendered[0])
            except Exception as e:  # noqa: BLE001 - compared with the oracle's failure below
                theirs = ("error", e)
            assert ours[0] == theirs[0]
            if ours[0] == "ok":
                assert ours[1] == theirs[1]
            else:
                assert type(ours[1]) is type(theirs[1]) and str(ours[1]) == str(theirs[1])


# --- one feature at a time ----------------------------------------------------------------------

FEATURES = {
    # precedence and operators
    "arithmetic": "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 7 // 2 }} {{ -7 // 2 }} "
    "{{ -7 % 3 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 1.5 * 2 }} {{ 0.1 + 0.2 }} {{ 10 ** 18 }} {{ 1e-5 }} {{ 2.5e16 }}",
    "logic": "{{ true and false or true }} {{ not true and false }} {{ 1 and 'x' }} {{ 0 or '' or 'last' }} "
    "{{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 'z' not in ['a'] }} {{ 2 in [1, 2] }}",
    "concat_and_tests": "{{ 1 ~ 2 ~ none ~ true }} {{ 1 + 2 is number }} {{ 3 is odd }} {{ 4 is even }} "
    "{{ 9 is divisibleby 3 }} {{ x is not defined }} {{ none is none }} {{ 'x' is equalto 'x' }} {{ [] is sequence }} "
    "{{ {} is mapping }} {{ 1.0 is float }} {{ 1 is integer }} {{ true is boolean }} {{ 1 is number }} "
    "{{ range is callable }} {{ 'ab' is lower }} {{ 5 is gt 3 }} {{ 5 is le 3 }} {{ 2 is in [2] }} {{ x is iterable }}",
    "ternary": "{{ 'yes' if 1 else 'no' }} {{ 'yes' if 0 else 'no' }} [{{ 'only' if false }}] "
    "{{ 'a' if false else 'b' if true else 'c' }}",
    "unary_filter_binding": "{{ -3|abs }} {{ -(3|abs) }} {{ not 'x'|length }} {{ 'n' ~ -1|abs }}",
    # literals and printing
    "literals": "{{ [1, 'a', none, true, 1.0, [2], {'k': 'v'}] }} {{ (1, 2) }} {{ (1,) }} {{ () }} {{ {'a': 1} }} "
    "{{ 'it\\'s' }} {{ \"say \\\"hi\\\"\" }} {{ 'tab\\there\\nnl' ~ '|' }} {{ '\\u00e9\\x41' }} {{ 0x1F }} {{ 1_000 }} "
    "{{ True }} {{ None }} {{ 'a' 'b' }}",
    "repr_quotes": "{{ [\"it's\", 'say \"x\"', 'both \\' \"', 'nl\\n', '\u00e9', '\\u00a0'] }}",
    # subscripts and slices
    "slices": "{{ s[1:4] }} {{ s[::-1] }} {{ s[-3:] }} {{ s[:-2] }} {{ s[::2] }} {{ l[1:] }} {{ l[::-1] }} "
    "{{ l[-1] }} {{ l[5] is defined }} {{ l[1:100] }} {{ l[-100:1] }} {{ l[3:0:-1] }} {{ s[0] }} {{ s[-1] }}",
    "tuple_and_empty_subscripts": "{{ l[] is defined }} {{ d[1, 2] is defined }} {{ {(1, 2): 'x'}[1, 2] }} {{ l[1::] }} "
    "{{ l[:3:] }} {{ l[::] }}",
    "attribute_fallback": "{{ d.a }} {{ d['a'] }} {{ d.items is callable }} {{ d.missing is defined }} {{ d['items'] }} "
    "{{ d.get('a') }} {{ d.get('zz', 'dflt') }} {{ d.b.c }} {{ l.0 }} {{ none.foo is defined }}",
    "dict_methods": "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys()|list }} {{ d.values()|list }}",
    # strings (code points, not bytes)
    "string_methods": "{{ s.upper() }} {{ s.lower() }} {{ s.title() }} {{ s.capitalize() }} {{ s.strip() }}|"
    "{{ s.lstrip() }}|{{ s.rstrip() }}|{{ s.strip(' hé') }}|{{ s.split() }} {{ s.split('l') }} {{ s.split('l', 1) }} "
    "{{ s.rsplit('l', 1) }} {{ s.startswith(' h') }} {{ s.endswith(('x', 'd ')) }} {{ s.replace('l', 'L') }} "
    "{{ s.replace('l', 'L', 1) }} {{ s.find('o') }} {{ s.find('zz') }} {{ s.count('l') }} {{ '-'.join(['a', 'b']) }} "
    "{{ '{} and {}'.format(1, 'x') }} {{ '{0}{name}'.format(7, name='n') }} {{ s|length }} {{ s[2:6] }}",
    "string_methods_more": "{{ 'x'.zfill(3) }} {{ '-1'.zfill(4) }} {{ 'ab'.ljust(4, '*') }}|{{ 'ab'.rjust(4) }} "
    "{{ 'abc'.removeprefix('a') }} {{ 'abc'.removesuffix('c') }} {{ 'A1'.isalnum() }} {{ '12'.isdigit() }} "
    "{{ ' '.isspace() }} {{ 'Ab'.isupper() }} {{ 'ab'.islower() }} {{ ''.isalpha() }} {{ 'l1\\nl2\\r\\nl3'.splitlines() }} "
    "{{ ' a b '.split(None, 1) }} {{ ' a b '.rsplit(None, 1) }} {{ 'a,b,,c'.split(',', 2) }} {{ 'aaa'.replace('', '-') }} "
    "{{ 'héllo'.find('l') }} {{ 'abc'.startswith(('x', 'a')) }} {{ 'abcabc'.count('bc') }}",
    "unicode": "{{ u|length }} {{ u[1] }} {{ u[::-1] }} {{ u|upper }} {{ u|reverse }} {{ u.split('é') }} {{ u|center(12) }}|"
    "{{ u|truncate(5, true, '…', 0) }}",
    # loops
    "loop_vars": "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
    "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]"
    "{{ loop.cycle('a', 'b') }}{{ loop.depth }};{% endfor %}",
    "loop_filter_else": "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}"
    "|{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in l if x > 99 %}{{ x }}{% else %}filtered{% endfor %}",
    "loop_unpack": "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}{% for k, v in d|dictsort %}{{ k }}{{ v }}"
    "{% endfor %}{% for (a, b) in d|items %}{{ a }}{% endfor %}",
    "loop_controls": "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}"
    "{% endif %}{{ x }}{% endfor %}",
    "loop_scope": "{% set x = 'outer' %}{% for i in [1, 2] %}{% if i == 1 %}{% set x = 'inner' %}{% endif %}{{ x }};"
    "{% endfor %}{{ x }}|{% for i in [1, 2] %}{% if i == 1 %}{% set y = 'set' %}{% endif %}[{{ y }}]{% endfor %}",
    "nested_loops": "{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}"
    "{{ loop.index }};{% endfor %}",
    "loop_over_dict_and_string": "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}",
    # assignment
    "set_forms": "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}{% set blk %}in {{ a }}\n{% endset %}"
    "[{{ blk }}]{% set up | upper %}shout{% endset %}{{ up }}{% set c = 'yes' if a else 'no' %}{{ c }}"
    "{% set l2 = l[1:] if l|length > 1 else l %}{{ l2 }}",
    "tuple_targets": "{% set ns = namespace(a=0) %}{% set ns.a, b = 1, 2 %}{{ ns.a }}{{ b }}{% set (c) = 3 %}{{ c }}"
    "{% for (x) in [5] %}{{ x }}{% endfor %}{% set (e, f) = 7, 8 %}{{ e }}{{ f }}",
    "namespace": "{% set ns = namespace(count=0, items=[]) %}{% for x in l %}{% set ns.count = ns.count + x %}"
    "{% set ns.items = ns.items + [x * 2] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns }}",
    "closures": "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}"
    "{% macro outer() %}{% set v = 'o' %}{% macro inner() %}{{ v }}{% endmacro %}{{ inner() }}{% endmacro %}{{ outer() }}"
    "{% for x in [] %}{% else %}{% set y = 1 %}{% endfor %}[{{ y }}]"
    "{% set ns = namespace(c=0) %}{% macro inc() %}{% set ns.c = ns.c + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ ns.c }}",
    "with_block": "{% with a = 1, b = 'two' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]",
    # macros and blocks
    "macros": "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}"
    "{{ greet('Ann') }} {{ greet('Bob', 'Hi') }} {{ greet(name='Cy', punct='?') }} {{ greet('Di', *['Yo']) }}",
    "macro_recursion_varargs": "{% macro fact(n) %}{{ 1 if n <= 1 else n * fact(n - 1)|int }}{% endmacro %}"
    "{{ fact(5) }} {% macro va(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ va(1, 2, 3, k=4) }}",
    "macro_sees_globals": "{% macro m() %}{{ top }}-{{ g }}{% endmacro %}{% set top = 'T' %}{{ m() }}"
    "{% set top = 'U' %}{{ m() }}",
    "call_block": "{% macro box(title) %}[{{ title }}: {{ caller() }}]{% endmacro %}"
    "{% call box('t') %}inside {{ 1 + 1 }}{% endcall %}{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}"
    "{% endmacro %}{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}",
    "filter_block": "{% filter upper %}shout {{ 'this' }}{% endfilter %}{% filter trim|title %}  a b  {% endfilter %}",
    "generation_tag": "{% for m in ['a', 'b'] %}{% generation %}<{{ m }}>{% endgeneration %}{% endfor %}",
    "unknown_names_in_untaken_branches": "{% if false %}{{ x|no_such_filter }}{% elif false and x is no_such_test %}{% endif %}"
    "{{ 'a' if true else x|no_such_filter }}{% if false %}{% set y = 1|nope %}{% if true %}{{ 2|nope }}{% endif %}"
    "{% endif %}ok",
    "raw_block": "{% raw %}{{ not rendered }} {% if %}{% endraw %}!",
    # filters
    "filters_text": "{{ '  pad  '|trim }}|{{ 'xxhixx'|trim('x') }}|{{ 'a-b c(d'|title }}|{{ 'hELLO'|capitalize }}|"
    "{{ 'Ab'|lower }}{{ 'Ab'|upper }}|{{ 'a b  c'|wordcount }}|{{ 'abc'|replace('b', 'B') }}|{{ 'x'|center(5) }}|"
    "{{ 'The quick brown fox jumps'|truncate(12) }}|{{ '<a href=\"x\">&\\'</a>'|e }}|{{ 'x'|safe }}|"
    "{{ 42|string }}{{ none|string }}|{{ '%s-%d'|format('a', 3) }}|{{ 'ab'|reverse }}",
    "filters_numbers": "{{ -3|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} "
    "{{ 2.9|round(0, 'floor') }} {{ 3|round }} {{ '42'|int }} {{ '4.7'|int }} {{ 'x'|int(7) }} {{ 4.7|int }} "
    "{{ '0x1A'|int(0, 16) }} {{ '3.25'|float }} {{ 'nan?'|float(1.5) }} {{ 3|float }} {{ [1, 2.5, 3]|sum }} "
    "{{ [3, 1, 2]|max }} {{ [3, 1, 2]|min }} {{ ['b', 'A', 'c']|max }}",
    "filters_sequences": "{{ l|length }} {{ l|count }} {{ l|first }} {{ l|last }} {{ l|join(', ') }} {{ l|list }} "
    "{{ 'abc'|list }} {{ l|reverse|list }} {{ [3, 1, 2]|sort }} {{ [3, 1, 2]|sort(reverse=true) }} "
    "{{ ['b', 'A', 'a', 'B']|sort }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true) }} {{ ['a', 'A', 'b']|unique|list }} "
    "{{ l|batch(2)|list }} {{ l|batch(2, 0)|list }} {{ [] |first is defined }} {{ l|map('string')|join }} "
    "{{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ [0, 1, '', 'x']|select|list }} {{ d|dictsort }} "
    "{{ {'x': 2, 'y': 1, 'z': 3}|dictsort(by='value', reverse=true) }} {{ d|items|list }} {{ x|default('dflt') }} {{ ''|default('e', true) }} "
    "{{ x|d('short') }} {{ none|default('kept') }}",
    "filters_attributes": "{{ people|map(attribute='name')|join('/') }} {{ people|map(attribute='age', default=0)|list }} "
    "{{ people|selectattr('age')|map(attribute='name')|list }} {{ people|rejectattr('age')|list }} "
    "{{ people|selectattr('name', 'equalto', 'Al')|list }} {{ people|sort(attribute='name')|map(attribute='name')|list }} "
    "{{ people|selectattr('age')|sum(attribute='age', start=1) }} {{ people|selectattr('age')|max(attribute='age') }} "
    "{{ people|unique(attribute='name')|list|length }} {{ people|map(attribute='name')|map('upper')|list }}",
    "percent_format": "{{ '%5.2f|%-4d|%03d|%s|%r|%x|%e|%%' % (3.14159, 7, 5, none, 'q', 255, 12345.678) }} "
    "{{ '%(a)s-%(b)05.1f' % {'a': 'x', 'b': 2.25} }} {{ '%s' % 'one' }} {{ '%-6s|%6s|%.2s' % ('ab', 'cd', 'xyz') }}",
    "groupby_and_changed": "{% for g, items in people|groupby('name') %}{{ g }}:{{ items|length }};{% endfor %}"
    "{{ people|groupby('age', default=0)|map('first')|list }} "
    "{% for x in [1, 1, 2, 2, 1] %}{{ loop.changed(x) }}{% endfor %}",
    "bool_and_float_arithmetic": "{{ true + 1 }} {{ true * 'a' }} {{ -true }} {{ 1 - true }} {{ true / 2 }} "
    "{{ 1.0e-7 }} {{ 123456789.123456789 }} {{ 1e16 }} {{ 1e15 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }} {{ 1e400 }} "
    "{{ 7.0 // 2 }} {{ 7 % -3 }} {{ -7.5 % 2 }} {{ 2 ** -2 }} {{ 0 ** 0 }} {{ 2.0 ** 3 }} {{ 2 ** 0.5 }}",
    "tojson_keys_and_escapes": "{{ {1: 'a', true: 'b', none: 'c', 2.5: 'd'}|tojson }} {{ '😀é'|tojson(ensure_ascii=true) }} "
    "{{ 'é\u2028\x1f'|tojson }} {{ {'b': 1, 'a': {'d': [1, {'z': 0, 'y': 1}]}}|tojson(sort_keys=true, indent=1) }}",
    "tojson": "{{ data|tojson }}\n{{ data|tojson(indent=2) }}\n{{ data|tojson(indent='\\t') }}\n"
    "{{ data|tojson(separators=(',', ':')) }}\n{{ data|tojson(sort_keys=true) }}\n{{ data|tojson(ensure_ascii=true) }}\n"
    "{{ [] |tojson(indent=2) }} {{ {}|tojson(indent=2) }} {{ 'x\\u0001\\x7f'|tojson }} {{ (1, 2)|tojson }}",
    "indent": "[{{ 'a\\nb\\n\\nc'|indent }}]\n[{{ 'a\\nb\\n\\nc'|indent(2, true) }}]\n[{{ 'a\\nb\\n\\nc'|indent(2, blank=true) }}]"
    "\n[{{ 'a\\nb'|indent('> ', first=true) }}]\n[{{ 'a\\n'|indent }}]",
    "globals": "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1, b='x') }} "
    "{{ dict([['k', 1]]) }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %b %-d') }} {{ namespace(a=1).a }}",
    "undefined_semantics": "[{{ x }}] [{{ x|length }}] [{{ x|trim }}] [{{ x|list }}] [{{ x is defined }}] "
    "[{{ x == x }}] [{{ x != 1 }}] [{{ 'a' ~ x ~ 'b' }}] [{{ 1 in x }}] [{{ x|default(1) }}] [{{ not x }}] "
    "[{% for i in x %}{{ i }}{% else %}empty{% endfor %}] [{{ x|items|list }}] [{{ x|join }}] [{{ x|upper }}]",
    # whitespace control: trim_blocks, lstrip_blocks, - and +
    "whitespace_trim_lstrip": "<ul>\n  {% for x in l %}\n    <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n"
    "  {# comment #}\nafter comment\n  {{ 'var keeps indent' }}\n{% if true %}  x{% endif %}\n",
    "whitespace_minus_plus": "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c\n  {%+ if true %}d{% endif +%}\ne"
    "\n{{- ' f ' -}}\n  g {#- c -#}   h\n  {%- raw -%}  r  {%- endraw -%}  i",
    "whitespace_unicode_spaces": "a\u00a0\u3000{%- if true -%}\u2003\u00a0b{%- endif -%}\u00a0c\n\u00a0 {% if true %}d{% endif %}"
    "\n{{- '\u00a0e' -}}\u00a0\u3000",
    "whitespace_crlf_and_trailing_newline": "line1\r\n{% if true %}\r\nline2\r\n{% endif %}\r\nline3\r\n",
    "whitespace_block_at_line_start_after_tag": "{% if true %}A{% endif %}  {% if true %}B{% endif %}\n  {% if true %}C"
    "{% endif %}",
}

FEATURE_CONTEXT = {
    "s": " hello world ",
    "u": "héllo wörld 😀",
    "l": [1, 2, 3, 4, 5],
    "d": {"b": 2, "a": 1, "items": "not the method", "c": 3},
    "people": [{"name": "Al", "age": 30}, {"name": "Bo"}, {"name": "Al", "age": 5}],
    "data": {"name": "Zürich", "n": [1, 2.5, None, True], "nested": {"empty": [], "obj": {}}, "q": 'say "hi"\n'},
    "g": "global",
}


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_feature(tmp_path, name):
    template = tmp_path / "feature.jinja"
    template.write_text(FEATURES[name], encoding="utf-8", newline="")
    rendered = jinja_render(FEATURES[name], FEATURE_CONTEXT)
    assert rendered[0] == "ok", f"the feature case fails in jinja2: {rendered[1]}"
    check(tmp_path, template, FEATURE_CONTEXT)


# Templates jinja2 rejects, at parse or render time: the tool must fail too, on the same line.
ERRORS = {
    "raise_exception": "line one\n{% if true %}\n  {{ raise_exception('Roles must alternate: ' ~ 3) }}\n{% endif %}",
    "raise_in_macro": "{% macro m() %}\n{{ raise_exception('from a macro') }}\n{% endmacro %}\n\n{{ m() }}",
    "unknown_filter": "{{ 1 }}\n\n{{ x | no_such_filter }}",
    "unknown_test": "\n{% for a in l if a is no_such_test %}{% endfor %}",
    "unknown_test_in_taken_branch": "\n{% if l is no_such_test %}{% endif %}",
    "unknown_filter_in_loop_in_untaken_branch": "{% if false %}\n{% for a in l %}{{ a|nope }}{% endfor %}{% endif %}",
    "unknown_filter_in_macro": "{% macro m() %}\n{{ 1|nope }}{% endmacro %}",
    "unknown_tag": "ok\n{% include 'other.jinja' %}",
    "unclosed_block": "{% for x in l %}\n{{ x }}\n",
    "unexpected_end_tag": "{% if true %}\n{% endfor %}",
    "bad_expression": "{{ 1 + }}",
    "unclosed_string": "{{ 'abc }}",
    "unclosed_comment": "a {# never closed",
    "undefined_attribute_of_undefined": "\n{{ x.y.z }}",
    "undefined_arithmetic": "{{ x + 1 }}",
    "undefined_call": "{{ no_such_function(1) }}",
    "none_not_iterable": "{% for a in none %}{% endfor %}",
    "add_str_int": "\n\n{{ 'a' + 1 }}",
    "mutating_method": "{{ l.append(6) }}",
    "namespace_underscore": "{% set ns = namespace() %}{% set ns._hidden = 1 %}",
    "not_a_namespace": "{% set d.x = 1 %}",
    "division_by_zero": "{{ 1 // 0 }}",
    "tojson_undefined": "{{ x|tojson }}",
    "unpack_mismatch": "{% for a, b in [[1, 2, 3]] %}{% endfor %}",
    "compare_str_int": "{{ 'a' < 1 }}",
    "slice_of_bool": "{{ (l|length > 0)[::-1] }}",
    "test_given_an_argument_it_lacks": "{% if l is defined l[0] is not none %}{% endif %}",
    "test_missing_its_argument": "{{ 3 is divisibleby }}",
    "filter_given_too_many_arguments": "{{ l|join(', ', 'name', 3) }}",
    "tuple_target_trailing_comma": "{% set x, = [3] %}",
    "for_target_trailing_comma": "{% for p, in [[6]] %}{% endfor %}",
    "slice_with_undefined_bound": "{{ l[nothing:] }}",
    "namespace_of_undefined": "{% set ns = namespace(nothing, a=1) %}",
    "break_outside_loop": "{% break %}",
    "macro_too_many_arguments": "{% macro m(a) %}{{ a }}{% endmacro %}\n{{ m(1, 2) }}",
    "macro_unknown_keyword": "{% macro m(a) %}{{ a }}{% endmacro %}\n\n{{ m(b=1) }}",
    "none_arithmetic": "{{ none + 1 }}",
    "runaway_macro_recursion": "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_error(tmp_path, name):
    template = tmp_path / "error.jinja"
    template.write_text(ERRORS[name], encoding="utf-8", newline="")
    assert jinja_render(ERRORS[name], FEATURE_CONTEXT)[0] == "error", "the case no longer fails in jinja2"
    check(tmp_path, template, FEATURE_CONTEXT, check_line=True)
