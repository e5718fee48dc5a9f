"""Our tokenizers against independent references (see tokenizer_oracles.py):

- SmolLM2-135M-Instruct (byte-level BPE, pre "smollm"): Hugging Face tokenizers built by
  transformers' GGUF converter, with SmolLM2's tokenizer.json pre-tokenizer.
- llama2.c's tok512 as a SentencePiece GGUF (and the converted stories260K when present):
  the sentencepiece library, plus the Hugging Face tokenizer transformers builds from the GGUF.
- Synthetic Llama-3-style and SmolLM2-style vocabularies (our generator) written to GGUF:
  the Hugging Face tokenizer transformers builds from that GGUF.
- Synthetic Qwen2.5 and Qwen3 vocabularies (byte-level BPE, pre "qwen2"): the Hugging Face
  tokenizer transformers builds from the GGUF, with Qwen2's tokenizer.json pre-tokenizer.
- A synthetic Gemma 3 vocabulary (SentencePiece, byte fallback, no dummy prefix, user-defined
  whitespace runs): the sentencepiece library, and the tokenizer transformers builds from the GGUF.
- The pre-tokenizer splits themselves (qwen2, llama3) against the `tokenizers` Split they stand for.
"""


import pytest

from project_paths import convert_stories260k
from tokenizer_oracles import (
    FIXED_TEXTS,
    LLAMA3_SPLIT,
    QWEN2_SPLIT,
    SMOLLM2_GGUF,
    TokenizeTool,
    fresh_rng,
    gemma_sentencepiece_processor,
    hf_backend_from_gguf,
    hf_encode,
    qwen2_pre_tokenizer,
    random_texts,
    read_tokenizer_metadata,
    sentencepiece_processor,
    smollm_pre_tokenizer,
    split_pre_tokenizer,
    tok512_spec,
    write_vocab_gguf,
)

TEXT_NAMES = sorted(FIXED_TEXTS)
EMOJI_TEXTS = [FIXED_TEXTS["emoji"], FIXED_TEXTS["emoji_zwj"], "🦀🦀 crab", "a\U0001F600b"]

# ~100 KB runs that become a few huge pre-tokenizer pieces (or one SentencePiece sequence):
# the merge loops must stay fast and exact on them.
LONG_RUNS = {
    "spaces": " " * 100000,
    "spaces_then_word": " " * 100000 + "x",
    "newlines_and_spaces": "\n \n  " * 20000,
    "digits": "1234567890" * 10000,
    "punctuation": "!@#$%^&*()" * 10000,
    "letters": "abc" * 33333,
    "cjk": "你好世界" * 8000,
    "emoji": "😀" * 25000,
}


def long_text(n_bytes):
    """About n_bytes of text: the fixed texts once, then fresh random text (few repeats, so
    the per-call word cache cannot hide slow merging)."""
    parts = list(FIXED_TEXTS.values())
    size = sum(len(p.encode()) for p in parts)
    rng = fresh_rng()
    while size < n_bytes:
        for text in random_texts(rng, 200, max_len=80):
            parts.append(text)
            size += len(text.encode())
    return " ".join(parts)


def check_stream(tool, ids, expected_text):
    chunks = tool.request(op="stream", ids=ids)["chunks"]
    assert "".join(chunks) == expected_text
    if "\ufffd" not in expected_text:
        assert all("\ufffd" not in c for c in chunks), chunks


# ---------------------------------------------------------------------------
# SmolLM2 (real model)

@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2_GGUF.exists():
        pytest.skip(f"SmolLM2 model not found at {SMOLLM2_GGUF} (scripts/fetch_default_model.sh fetches it)")
    hf = hf_backend_from_gguf(SMOLLM2_GGUF)
    hf.pre_tokenizer = smollm_pre_tokenizer()
    tool = TokenizeTool(SMOLLM2_GGUF)
    yield tool, hf
    tool.close()


