"""Chat templates: our native rendering against the Jinja templates themselves, rendered by
transformers' render_jinja_template (the code behind apply_chat_template), and the prompt ids
against the Hugging Face tokenizer of the same GGUF.

Templates: SmolLM2's, read out of its GGUF; Meta's Llama 3 and Llama 2 templates (copied
below from Meta's tokenizer_config.json files), used with the synthetic Llama 3 vocabulary and
llama2.c's tok512 SentencePiece vocabulary; Qwen2.5's, Qwen3's, Gemma 3's and gpt-oss's
harmony template (the corpus in tests/data/chat_templates), which the synthetic Qwen2, Qwen3,
Gemma3 and GptOss vocabularies carry."""

import re

import pytest
from jinja2.exceptions import TemplateError
from transformers.utils.chat_template_utils import render_jinja_template

from project_paths import SOURCE_DIR
from tokenizer_oracles import (
    SMOLLM2_GGUF,
    TokenizeTool,
    fresh_rng,
    hf_backend_from_gguf,
    hf_encode,
    qwen2_pre_tokenizer,
    random_texts,
    read_tokenizer_metadata,
    smollm_pre_tokenizer,
    tok512_spec,
    write_vocab_gguf,
)

TEMPLATE_DIR = SOURCE_DIR / "tests" / "data" / "chat_templates"

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)

FIXED_CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "  You are terse.\n"},
        {"role": "user", "content": "  Hi there \n"},
        {"role": "assistant", "content": "Hello! \u00a0"},
        {"role": "user", "content": "Tell me a joke 😀 about 数字 12345."},
    ],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "\n\n"}, {"role": "user", "content": "\tx"}],
    [{"role": "system", "content": "only a system message"}],
]


def random_conversations(count):
    rng = fresh_rng()
    texts = random_texts(rng, 4 * count, max_len=40)
    conversations = []
    for i in range(count):
        n_turns = 1 + i % 4
        turns = [{"role": "user" if t % 2 == 0 else "assistant", "content": texts[4 * i + t]} for t in range(n_turns)]
        if i % 3 == 0:
            turns.insert(0, {"role": "system", "content": texts[4 * i + 3]})
        conversations.append(turns)
    return conversations


def render(template, messages, add_generation_prompt, bos, eos):
    rendered = render_jinja_template(
        conversations=[messages],
        chat_template=template,
        add_generation_prompt=add_generation_prompt,
        bos_token=bos,
        eos_token=eos,
    )
    return rendered[0][0]


def check_conversation(tool, hf, template, messages, gen, bos, eos, bos_id, add_bos, template_text=None):
    expected = render(template, messages, gen, bos, eos)
    request = dict(op="chat", messages=messages, add_generation_prompt=gen)
    if template_text is not None:
        request["template_text"] = template_text
    reply = tool.request(**request)
    assert reply["text"] == expected, messages
    ids = hf_encode(hf, expected, parse_special=True)
    if add_bos and ids[:1] != [bos_id]:
        ids = [bos_id] + ids
    assert reply["ids"] == ids
    return reply


# ---------------------------------------------------------------------------
# SmolLM2: ChatML with a default system prompt

@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2_GGUF.exists():
        pytest.skip(f"SmolLM2 model not found at {SMOLLM2_GGUF}")
    _, meta = read_tokenizer_metadata(SMOLLM2_GGUF)
    hf = hf_backend_from_gguf(SMOLLM2_GGUF)
    hf.pre_tokenizer = smollm_pre_tokenizer()
    tool = TokenizeTool(SMOLLM2_GGUF)
    yield tool, hf, meta["tokenizer.chat_template"]
    tool.close()


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("index", range(len(FIXED_CONVERSATIONS)))
def test_smollm2_chatml(smollm2, index, gen):
    tool, hf, template = smollm2
    reply = check_conversation(
        tool, hf, template, FIXED_CONVERSATIONS[index], gen, "<|im_start|>", "<|im_end|>", 1, add_bos=False
    )
    assert reply["format"] == "chatml" and reply["warning"] == ""
    # <|im_end|> (EOS and the end of a turn), and as llama.cpp infers them <|endoftext|> and
    # the fill-in-the-middle repository marker <reponame>
    assert reply["stop"] == [0, 2, 4]


def test_smollm2_chatml_random(smollm2):
    tool, hf, template = smollm2
    for messages in random_conversations(60):
        check_conversation(tool, hf, template, messages, True, "<|im_start|>", "<|im_end|>", 1, add_bos=False)


def test_synthetic_smollm2_carries_the_real_template(smollm2):
    _, _, template = smollm2
    gen = TokenizeTool("--synthetic", "smollm2", 1000)
    try:
        assert gen.request(op="spec")["chat_template"] == template
    finally:
        gen.close()


