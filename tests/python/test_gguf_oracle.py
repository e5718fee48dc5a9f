"""GGUF reader/writer against the reference implementation (PyPI gguf).

Files written by gguf-py must read back with identical values through our
reader and copy byte-for-byte through our writer; files our writer produced are
read by gguf-py with the same values.
"""
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import gguf

BUILD = Path(os.environ.get("NT_BUILD_DIR", "build"))
TOOL = BUILD / "tests" / "gguf_tool"
MODELS = Path(os.environ.get("NT_MODELS_DIR", "models"))


def run_tool(*args):
    return subprocess.run([str(TOOL), *map(str, args)], check=True, capture_output=True, text=True).stdout


def write_reference_file(path, alignment=None, seed=0):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 255)
    w.add_int8("t.i8", -128)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 4294967295)
    w.add_int32("t.i32", -2147483648)
    w.add_uint64("t.u64", 18446744073709551615)
    w.add_int64("t.i64", -9223372036854775808)
    w.add_float32("t.f32", 0.1)
    w.add_float64("t.f64", 0.1)
    w.add_bool("t.bool", False)
    w.add_string("t.str", "héllo ✓")
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["a", "", "ü"])
    w.add_tensor("w.f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("w.f16", rng.standard_normal((2, 7)).astype(np.float16))
    q = gguf.quants.quantize(rng.standard_normal((4, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("w.q8", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    # A 3-D stack of MXFP4 matrices, as gpt-oss stores its experts (17-byte blocks: sizes not a multiple of 4).
    experts = gguf.quants.quantize(rng.standard_normal((3, 2, 64)).astype(np.float32), gguf.GGMLQuantizationType.MXFP4)
    w.add_tensor("w.mxfp4", experts, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64, 4096])
def test_reference_file_copies_byte_exact(tmp_path, alignment):
    src, dst = tmp_path / "ref.gguf", tmp_path / "copy.gguf"
    write_reference_file(src, alignment)
    run_tool("copy", src, dst)
    assert src.read_bytes() == dst.read_bytes()


def test_values_match_reference_reader(tmp_path):
    src = tmp_path / "ref.gguf"
    write_reference_file(src)
    ours = json.loads(run_tool("dump", src))
    reader = gguf.GGUFReader(str(src))
    for field in reader.fields.values():
        if field.name.startswith("GGUF."):
            continue
        mine = ours["metadata"][field.name]
        assert mine["type"] == int(field.types[0])
        expected = field.contents()
        if isinstance(expected, float):
            if field.types[0] == gguf.GGUFValueType.FLOAT32:
                expected = float(np.float32(expected))
            assert mine["value"] == pytest.approx(expected, rel=0, abs=0)
        else:
            assert mine["value"] == expected, field.name
    tensors = {t["name"]: t for t in ours["tensors"]}
    for t in reader.tensors:
        mine = tensors[t.name]
        assert mine["type"] == int(t.tensor_type)
        assert mine["shape"] == [int(d) for d in t.shape]
        assert mine["offset"] == int(t.data_offset)
        assert mine["bytes"] == int(t.n_bytes)


def test_our_files_read_by_reference(tmp_path):
    src, dst = tmp_path / "ref.gguf", tmp_path / "ours.gguf"
    write_reference_file(src, seed=3)
    run_tool("copy", src, dst)
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dst))
    assert [f.name for f in a.fields.values()] == [f.name for f in b.fields.values()]
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.name == tb.name and np.array_equal(ta.data, tb.data)


def test_real_model_copies_byte_exact(tmp_path):
    model = MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not model.exists():
        pytest.skip(f"{model} not fetched (scripts/fetch_default_model.sh)")
    dst = tmp_path / "copy.gguf"
    run_tool("copy", model, dst)
    assert model.read_bytes() == dst.read_bytes()