def test_smollm2_metadata(smollm2):
    tool, _ = smollm2
    _, meta = read_tokenizer_metadata(SMOLLM2_GGUF)
    info = tool.request(op="info")
    assert info["n_vocab"] == len(meta["tokenizer.ggml.tokens"]) == 49152
    assert info["bos"] == meta["tokenizer.ggml.bos_token_id"]
    assert info["eos"] == meta["tokenizer.ggml.eos_token_id"]
    assert info["unk"] == meta["tokenizer.ggml.unknown_token_id"]
    assert info["add_bos"] == meta["tokenizer.ggml.add_bos_token"]
    assert info["rules"] == "smollm" and info["warnings"] == []


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_smollm2_encode(smollm2, name):
    tool, hf = smollm2
    text = FIXED_TEXTS[name]
    assert tool.encode(text) == hf_encode(hf, text, parse_special=False)
    assert tool.encode(text, parse_special=True) == hf_encode(hf, text, parse_special=True)
    # add_bos is off for SmolLM2, so add_special changes nothing
    assert tool.encode(text, add_special=True) == hf_encode(hf, text, parse_special=False)


def test_smollm2_special_tokens(smollm2):
    tool, hf = smollm2
    text = "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"
    parsed = tool.encode(text, parse_special=True)
    assert parsed == hf_encode(hf, text, parse_special=True)
    assert parsed.count(1) == 2 and parsed.count(2) == 1 and parsed[-1] == 0
    plain = tool.encode(text, parse_special=False)
    assert plain == hf_encode(hf, text, parse_special=False)
    assert not {0, 1, 2} & set(plain)


def test_smollm2_random_texts(smollm2):
    tool, hf = smollm2
    rng = fresh_rng()
    for text in random_texts(rng, 1500):
        assert tool.encode(text) == hf_encode(hf, text, parse_special=False), repr(text)


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_smollm2_decode_round_trip(smollm2, name):
    tool, hf = smollm2
    text = FIXED_TEXTS[name]
    ids = tool.encode(text, parse_special=True)
    assert tool.request(op="decode", ids=ids, skip_special=False)["text"] == text
    assert tool.request(op="decode", ids=ids)["text"] == hf.decode(ids, skip_special_tokens=True)
    check_stream(tool, ids, hf.decode(ids, skip_special_tokens=True))


def test_smollm2_decode_random_ids(smollm2):
    """Random id sequences cut characters anywhere; both sides replace bad UTF-8 alike."""
    tool, hf = smollm2
    rng = fresh_rng()
    for _ in range(300):
        ids = [int(i) for i in rng.integers(0, 49152, int(rng.integers(1, 12)))]
        ids += [int(i) for i in rng.integers(0, 20, 2)]  # some special tokens too
        for skip in (True, False):
            got = tool.request(op="decode", ids=ids, skip_special=skip)["text"]
            assert got == hf.decode(ids, skip_special_tokens=skip), ids
        assert "".join(tool.request(op="stream", ids=ids)["chunks"]) == hf.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", EMOJI_TEXTS)
def test_smollm2_stream_emoji(smollm2, text):
    tool, _ = smollm2
    ids = tool.encode(text)
    chunks = tool.request(op="stream", ids=ids)["chunks"]
    assert "".join(chunks) == text
    assert all("\ufffd" not in c for c in chunks)
    assert "" in chunks[:-1], "some emoji byte tokens should have been held back"


def test_smollm2_100kb_speed_and_match(smollm2):
    tool, hf = smollm2
    text = long_text(100 * 1024)
    reply = tool.request(op="time_encode", text=text, repeat=3)
    print(f"SmolLM2: {len(text.encode())} bytes -> {reply['n_tokens']} tokens in {reply['seconds']:.4f} s")
    assert reply["seconds"] < 1.0
    assert tool.encode(text) == hf_encode(hf, text, parse_special=False)


@pytest.mark.parametrize("name", sorted(LONG_RUNS))
def test_smollm2_long_runs(smollm2, name):
    tool, hf = smollm2
    text = LONG_RUNS[name]
    assert tool.request(op="time_encode", text=text)["seconds"] < 1.0
    assert tool.encode(text) == hf_encode(hf, text, parse_special=False)


# ---------------------------------------------------------------------------
# SentencePiece: llama2.c's tok512 written as a GGUF