def test_smollm2_template_override(smollm2):
    tool, _, _ = smollm2
    messages = FIXED_CONVERSATIONS[1]
    reply = tool.request(op="chat", messages=messages, template="plain")
    assert reply["format"] == "plain"
    assert reply["text"] == "System: Be brief.\nUser: What is 2+2?\nAssistant:"
    with pytest.raises(RuntimeError) as err:
        tool.request(op="chat", messages=messages, template="zephyr")
    for name in ("zephyr", "chatml", "llama3", "llama2", "gemma", "plain"):
        assert name in str(err.value)


# ---------------------------------------------------------------------------
# Llama 3 on the synthetic vocabulary

@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    gen = TokenizeTool("--synthetic", "llama3", 128256)
    spec = gen.request(op="spec")
    gen.close()
    path = tmp_path_factory.mktemp("llama3") / "llama3.gguf"
    write_vocab_gguf(path, spec)
    tool = TokenizeTool(path)
    yield tool, hf_backend_from_gguf(path), spec
    tool.close()


def test_llama3_synthetic_carries_metas_template(llama3):
    _, _, spec = llama3
    assert spec["chat_template"] == LLAMA3_TEMPLATE


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("index", range(len(FIXED_CONVERSATIONS)))
def test_llama3(llama3, index, gen):
    tool, hf, _ = llama3
    reply = check_conversation(
        tool, hf, LLAMA3_TEMPLATE, FIXED_CONVERSATIONS[index], gen, "<|begin_of_text|>", "<|end_of_text|>",
        128000, add_bos=True,
    )
    assert reply["format"] == "llama3"
    assert reply["ids"].count(128000) == 1  # the template's BOS, not doubled
    assert reply["stop"] == [128001, 128008, 128009]


def test_llama3_random(llama3):
    tool, hf, _ = llama3
    for messages in random_conversations(60):
        check_conversation(
            tool, hf, LLAMA3_TEMPLATE, messages, True, "<|begin_of_text|>", "<|end_of_text|>", 128000, add_bos=True
        )


# ---------------------------------------------------------------------------
# Llama 2 on tok512 (a SentencePiece vocabulary with <s> and </s>)

@pytest.fixture(scope="module")
def llama2(tmp_path_factory):
    path = tmp_path_factory.mktemp("llama2") / "tok512.gguf"
    write_vocab_gguf(path, tok512_spec())
    tool = TokenizeTool(path)
    yield tool, hf_backend_from_gguf(path)
    tool.close()


def llama2_conversations():
    alternating = [m for m in FIXED_CONVERSATIONS if all(
        (t["role"] == "user") == (i % 2 == 0) for i, t in enumerate(m[1:] if m[0]["role"] == "system" else m)
    )]
    return alternating + random_conversations(40)


@pytest.mark.parametrize("gen", [True, False])
def test_llama2(llama2, gen):
    tool, hf = llama2
    for messages in llama2_conversations():
        reply = check_conversation(
            tool, hf, LLAMA2_TEMPLATE, messages, gen, "<s>", "</s>", 1, add_bos=True, template_text=LLAMA2_TEMPLATE
        )
        assert reply["format"] == "llama2"
        assert reply["stop"] == [2]


def test_llama2_roles_must_alternate(llama2):
    tool, _ = llama2
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(TemplateError):
        render(LLAMA2_TEMPLATE, messages, True, "<s>", "</s>")
    with pytest.raises(RuntimeError, match="alternate"):
        tool.request(op="chat", messages=messages, template_text=LLAMA2_TEMPLATE)


def test_unknown_template_falls_back_to_plain(llama2):
    tool, _ = llama2
    reply = tool.request(
        op="chat", messages=FIXED_CONVERSATIONS[0], template_text="{{ messages[0].content }}<|weird|>"
    )
    assert reply["format"] == "plain"
    assert "unrecognised chat template" in reply["warning"]
    assert reply["text"] == "User: Hi\nAssistant:"
    # tok512 has no template at all
    reply = tool.request(op="chat", messages=FIXED_CONVERSATIONS[0])
    assert reply["format"] == "plain" and "no chat template" in reply["warning"]


# ---------------------------------------------------------------------------
# Qwen2.5, Qwen3 and Gemma 3 on their synthetic vocabularies, with their real templates

def synthetic_gguf(tmp_path_factory, style, n_vocab, architecture=None):
    gen = TokenizeTool("--synthetic", style, n_vocab)
    spec = gen.request(op="spec")
    gen.close()
    path = tmp_path_factory.mktemp(style) / f"{style}.gguf"
    write_vocab_gguf(path, spec, architecture=architecture or style)
    return path, spec


