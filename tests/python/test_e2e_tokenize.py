"""`ntransformer tokenize` against the tokenizer oracles (tokenizer_oracles.py):
transformers' tokenizer for SmolLM2 (byte-level BPE), the `sentencepiece`
library for stories260K (llama2.c's tok512). Output as llama-tokenize's:
`%6d -> 'piece'` lines, or `[1, 2, 3]` with --ids."""

import re
import subprocess

import pytest

from project_paths import NTRANSFORMER, SHARED_MODELS, convert_stories260k, require_built
from tokenizer_oracles import (FIXED_TEXTS, SMOLLM2_GGUF, hf_backend_from_gguf, hf_encode, read_llama2c_tokenizer,
                               sentencepiece_processor, smollm_pre_tokenizer)

TEXTS = ["ascii", "accents", "emoji", "code_python", "newlines", "special_lookalike", "leading_trailing"]
LINE = re.compile(r"( {0,5}\d+) -> '(.*)'", re.S)


def tokenize(model, *args):
    # Bytes decoded by hand: text mode would turn a "\r" piece into "\n".
    result = subprocess.run([str(NTRANSFORMER), "tokenize", "-m", str(model), *map(str, args)], check=True,
                            capture_output=True)
    return result.stdout.decode()


def parse_pairs(out):
    """(id, piece) pairs; a piece may hold a newline, so lines are split at the next id."""
    entries = re.split(r"'\n(?= {0,5}\d+ -> ')", out.removesuffix("'\n") + "'")
    pairs = []
    for entry in entries:
        m = LINE.fullmatch(entry if entry.endswith("'") else entry + "'")
        assert m and len(m[1]) >= 6, repr(entry)
        pairs.append((int(m[1]), m[2]))
    return pairs


def gpt2_byte_decoder():
    """GPT-2's byte-level alphabet, symbol to byte (the published bytes_to_unicode table)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def printable(raw):
    """Bytes as the command prints them: valid UTF-8 as text, other bytes as \\xNN."""
    out, pos = "", 0
    while pos < len(raw):
        for length in (4, 3, 2, 1):
            try:
                out += raw[pos:pos + length].decode("utf-8")
                pos += length
                break
            except UnicodeDecodeError:
                continue
        else:
            out += f"\\x{raw[pos]:02x}"
            pos += 1
    return out


@pytest.fixture(scope="module")
def smollm2():
    if not SMOLLM2_GGUF.exists():
        pytest.skip(f"{SMOLLM2_GGUF} is absent (fetch it with scripts/fetch_default_model.sh)")
    require_built(NTRANSFORMER)
    hf = hf_backend_from_gguf(SMOLLM2_GGUF)
    hf.pre_tokenizer = smollm_pre_tokenizer()
    return hf


@pytest.mark.parametrize("name", TEXTS)
def test_bpe_ids_and_pieces_match_transformers(smollm2, name, tmp_path):
    text = FIXED_TEXTS[name] + " <|im_start|>user"
    expected = hf_encode(smollm2, text, parse_special=True)  # llama-tokenize parses specials by default
    assert tokenize(SMOLLM2_GGUF, "-p", text, "--ids") == f"[{', '.join(map(str, expected))}]\n"
    assert tokenize(SMOLLM2_GGUF, "-p", text, "--no-parse-special", "--ids") == \
        f"[{', '.join(map(str, hf_encode(smollm2, text, parse_special=False)))}]\n"
    pairs = parse_pairs(tokenize(SMOLLM2_GGUF, "-p", text))
    assert [i for i, _ in pairs] == expected
    decoder = gpt2_byte_decoder()
    specials = {t.content for t in smollm2.get_added_tokens_decoder().values()}
    for i, piece in pairs:
        token = smollm2.id_to_token(i)
        raw = token.encode() if token in specials else bytes(decoder[c] for c in token)
        assert piece == printable(raw), (i, token)
    path = tmp_path / "text.txt"
    path.write_bytes(text.encode())
    assert tokenize(SMOLLM2_GGUF, "-f", path, "--ids") == f"[{', '.join(map(str, expected))}]\n"


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    model = convert_stories260k(tmp_path_factory.mktemp("tokenize"))
    return model, sentencepiece_processor(*read_llama2c_tokenizer(SHARED_MODELS / "tok512.bin"))


@pytest.mark.parametrize("name", TEXTS)
def test_sentencepiece_ids_and_pieces_match_sentencepiece(stories, name):
    model, sp = stories
    text = FIXED_TEXTS[name]
    expected = sp.encode(text)  # sentencepiece reads "<s>" in a text as plain text
    ids = f"[{', '.join(map(str, [1] + expected))}]\n"  # the vocabulary adds BOS
    assert tokenize(model, "-p", text, "--ids", "--no-parse-special") == ids
    assert tokenize(model, "-p", text, "--ids", "--no-parse-special", "--no-bos") == \
        f"[{', '.join(map(str, expected))}]\n"
    pairs = parse_pairs(tokenize(model, "-p", text, "--no-parse-special"))
    assert [i for i, _ in pairs] == [1] + expected
    for i, piece in pairs:
        sp_piece = sp.id_to_piece(i)
        if sp.is_byte(i):
            raw = bytes([int(sp_piece[3:5], 16)])
        elif sp.is_control(i):
            raw = sp_piece.encode()
        else:
            raw = sp_piece.replace("\u2581", " ").encode()
        assert piece == printable(raw), (i, sp_piece)


def test_bad_input_names_what_is_wrong(stories, tmp_path):
    model, _ = stories

    def fails(*args):
        result = subprocess.run([str(NTRANSFORMER), "tokenize", "-m", str(model), *map(str, args)],
                                capture_output=True, text=True)
        assert result.returncode == 1 and result.stdout == ""
        return result.stderr

    assert "-p TEXT or -f FILE" in fails()
    assert "--prompt" in fails("-p", "a", "-f", model) and "--file" in fails("-p", "a", "-f", model)
    missing = tmp_path / "absent.txt"
    assert str(missing) in fails("-f", missing)
    assert str(tmp_path) in fails("-f", tmp_path) and "directory" in fails("-f", tmp_path)