@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    spec = tok512_spec()
    path = tmp_path_factory.mktemp("spm") / "tok512.gguf"
    write_vocab_gguf(path, spec)
    sp = sentencepiece_processor(spec["tokens"], spec["scores"], spec["token_types"])
    hf = hf_backend_from_gguf(path)
    tool = TokenizeTool(path)
    yield tool, sp, hf, spec
    tool.close()


def test_spm_pieces_use_space_marker(spm):
    _, _, _, spec = spm
    assert "\u2581the" in spec["tokens"] and not any(" " in t for t in spec["tokens"])
    assert spec["tokens"][3:6] == ["<0x00>", "<0x01>", "<0x02>"]


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_spm_encode_matches_sentencepiece(spm, name):
    tool, sp, hf, _ = spm
    text = FIXED_TEXTS[name]
    expected = sp.encode(text)
    assert tool.encode(text) == expected
    assert tool.encode(text, add_special=True) == [1] + expected  # add_bos
    if not text.startswith(" "):
        # HF's Metaspace skips the dummy prefix when the text already starts with a space
        # (sentencepiece and llama.cpp add it regardless), so compare only the others.
        assert tool.encode(text) == hf_encode(hf, text, parse_special=False)


def test_spm_random_texts(spm):
    tool, sp, hf, _ = spm
    rng = fresh_rng()
    for text in random_texts(rng, 1500):
        ids = tool.encode(text)
        assert ids == sp.encode(text), repr(text)
        if not text.startswith(" "):
            assert ids == hf_encode(hf, text, parse_special=False), repr(text)


def test_spm_special_tokens(spm):
    tool, sp, hf, _ = spm
    text = "<s>Once upon a time</s> there <s>"
    ids = tool.encode(text, parse_special=True)
    assert ids == hf_encode(hf, text, parse_special=True)
    assert ids[0] == 1 and ids.count(1) == 2 and ids.count(2) == 1
    assert tool.encode(text) == sp.encode(text)  # as plain text: "<", "s", ">" pieces


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_spm_decode_round_trip(spm, name):
    tool, sp, hf, _ = spm
    text = FIXED_TEXTS[name]
    ids = tool.encode(text, add_special=True)
    decoded = tool.request(op="decode", ids=ids)["text"]
    assert decoded == sp.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    assert decoded == text
    check_stream(tool, ids, text)


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_spm_stream_continues_a_prompt(spm, name):
    """Cut at each word: the stream of the rest, continuing the ids before the cut, is what
    sentencepiece's decoding of the whole adds to its decoding of the part before."""
    tool, sp, _, spec = spm
    ids = tool.encode(FIXED_TEXTS[name], add_special=True)
    cuts = [k for k in range(2, len(ids)) if spec["tokens"][ids[k]].startswith("\u2581")]
    whole = sp.decode(ids)
    for k in cuts:
        head = sp.decode(ids[:k])
        assert whole.startswith(head)
        chunks = tool.request(op="stream", ids=ids[k:], context=ids[:k])["chunks"]
        assert "".join(chunks) == whole[len(head):], (k, ids)


def spm_raw_bytes(spec, ids):
    """The bytes the pieces spell: "▁" as a space, <0xXX> as that byte; the first piece loses
    a leading "▁" (the dummy prefix) as in sentencepiece."""
    out = b""
    for n, i in enumerate(ids):
        piece, kind = spec["tokens"][i], spec["token_types"][i]
        if kind == 6:
            out += bytes([int(piece[3:5], 16)])
        elif kind == 1:
            out += (piece[1:] if n == 0 and piece.startswith("\u2581") else piece).replace("\u2581", " ").encode()
    return out