@pytest.fixture(scope="module", params=[("qwen2", "qwen2.5-instruct.jinja"), ("qwen3", "qwen3-0.6b.jinja")])
def qwen(request, tmp_path_factory):
    style, template_name = request.param
    path, spec = synthetic_gguf(tmp_path_factory, style, 151936)
    hf = hf_backend_from_gguf(path)
    hf.pre_tokenizer = qwen2_pre_tokenizer()
    tool = TokenizeTool(path)
    yield tool, hf, spec, (TEMPLATE_DIR / template_name).read_text()
    tool.close()


def test_qwen_synthetic_carries_the_real_template(qwen):
    _, _, spec, template = qwen
    assert spec["chat_template"] == template


@pytest.mark.parametrize("gen", [True, False])
def test_qwen_chatml(qwen, gen):
    tool, hf, _, template = qwen
    for messages in FIXED_CONVERSATIONS + random_conversations(40):
        reply = check_conversation(tool, hf, template, messages, gen, "<|endoftext|>", "<|im_end|>", 151643,
                                   add_bos=False)
        assert reply["format"] == "chatml" and reply["warning"] == ""
        # <|endoftext|>, <|im_end|>, <|fim_pad|>, <|repo_name|>, <|file_sep|>: llama.cpp's end-of-generation set
        assert reply["stop"] == [151643, 151645, 151662, 151663, 151664]


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    path, spec = synthetic_gguf(tmp_path_factory, "gemma3", 262144)
    tool = TokenizeTool(path)
    yield tool, hf_backend_from_gguf(path), spec, (TEMPLATE_DIR / "gemma-3-it.jinja").read_text()
    tool.close()


def test_gemma3_synthetic_carries_the_real_template(gemma3):
    _, _, spec, template = gemma3
    assert spec["chat_template"] == template


@pytest.mark.parametrize("gen", [True, False])
def test_gemma3(gemma3, gen):
    tool, hf, _, template = gemma3
    for messages in llama2_conversations():  # Gemma's template, too, wants user and model turns to alternate
        reply = check_conversation(tool, hf, template, messages, gen, "<bos>", "<eos>", 2, add_bos=True)
        assert reply["format"] == "gemma" and reply["warning"] == ""
        assert reply["ids"].count(2) == 1  # the template's <bos>, not doubled
        assert reply["stop"] == [1, 106]  # <eos>, and <end_of_turn> as llama.cpp infers it
        # The built-in gemma format writes what Gemma 3's template does.
        built_in = tool.request(op="chat", messages=messages, add_generation_prompt=gen, template="gemma")
        assert (built_in["text"], built_in["ids"], built_in["stop"]) == (reply["text"], reply["ids"], reply["stop"])


def test_gemma3_roles_must_alternate(gemma3):
    tool, _, _, template = gemma3
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(TemplateError):
        render(template, messages, True, "<bos>", "<eos>")
    with pytest.raises(RuntimeError, match="alternate"):
        tool.request(op="chat", messages=messages, template="gemma")


# ---------------------------------------------------------------------------
# gpt-oss: harmony on its synthetic vocabulary (o200k's split), with OpenAI's template

CURRENT_DATE = re.compile(r"Current date: \d{4}-\d{2}-\d{2}\n")


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    # transformers reads the vocabulary of a "llama" file; it knows o200k's split by its "gpt-4o" name.
    path, spec = synthetic_gguf(tmp_path_factory, "gpt-oss", 201088, architecture="llama")
    tool = TokenizeTool(path)
    yield tool, hf_backend_from_gguf(path), spec, (TEMPLATE_DIR / "gpt-oss-120b.jinja").read_text()
    tool.close()


def test_gpt_oss_synthetic_carries_the_real_template(gpt_oss):
    _, _, spec, template = gpt_oss
    assert spec["chat_template"] == template
    assert spec["pre"] == "gpt-4o"


@pytest.mark.parametrize("gen", [True, False])
def test_gpt_oss_harmony(gpt_oss, gen):
    """Our rendering of the harmony template is the Jinja one (the system message's
    date, the clock's, set aside), and its ids are the Hugging Face tokenizer's."""
    tool, hf, spec, template = gpt_oss
    for messages in FIXED_CONVERSATIONS + random_conversations(20):
        reply = tool.request(op="chat", messages=messages, add_generation_prompt=gen)
        expected = render(template, messages, gen, "<|startoftext|>", "<|return|>")
        assert CURRENT_DATE.sub("", reply["text"]) == CURRENT_DATE.sub("", expected), messages
        assert reply["ids"] == hf_encode(hf, reply["text"], parse_special=True)
        assert reply["warning"] == ""
        # <|endoftext|>, <|return|> and <|call|> end a reply, as llama.cpp sets them; <|end|> only
        # closes a message (the analysis, then the final answer follows).
        ids = {text: spec["tokens"].index(text) for text in ("<|endoftext|>", "<|return|>", "<|call|>")}
        assert reply["stop"] == sorted(ids.values())
