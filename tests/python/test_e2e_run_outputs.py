"""`run`'s outputs for comparisons with other engines, on stories260K against
independent references: the prompt ids against the `sentencepiece` library,
the generated ids, logits and teacher-forcing scores against the float64
reference forward pass (tests/reference/llama_ref.py). With F32 weights and an
F32 KV cache the engine's logits are the reference's to float32 rounding."""

import json
import os
import re
import subprocess
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from project_paths import NTRANSFORMER, REFERENCE_DIR, SHARED_MODELS, convert_stories260k  # noqa: E402
from test_e2e_stories import golden  # noqa: E402
from tokenizer_oracles import read_llama2c_tokenizer, sentencepiece_processor  # noqa: E402

sys.path.insert(0, str(REFERENCE_DIR))
import llama_ref  # noqa: E402

BOS = 1
PROMPT = "The little dog"
N_GEN = 12
TIGHT_REL = 1e-5  # relative L2 error of a row of logits (test_e2e_stories measures <= 4e-7)
MARGIN_ABS = 1e-3  # logits of size ~10, float32 rounding


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("outputs"))


@pytest.fixture(scope="module")
def reference(stories):
    return llama_ref.Model(str(stories))


@pytest.fixture(scope="module")
def prompt_ids():
    sp = sentencepiece_processor(*read_llama2c_tokenizer(SHARED_MODELS / "tok512.bin"))
    return [BOS] + sp.encode(PROMPT)


def run(stories, *args, check=True):
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(stories), "--raw", "--temp", "0", "--kv-f32",
                             *map(str, args)], capture_output=True, text=True, check=False)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def read_logits(path):
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        rows = np.fromfile(f, dtype="<f4")
    assert header["dtype"] == "float32"
    return header, rows.reshape(header["shape"]).astype(np.float64)


def rel_error(actual, expected):
    return np.linalg.norm(actual - expected, axis=-1) / np.linalg.norm(expected, axis=-1)


def test_ids_to_stderr_and_to_a_file(stories, reference, prompt_ids, tmp_path):
    out = tmp_path / "ids.json"
    result = run(stories, "-p", PROMPT, "-n", N_GEN, "--show-ids", "--ids-out", out)
    _, expected = llama_ref.generate(reference, prompt_ids, N_GEN)
    lines = dict(re.findall(r"^(prompt|generated) ids: (\[.*\])$", result.stderr, re.M))
    assert json.loads(lines["prompt"]) == prompt_ids
    assert json.loads(lines["generated"]) == expected
    assert json.loads(out.read_text()) == {"prompt": prompt_ids, "generated": expected}


@pytest.mark.parametrize("all_logits", [False, True])
def test_logits_of_the_prompt(stories, reference, prompt_ids, tmp_path, all_logits):
    out = tmp_path / "logits.f32"
    run(stories, "-p", PROMPT, "-n", 0, "--logits-out", out, *(["--all-logits"] if all_logits else []))
    header, rows = read_logits(out)
    expected = llama_ref.generate(reference, prompt_ids, 0)[0]
    if not all_logits:
        expected = expected[-1:]
    assert header["shape"] == list(expected.shape)
    assert header["first_position"] == len(prompt_ids) - len(expected)
    assert rel_error(rows, expected).max() <= TIGHT_REL


def forced_table(stdout):
    lines = stdout.splitlines()
    assert lines[0].split("\t") == ["position", "reference", "top", "margin", "gap", "reference_piece", "top_piece"]
    return [line.split("\t") for line in lines[1:]]