def test_spm_decode_random_ids(spm):
    """Random ids cut characters anywhere. Where the bytes are valid UTF-8 all three agree;
    where not, each library replaces differently (sentencepiece: U+FFFD per byte, HF: per byte
    token of a failing run, ours: per maximal ill-formed subpart like Python), so there we
    check the raw bytes and Python's replacement."""
    tool, sp, hf, spec = spm
    rng = fresh_rng()
    for _ in range(300):
        ids = [int(i) for i in rng.integers(3, 512, int(rng.integers(1, 12)))]
        reply = tool.request(op="decode", ids=ids)
        raw = spm_raw_bytes(spec, ids)
        assert bytes.fromhex(reply["hex"]) == raw, ids
        assert reply["text"] == raw.decode("utf-8", "replace"), ids
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            assert reply["text"] == sp.decode(ids), ids
            # HF strips a leading space even when it comes from a <0x20> byte token
            hf_text = hf.decode(ids, skip_special_tokens=True)
            assert reply["text"] == hf_text or (ids[0] == 3 + 0x20 and reply["text"] == " " + hf_text), ids
        assert "".join(tool.request(op="stream", ids=ids)["chunks"]) == reply["text"]
    for text in FIXED_TEXTS.values():
        with_bos = tool.encode(text, add_special=True)
        assert tool.request(op="decode", ids=with_bos, skip_special=False)["text"] == hf.decode(
            with_bos, skip_special_tokens=False
        )


def test_spm_100kb_speed_and_match(spm):
    """SentencePiece merges run over the whole text at once (no pre-splitting)."""
    tool, sp, _, _ = spm
    text = long_text(100 * 1024)
    reply = tool.request(op="time_encode", text=text, repeat=3)
    print(f"tok512: {len(text.encode())} bytes -> {reply['n_tokens']} tokens in {reply['seconds']:.4f} s")
    assert reply["seconds"] < 1.0
    assert tool.encode(text) == sp.encode(text)


@pytest.mark.parametrize("name", sorted(LONG_RUNS))
def test_spm_long_runs(spm, name):
    tool, sp, _, _ = spm
    text = LONG_RUNS[name]
    assert tool.request(op="time_encode", text=text)["seconds"] < 1.0
    assert tool.encode(text) == sp.encode(text)


@pytest.mark.parametrize("text", EMOJI_TEXTS)
def test_spm_stream_emoji_byte_fallback(spm, text):
    tool, _, _, _ = spm
    ids = tool.encode(text, add_special=True)
    chunks = tool.request(op="stream", ids=ids)["chunks"]
    assert "".join(chunks) == text
    assert all("\ufffd" not in c for c in chunks)


def test_stories260k_gguf_tokenizer(spm, tmp_path):
    """convert-llama2c's output carries the same vocabulary as tok512."""
    path = convert_stories260k(tmp_path)
    _, sp, _, _ = spm
    tool = TokenizeTool(path)
    try:
        assert tool.request(op="info")["n_vocab"] == 512
        for text in FIXED_TEXTS.values():
            assert tool.encode(text, add_special=True) == [1] + sp.encode(text)
    finally:
        tool.close()


# ---------------------------------------------------------------------------
# Synthetic vocabularies written to GGUF

def synthetic_fixture(tmp_path_factory, style, n_vocab, architecture="llama"):
    gen = TokenizeTool("--synthetic", style, n_vocab)
    spec = gen.request(op="spec")
    gen.close()
    path = tmp_path_factory.mktemp(style) / f"{style}.gguf"
    write_vocab_gguf(path, spec, architecture)
    return path, spec


@pytest.fixture(scope="module")
def llama3(tmp_path_factory):
    path, spec = synthetic_fixture(tmp_path_factory, "llama3", 128256)
    hf = hf_backend_from_gguf(path)
    tool = TokenizeTool(path)
    yield tool, hf, spec
    tool.close()


@pytest.fixture(scope="module")
def smollm2_synthetic(tmp_path_factory):
    path, spec = synthetic_fixture(tmp_path_factory, "smollm2", 49152)
    hf = hf_backend_from_gguf(path)
    hf.pre_tokenizer = smollm_pre_tokenizer()
    tool = TokenizeTool(path)
    yield tool, hf, spec
    tool.close()


def test_llama3_vocab_shape(llama3):
    tool, hf, spec = llama3
    assert len(spec["tokens"]) == 128256 and hf.get_vocab_size(with_added_tokens=False) == 128256
    assert spec["tokens"][128000:128002] == ["<|begin_of_text|>", "<|end_of_text|>"]
    assert spec["tokens"][128006:128010] == ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"]
    vocab = set(spec["tokens"])
    for merge in spec["merges"]:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab
    info = tool.request(op="info")
    assert info["rules"] == "llama3" and info["bos"] == 128000 and info["add_bos"]


