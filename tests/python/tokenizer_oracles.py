"""Shared helpers for the tokenizer tests: a client for tests/tools/tokenize_tool, GGUF
writers for test vocabularies, and the independent reference tokenizers.

References:
- Hugging Face `tokenizers`, built by transformers' own GGUF converter
  (`convert_gguf_tokenizer`, the code `AutoTokenizer.from_pretrained(..., gguf_file=...)`
  runs). transformers 5.x imports torch at the top of its GGUF *file reader* only, so when
  torch is missing we read the same metadata with the `gguf` package and call the converter
  directly; the tokenizer that comes out is the same object.
- The `sentencepiece` library itself for SentencePiece vocabularies, fed a ModelProto we
  serialize by hand (the protobuf runtime is not installed).
"""

import json
import mmap
import os
import struct
import subprocess
from pathlib import Path

import pytest

import gguf
import numpy as np
from tokenizers import Regex, pre_tokenizers

from project_paths import BUILD_DIR, MODELS_DIR, SHARED_MODELS
SMOLLM2_GGUF = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_tool(name="tokenize_tool"):
    for candidate in (BUILD_DIR / "tests" / name, BUILD_DIR / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{name} not built under {BUILD_DIR}")


class TokenizeTool:
    """One tokenize_tool process; each request is a JSON line, each reply a JSON line."""

    def __init__(self, *args):
        self.proc = subprocess.Popen(
            [str(find_tool()), *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )

    def request(self, **req):
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"tokenize_tool exited: {self.proc.stderr.read()}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def encode(self, text, add_special=False, parse_special=False):
        return self.request(op="encode", text=text, add_special=add_special, parse_special=parse_special)["ids"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


# ---------------------------------------------------------------------------
# GGUF metadata

_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _read_gguf_value(data, pos, value_type):
    if value_type in _SCALAR_FORMATS:
        fmt = _SCALAR_FORMATS[value_type]
        return struct.unpack_from(fmt, data, pos)[0], pos + struct.calcsize(fmt)
    if value_type == 8:  # string
        (length,) = struct.unpack_from("<Q", data, pos)
        return bytes(data[pos + 8 : pos + 8 + length]).decode("utf-8"), pos + 8 + length
    if value_type == 9:  # array
        element_type, count = struct.unpack_from("<IQ", data, pos)
        pos += 12
        if element_type in _SCALAR_FORMATS:
            fmt = _SCALAR_FORMATS[element_type]
            width = struct.calcsize(fmt)
            return list(np.frombuffer(data, fmt, count, pos).tolist()), pos + count * width
        items = []
        for _ in range(count):
            item, pos = _read_gguf_value(data, pos, element_type)
            items.append(item)
        return items, pos
    raise ValueError(f"unknown GGUF value type {value_type}")


def read_tokenizer_metadata(path):
    """(architecture, {key: value}) for the general.architecture and tokenizer.* keys.
    A small reader of the GGUF v3 metadata layout: gguf.GGUFReader takes ~20 s on a
    128K-token vocabulary because it indexes every array element."""
    with open(path, "rb") as f:
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    magic, version, _n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF" and version in (2, 3), f"{path}: not a GGUF v2/v3 file"
    pos, meta = 24, {}
    for _ in range(n_kv):
        key, pos = _read_gguf_value(data, pos, 8)
        (value_type,) = struct.unpack_from("<I", data, pos)
        value, pos = _read_gguf_value(data, pos + 4, value_type)
        if key.startswith("tokenizer.") or key == "general.architecture":
            meta[key] = value
    return meta["general.architecture"], meta


def write_vocab_gguf(path, spec, architecture="llama"):
    """Writes a metadata-only GGUF from a tokenize_tool `spec` reply (or the same keys)."""
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_tokenizer_model(spec["model"])
    if spec.get("pre"):
        w.add_tokenizer_pre(spec["pre"])
    w.add_token_list(spec["tokens"])
    if spec.get("scores"):
        w.add_token_scores(spec["scores"])
    if spec.get("token_types"):
        w.add_token_types(spec["token_types"])
    if spec.get("merges"):
        w.add_token_merges(spec["merges"])
    for key, adder in (
        ("bos_id", w.add_bos_token_id),
        ("eos_id", w.add_eos_token_id),
        ("eot_id", w.add_eot_token_id),
        ("eom_id", w.add_eom_token_id),
        ("pad_id", w.add_pad_token_id),
        ("unk_id", w.add_unk_token_id),
        ("add_bos", w.add_add_bos_token),
        ("add_eos", w.add_add_eos_token),
        ("add_space_prefix", w.add_add_space_prefix),
    ):
        if spec.get(key) is not None:
            adder(spec[key])
    if spec.get("chat_template"):
        w.add_chat_template(spec["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------
# Hugging Face reference

def hf_backend_from_gguf(path):
    """The `tokenizers.Tokenizer` transformers builds for this GGUF's vocabulary."""
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(Path(path).parent), gguf_file=Path(path).name).backend_tokenizer
    except ImportError:
        pass  # no torch: same converter, metadata read with the gguf package
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    architecture, meta = read_tokenizer_metadata(path)
    tokenizer_dict = {
        name: meta[f"tokenizer.{key}"]
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if f"tokenizer.{key}" in meta
    }
    backend, _ = convert_gguf_tokenizer(architecture, tokenizer_dict)
    return backend


def smollm_pre_tokenizer():
    """SmolLM2's tokenizer.json pre-tokenizer: each digit alone, then GPT-2's byte-level split.
    transformers' GGUF converter knows no "smollm" split and would use GPT-2's alone, which
    differs on runs of spaces before a digit ("  1" -> "ĠĠ","1" vs "Ġ","Ġ","1")."""
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )


# Qwen2's split, as its tokenizer.json writes it (Qwen2, Qwen2.5 and Qwen3 share it): Llama 3's,
# but each digit on its own.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def split_pre_tokenizer(pattern):
    """The regex split alone (HF `Split(..., behavior="isolated")`), giving the raw pieces."""
    return pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)


def qwen2_pre_tokenizer():
    """Qwen2's tokenizer.json pre-tokenizer: its split, then the byte-level mapping without a regex."""
    return pre_tokenizers.Sequence(
        [
            split_pre_tokenizer(QWEN2_SPLIT),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )


def hf_encode(backend, text, parse_special=True):
    backend.encode_special_tokens = not parse_special
    return backend.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------------
# SentencePiece vocabularies (llama2.c's tok512) and the sentencepiece reference

SPM_NORMAL, SPM_UNKNOWN, SPM_CONTROL, SPM_BYTE = 1, 2, 3, 6


def read_llama2c_tokenizer(path):
    """(pieces, scores, types) with llama2.c's edits undone: "▁" for spaces, plain <s>/</s>."""
    data = Path(path).read_bytes()
    pos = 4  # int32 max_token_length
    pieces, scores = [], []
    while pos < len(data):
        score, length = struct.unpack_from("<fi", data, pos)
        pos += 8
        pieces.append(data[pos : pos + length].decode("utf-8"))
        scores.append(score)
        pos += length
    pieces = [p.strip("\n") if p in ("\n<s>\n", "\n</s>\n") else p.replace(" ", "\u2581") for p in pieces]
    types = []
    for i, p in enumerate(pieces):
        if i == 0:
            types.append(SPM_UNKNOWN)
        elif p in ("<s>", "</s>"):
            types.append(SPM_CONTROL)
        elif len(p) == 6 and p.startswith("<0x") and p.endswith(">"):
            types.append(SPM_BYTE)
        else:
            types.append(SPM_NORMAL)
    return pieces, scores, types


def tok512_spec():
    """llama2.c's tok512 vocabulary; skips the calling test when the shared models are absent."""
    path = SHARED_MODELS / "tok512.bin"
    if not path.exists():
        pytest.skip(f"tok512.bin is absent from {SHARED_MODELS}")
    pieces, scores, types = read_llama2c_tokenizer(path)
    return {
        "model": "llama",
        "tokens": pieces,
        "scores": scores,
        "token_types": types,
        "unk_id": 0,
        "bos_id": 1,
        "eos_id": 2,
        "add_bos": True,
        "add_eos": False,
    }


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, wire_type, payload):
    key = _varint((number << 3) | wire_type)
    if wire_type == 0:
        return key + _varint(payload)
    if wire_type == 5:
        return key + struct.pack("<f", payload)
    return key + _varint(len(payload)) + payload  # wire type 2: bytes / message


def sentencepiece_model_proto(pieces, scores, types, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, add_dummy_prefix=True):
    """A serialized sentencepiece ModelProto for a BPE model with byte fallback, identity
    normalization, the dummy-prefix space (unless add_dummy_prefix is false), and spaces kept
    as they are (no collapsing)."""
    body = b""
    for piece, score, kind in zip(pieces, scores, types):
        sp = _field(1, 2, piece.encode("utf-8")) + _field(2, 5, float(score)) + _field(3, 0, int(kind))
        body += _field(1, 2, sp)
    trainer = (
        _field(3, 0, 2)  # model_type = BPE
        + _field(4, 0, len(pieces))  # vocab_size
        + _field(35, 0, 1)  # byte_fallback
        + _field(40, 0, unk_id)
        + _field(41, 0, bos_id)
        + _field(42, 0, eos_id)
        + _field(43, 0, pad_id)
    )
    normalizer = (
        _field(1, 2, b"identity")
        + _field(3, 0, int(add_dummy_prefix))
        + _field(4, 0, 0)  # remove_extra_whitespaces = false
        + _field(5, 0, 1)  # escape_whitespaces
    )
    return body + _field(2, 2, trainer) + _field(3, 2, normalizer)


def sentencepiece_processor(pieces, scores, types, **options):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=sentencepiece_model_proto(pieces, scores, types, **options))


SPM_USER_DEFINED = 4


def gemma_sentencepiece_processor(spec):
    """The sentencepiece model a Gemma-style GGUF vocabulary stands for: Gemma's special ids, no
    dummy prefix, and user-defined runs of spaces spelled with "\u2581" as sentencepiece stores
    them (llama.cpp's converter writes real spaces into the GGUF)."""
    pieces = [
        t.replace(" ", "\u2581") if kind == SPM_USER_DEFINED else t
        for t, kind in zip(spec["tokens"], spec["token_types"])
    ]
    return sentencepiece_processor(
        pieces, spec["scores"], spec["token_types"], unk_id=spec["unk_id"], bos_id=spec["bos_id"],
        eos_id=spec["eos_id"], pad_id=spec["pad_id"], add_dummy_prefix=spec["add_space_prefix"],
    )


# ---------------------------------------------------------------------------
# Test texts

FIXED_TEXTS = {
    "ascii": "Hello world! The quick brown fox jumps over the lazy dog.",
    "accents": "Café naïve résumé façade coöperate Ångström São Paulo",
    "cjk": "你好，世界！这是一个测试。日本語のテキストとカタカナ。한국어 텍스트",
    "arabic": "مرحبا بالعالم، هذا اختبار.",
    "cyrillic_greek": "Привет, мир! Καλημέρα κόσμε",
    "emoji": "I ❤️ emoji 😀🎉👍🏽 and more 🙂",
    "emoji_zwj": "👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 👩🏽‍💻 coder",
    "code_python": "def f(x):\n    if x > 0:\n        return x ** 2  # square\n    return -x\n",
    "code_cpp": "int main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) x *= 2;\n\treturn 0;\n}\n",
    "json": '{"key": [1, 2.5, null], "nested": {"a": "b\\n"}}',
    "spaces": "a  b   c    d     e",
    "tabs_mixed": "\t\ttabs\tand\tspaces  \t mixed \t",
    "newlines": "line1\nline2\n\nline4\r\nwindows\n\n\n",
    "leading_trailing": "   leading and trailing   ",
    "whitespace_only": " \n\t  \n ",
    "single_space": " ",
    "digits": "12345678901234",
    "numbers": "3.14159 and 2,718,281 or x=42; y=-7; 1e10 (100%)",
    "space_digits": "a  1 b   22 c\t3",
    "contractions": "I'm you'll we've they'd it's I'M YOU'LL Don't SHE'S",
    "punctuation": "Wait... what?! (Really) [yes] {no} <maybe> -- ok; fine: done.",
    "special_lookalike": "<|im_start|> <|im_end|> <|endoftext|> <s> </s>",
    "paragraph": (
        "Once upon a time, in a small village nestled between rolling hills, there lived a curious girl "
        "named Lily. Every morning she would wander to the river, counting the stones (1, 2, 3...) and "
        "humming songs her grandmother taught her. \"Why does the water never stop?\" she asked one day.\n\n"
        "Her grandmother smiled: \"Because it's always going somewhere, just like you.\" "
        "Lily laughed — she didn't quite understand, but she'd remember it for 25 years."
    ),
}


def random_texts(rng, count, max_len=60):
    """Fresh random strings over a pool that stresses the splitting rules."""
    pool = list(
        "abcXYZ019 '\"\t\n\r.,!?-_()[]{}<>|/\\@#$%^&*+=~`"
    ) + ["  ", "\n\n", "'s", "'LL", "é", "ß", "Ω", "ж", "你", "好", "の", "ا", "😀", "👍🏽", "‍", "\u00a0", "\u2003", "٣", "½"]
    out = []
    for _ in range(count):
        n = int(rng.integers(1, max_len))
        out.append("".join(pool[int(i)] for i in rng.integers(0, len(pool), n)))
    return out


def fresh_rng():
    seed = int.from_bytes(os.urandom(4), "little")
    print(f"random seed {seed}")
    return np.random.default_rng(seed)