def test_teacher_forcing_scores_each_position_as_the_reference_does(stories, reference, tmp_path):
    """Along llama2.c's greedy path, then along the same path with a few tokens replaced (so
    that our top differs from the forced token there, and the context after it changes)."""
    golden_ids, _ = golden()
    forced = list(golden_ids[:32])
    for i in (5, 13, 20):
        forced[i] = (forced[i] + 100) % 512
    agreement = {}
    for name, ids in (("golden", golden_ids[:32]), ("forced", forced)):
        listing = tmp_path / "ids.txt"
        listing.write_text(f"[{', '.join(map(str, ids))}]\n")  # as `tokenize --ids` prints them
        result = run(stories, "-p", "", "--teacher-ids", listing, "--logits-out", tmp_path / "l.f32", "--all-logits")
        logits = llama_ref.generate(reference, [BOS] + ids, 0)[0]
        rows = forced_table(result.stdout)
        assert len(rows) == len(ids)
        for (pos, ref, top, margin, gap, ref_piece, _), expected_row, token in zip(rows, logits, ids):
            ordered = np.sort(expected_row)
            best = int(np.argmax(expected_row))
            assert (int(ref), int(top)) == (token, best), pos
            assert float(margin) == pytest.approx(ordered[-1] - ordered[-2], abs=MARGIN_ABS)
            assert float(gap) == pytest.approx(expected_row[best] - expected_row[token], abs=MARGIN_ABS)
            assert json.loads(ref_piece) == piece_text(token)
        agreement[name] = sum(row[1] == row[2] for row in rows)
        assert f"at {agreement[name]} of {len(ids)} positions" in result.stderr
        _, all_rows = read_logits(tmp_path / "l.f32")
        assert rel_error(all_rows, logits).max() <= TIGHT_REL
    assert agreement["golden"] == 32
    assert agreement["forced"] < 32  # the replaced tokens are not what the model picks there


def piece_text(token):
    """tok512's piece as text: "\u2581" as a space, <0xXX> as its byte."""
    piece = read_llama2c_tokenizer(SHARED_MODELS / "tok512.bin")[0][token]
    if re.fullmatch(r"<0x[0-9A-F]{2}>", piece):
        return chr(int(piece[3:5], 16))
    return piece.replace("\u2581", " ")


def test_bad_outputs_and_ids_name_the_flag(stories, tmp_path):
    def fails(*args):
        result = run(stories, "-p", "", *args, check=False)
        assert result.returncode == 1, result.stderr
        assert "terminate called" not in result.stderr
        return result.stderr

    message = fails("--teacher-ids", "403,x1,407")
    assert "--teacher-ids" in message and "'x1'" in message and "item 2" in message
    message = fails("--teacher-ids", "403,512")
    assert "--teacher-ids" in message and "512" in message and "vocabulary" in message
    bad = tmp_path / "ids.txt"
    bad.write_text("[403, 407")
    message = fails("--teacher-ids", bad)
    assert str(bad) in message and "[" in message
    message = fails("-c", 8, "--teacher-ids", ",".join(["403"] * 8))
    assert "--teacher-ids" in message and "context holds 8" in message
    assert "--logits-out" in fails("--all-logits")
    missing_dir = tmp_path / "no-such-dir"
    assert str(missing_dir / "l.f32") in fails("-n", 1, "--logits-out", missing_dir / "l.f32")
    assert str(missing_dir / "ids.json") in fails("-n", 1, "--ids-out", missing_dir / "ids.json")


def test_prompt_from_a_file(stories, prompt_ids, tmp_path):
    # -f takes the file's whole content as the prompt: the ids the tokenizer oracle gives the text.
    prompt_file = tmp_path / "prompt.txt"
    prompt_file.write_text(PROMPT)
    result = run(stories, "-f", prompt_file, "-n", 4, "--show-ids")
    assert re.search(r"prompt ids: \[([0-9, ]+)\]", result.stderr).group(1) == ", ".join(map(str, prompt_ids))
    assert result.stdout.startswith(PROMPT)
    both = run(stories, "-f", prompt_file, "-p", "x", "-n", 1, check=False)
    assert both.returncode != 0 and "--prompt" in both.stderr and "--file" in both.stderr
    missing = run(stories, "-f", tmp_path / "absent.txt", "-n", 1, check=False)
    assert missing.returncode != 0 and "absent.txt" in missing.stderr