LLAMA3_SPECIAL_TEXT = "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|><|eom_id|>"


@pytest.mark.parametrize("name", TEXT_NAMES + ["llama3_special"])
def test_llama3_encode(llama3, name):
    tool, hf, _ = llama3
    text = LLAMA3_SPECIAL_TEXT if name == "llama3_special" else FIXED_TEXTS[name]
    if "<|endoftext|>" in text:
        text = text.replace("<|endoftext|>", "<|end_of_text|>")  # transformers adds GPT-2's as a new token
    for parse_special in (False, True):
        ids = tool.encode(text, parse_special=parse_special)
        assert ids == hf_encode(hf, text, parse_special=parse_special)
        assert tool.encode(text, add_special=True, parse_special=parse_special) == [128000] + ids
        assert max(ids, default=0) < 128256


def test_llama3_ignore_merges_reference_agrees(llama3):
    """Llama 3 emits a piece that is itself a token without merging; every synthetic token is
    what BPE builds from its bytes anyway, so HF with ignore_merges gives the same ids."""
    tool, hf, _ = llama3
    from tokenizers import Tokenizer

    hf_ignore = Tokenizer.from_str(hf.to_str().replace('"ignore_merges":false', '"ignore_merges":true'))
    assert hf_ignore.model.ignore_merges
    for text in FIXED_TEXTS.values():
        text = text.replace("<|endoftext|>", "")
        assert tool.encode(text) == hf_encode(hf_ignore, text, parse_special=False)


def test_llama3_random_texts_and_round_trip(llama3):
    tool, hf, _ = llama3
    rng = fresh_rng()
    for text in random_texts(rng, 1500):
        ids = tool.encode(text)
        assert ids == hf_encode(hf, text, parse_special=False), repr(text)
        assert tool.request(op="decode", ids=ids)["text"] == text


def test_llama3_100kb_speed(llama3):
    tool, hf, _ = llama3
    text = long_text(100 * 1024)
    reply = tool.request(op="time_encode", text=text, repeat=3)
    print(f"llama3 synthetic: {len(text.encode())} bytes -> {reply['n_tokens']} tokens in {reply['seconds']:.4f} s")
    assert reply["seconds"] < 1.0
    assert tool.encode(text) == hf_encode(hf, text, parse_special=False)


@pytest.mark.parametrize("name", sorted(LONG_RUNS))
def test_llama3_long_runs(llama3, name):
    tool, hf, _ = llama3
    text = LONG_RUNS[name]
    assert tool.request(op="time_encode", text=text)["seconds"] < 1.0
    assert tool.encode(text) == hf_encode(hf, text, parse_special=False)


def test_smollm2_synthetic_encode(smollm2_synthetic):
    tool, hf, spec = smollm2_synthetic
    assert len(spec["tokens"]) == 49152 and spec["tokens"][:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    # llama.cpp ends generation at <|endoftext|>, <|im_end|> and the FIM repository marker <reponame>
    assert tool.request(op="info")["eog"] == [0, 2, 4]
    rng = fresh_rng()
    for text in list(FIXED_TEXTS.values()) + random_texts(rng, 500):
        for parse_special in (False, True):
            assert tool.encode(text, parse_special=parse_special) == hf_encode(hf, text, parse_special), repr(text)


# ---------------------------------------------------------------------------
# Pre-tokenizer splits against the `tokenizers` Split they stand for

SPLIT_RULES = {"qwen2": QWEN2_SPLIT, "llama-bpe": LLAMA3_SPLIT}

# Numbers in other scripts (all \p{N}), case-folded contractions, and newline/space mixes.
SPLIT_EDGE_TEXTS = [
    "x1y22z333w4444", "\u0663\u0664\u0665 \u00bd\u00be \uff11\uff12\uff13 \u2460\u2461 \u2167",
    "I'M HE'S they'RE we'Ve 'll 'D '\u017f", "a\r\n\r\n b  \n  c\t\n", "  12 345\n\n6", "...\n\n!!\r",
]


@pytest.fixture(scope="module")
def splitter():
    tool = TokenizeTool("--synthetic", "smollm2", 300)  # any vocabulary: `split` names its own rules
    yield tool
    tool.close()


@pytest.mark.parametrize("pre", sorted(SPLIT_RULES))
def test_pre_tokenizer_split_matches_hf(splitter, pre):
    hf = split_pre_tokenizer(SPLIT_RULES[pre])
    texts = list(FIXED_TEXTS.values()) + SPLIT_EDGE_TEXTS + random_texts(fresh_rng(), 2000)
    for text in texts:
        assert splitter.request(op="split", text=text, pre=pre)["pieces"] == [
            piece for piece, _ in hf.pre_tokenize_str(text)
        ], repr(text)


def test_qwen2_rules_names(splitter):
    for name in ("qwen2", "deepseek-r1-qwen", "megrez"):
        assert splitter.request(op="split", text="abc 123", pre=name) == {
            "pieces": ["abc", " ", "1", "2", "3"], "rules": "qwen2"}


# ---------------------------------------------------------------------------
# Qwen2.5 and Qwen3 (synthetic byte-level BPE vocabularies, pre "qwen2")

QWEN_VOCAB = 151936
QWEN_SPECIAL_TEXT = (
    "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<tool_call>\n{\"x\": 1}\n</tool_call>"
    "<|im_end|><|endoftext|><|fim_prefix|>a<|fim_suffix|>b<|fim_middle|><think>\nhm\n</think>\n\nok"
)


@pytest.fixture(scope="module", params=["qwen2", "qwen3"])
def qwen(request, tmp_path_factory):
    path, spec = synthetic_fixture(tmp_path_factory, request.param, QWEN_VOCAB, architecture=request.param)
    hf = hf_backend_from_gguf(path)
    hf.pre_tokenizer = qwen2_pre_tokenizer()  # Qwen2's tokenizer.json split (the converter picks the same)
    tool = TokenizeTool(path)
    yield request.param, tool, hf, spec
    tool.close()


def test_qwen_vocab_shape(qwen):
    style, tool, hf, spec = qwen
    tokens, types = spec["tokens"], spec["token_types"]
    assert len(tokens) == QWEN_VOCAB and spec["pre"] == "qwen2" and spec["model"] == "gpt2"
    # The real ids: 151643 regular tokens, then the added ones in Qwen's order.
    assert tokens[151643:151646] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert tokens[151657:151659] == ["<tool_call>", "</tool_call>"] and types[151657:151659] == [4, 4]
    assert tokens[151662:151665] == ["<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"] and types[151664] == 3
    n_added = 26 if style == "qwen3" else 22
    if style == "qwen3":
        assert tokens[151665:151669] == ["<tool_response>", "</tool_response>", "<think>", "</think>"]
        assert types[151665:151669] == [4, 4, 4, 4]
    assert tokens[151643 + n_added] == f"[PAD{151643 + n_added}]" and set(types[151643 + n_added:]) == {5}
    assert set(types[:151643]) == {1} and len(spec["merges"]) == 151643 - 256
    assert "12" in tokens  # digit pairs exist, as in Qwen's vocabulary, but the split never forms them
    vocab = set(tokens)
    assert len(vocab) == QWEN_VOCAB
    for merge in spec["merges"]:
        left, right = merge.split(" ")
        assert left in vocab and right in vocab and left + right in vocab
    assert hf.get_vocab_size(with_added_tokens=True) == QWEN_VOCAB
    info = tool.request(op="info")
    assert info["rules"] == "qwen2" and info["warnings"] == []
    assert (info["bos"], info["eos"], info["add_bos"], info["add_eos"]) == (151643, 151645, False, False)
    assert info["eot"] == 151645  # inferred from <|im_end|>, as llama.cpp does
    # <|endoftext|>, <|im_end|> and the fill-in-the-middle stops <|fim_pad|>, <|repo_name|>, <|file_sep|>
    assert info["eog"] == [151643, 151645, 151662, 151663, 151664]


@pytest.mark.parametrize("name", TEXT_NAMES + ["qwen_special"])
def test_qwen_encode(qwen, name):
    _, tool, hf, _ = qwen
    text = QWEN_SPECIAL_TEXT if name == "qwen_special" else FIXED_TEXTS[name]
    for parse_special in (False, True):
        ids = tool.encode(text, parse_special=parse_special)
        assert ids == hf_encode(hf, text, parse_special=parse_special)
        assert tool.encode(text, add_special=True, parse_special=parse_special) == ids  # no BOS added


def test_qwen_special_tokens(qwen):
    style, tool, _, _ = qwen
    ids = tool.encode(QWEN_SPECIAL_TEXT, parse_special=True)
    assert ids[0] == 151644 and ids.count(151645) == 2 and 151643 in ids and 151661 in ids
    plain = tool.encode(QWEN_SPECIAL_TEXT, parse_special=False)
    # user-defined tokens stay whole even in plain text; control tokens are spelled out
    assert plain.count(151657) == 1 and plain.count(151658) == 1 and not {151643, 151644, 151645} & set(plain)
    assert (151667 in plain) == (style == "qwen3")
    assert tool.request(op="decode", ids=plain)["text"] == QWEN_SPECIAL_TEXT
    assert tool.request(op="decode", ids=ids, skip_special=False)["text"] == QWEN_SPECIAL_TEXT


def test_qwen_digits_split_one_by_one(qwen):
    _, tool, _, spec = qwen
    ids = tool.encode("In 2024, 1234567 people")
    digits = [spec["tokens"][i] for i in ids if spec["tokens"][i].strip("Ġ").isdigit()]
    assert digits == list("20241234567")


def test_qwen_random_texts_and_round_trip(qwen):
    _, tool, hf, _ = qwen
    for text in random_texts(fresh_rng(), 1500):
        ids = tool.encode(text)
        assert ids == hf_encode(hf, text, parse_special=False), repr(text)
        assert tool.request(op="decode", ids=ids)["text"] == text


@pytest.mark.parametrize("name", sorted(LONG_RUNS))
def test_qwen_long_runs(qwen, name):
    _, tool, hf, _ = qwen
    text = LONG_RUNS[name]
    assert tool.request(op="time_encode", text=text)["seconds"] < 1.0
    assert tool.encode(text) == hf_encode(hf, text, parse_special=False)


# ---------------------------------------------------------------------------
# Gemma 3 (synthetic SentencePiece vocabulary: byte fallback, no dummy prefix)

GEMMA_VOCAB = 262144
GEMMA_SPECIAL_TEXT = "<start_of_turn>user\nHi  there<end_of_turn>\n<start_of_turn>model\n\n\nok<eos><unused7>"
MAX_SPACE_RUN = 31  # Gemma's longest user-defined run of spaces


def hf_gemma_comparable(text):
    """transformers respells Gemma's space-run tokens as "\u2581" pieces merged by BPE rather than
    matched whole, which differs from llama.cpp and sentencepiece only beyond the longest run."""
    return " " * (MAX_SPACE_RUN + 1) not in text


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    path, spec = synthetic_fixture(tmp_path_factory, "gemma3", GEMMA_VOCAB, architecture="gemma3")
    sp = gemma_sentencepiece_processor(spec)
    hf = hf_backend_from_gguf(path)
    tool = TokenizeTool(path)
    yield tool, sp, hf, spec
    tool.close()


def test_gemma3_vocab_shape(gemma3):
    tool, sp, _, spec = gemma3
    tokens, types, scores = spec["tokens"], spec["token_types"], spec["scores"]
    assert len(tokens) == GEMMA_VOCAB == sp.get_piece_size() and spec["model"] == "llama"
    assert tokens[:4] == ["<pad>", "<eos>", "<bos>", "<unk>"] and types[:4] == [3, 3, 3, 2]
    assert tokens[105:108] == ["<start_of_turn>", "<end_of_turn>", "\n"] and types[105:108] == [3, 3, 4]
    assert "  " in tokens and types[tokens.index("  ")] == 4 and "\u2581\u2581" not in tokens
    first_byte = tokens.index("<0x00>")
    assert tokens[first_byte:first_byte + 256] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[first_byte:first_byte + 256]) == {6}
    normal = [i for i, t in enumerate(types) if t == 1]
    assert normal == list(range(first_byte + 256, GEMMA_VOCAB))
    assert all(scores[a] > scores[b] for a, b in zip(normal, normal[1:]))  # merge order = score order
    assert "\u2581the" in tokens and not any("\u2581" in t[1:] for t in tokens)
    info = tool.request(op="info")
    assert (info["bos"], info["eos"], info["unk"]) == (2, 1, 3)
    assert info["add_bos"] and not info["add_eos"] and not info["add_space_prefix"]
    assert info["eot"] == 106 and info["eog"] == [1, 106]  # <end_of_turn> ends generation, as in llama.cpp


@pytest.mark.parametrize("name", TEXT_NAMES + ["gemma_special"])
def test_gemma3_encode(gemma3, name):
    tool, sp, hf, _ = gemma3
    text = GEMMA_SPECIAL_TEXT if name == "gemma_special" else FIXED_TEXTS[name]
    ids = tool.encode(text)
    assert ids == sp.encode(text)
    assert tool.encode(text, add_special=True) == [2] + ids
    assert ids == hf_encode(hf, text, parse_special=False)
    assert tool.encode(text, parse_special=True) == hf_encode(hf, text, parse_special=True)


def test_gemma3_no_dummy_prefix_and_user_defined_runs(gemma3):
    tool, _, _, spec = gemma3
    tokens = spec["tokens"]
    ids = tool.encode("Hello world")
    assert not tokens[ids[0]].startswith("\u2581") and tokens[ids[-1]].startswith("\u2581")
    ids = tool.encode("a \n\n\t\t   b")
    assert [tokens[i] for i in ids] == ["a", "\u2581", "\n\n", "\t\t", "   ", "b"]


def test_gemma3_special_tokens(gemma3):
    tool, _, _, _ = gemma3
    ids = tool.encode(GEMMA_SPECIAL_TEXT, parse_special=True)
    assert ids.count(105) == 2 and ids.count(106) == 1 and 1 in ids
    plain = tool.encode(GEMMA_SPECIAL_TEXT)
    assert not {1, 105, 106} & set(plain)
    assert tool.request(op="decode", ids=plain)["text"] == GEMMA_SPECIAL_TEXT
    assert tool.request(op="decode", ids=ids, skip_special=False)["text"] == GEMMA_SPECIAL_TEXT


def test_gemma3_random_texts(gemma3):
    tool, sp, hf, _ = gemma3
    for text in random_texts(fresh_rng(), 1500):
        ids = tool.encode(text)
        assert ids == sp.encode(text), repr(text)
        assert ids == hf_encode(hf, text, parse_special=False), repr(text)
        assert tool.request(op="decode", ids=ids)["text"] == text


@pytest.mark.parametrize("name", TEXT_NAMES)
def test_gemma3_decode(gemma3, name):
    tool, sp, hf, _ = gemma3
    text = FIXED_TEXTS[name]
    ids = tool.encode(text, add_special=True)
    decoded = tool.request(op="decode", ids=ids)["text"]
    assert decoded == text == sp.decode(ids) == hf.decode(ids, skip_special_tokens=True)
    check_stream(tool, ids, text)


def test_gemma3_100kb_speed_and_match(gemma3):
    tool, sp, _, _ = gemma3
    text = long_text(100 * 1024)
    reply = tool.request(op="time_encode", text=text, repeat=3)
    print(f"gemma3 synthetic: {len(text.encode())} bytes -> {reply['n_tokens']} tokens in {reply['seconds']:.4f} s")
    assert reply["seconds"] < 1.0
    assert tool.encode(text) == sp.encode(text)


@pytest.mark.parametrize("name", sorted(LONG_RUNS))
def test_gemma3_long_runs(gemma3, name):
    tool, sp, hf, _ = gemma3
    text = LONG_RUNS[name]
    assert tool.request(op="time_encode", text=text)["seconds"] < 1.0
    ids = tool.encode(text)
    assert ids == sp.encode(text)
    if hf_gemma_comparable(text):
        assert ids == hf_encode(hf, text, parse_special=False)
