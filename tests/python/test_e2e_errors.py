"""Bad inputs to the `ntransformer` commands end with exit code 1 and one
error line that names the file, tensor, option or value at fault (no crash,
no stack trace)."""

import os
import subprocess

import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from project_paths import NTRANSFORMER, SHARED_MODELS, convert_stories260k, require_built


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A valid small model (random weights) to corrupt."""
    require_built(NTRANSFORMER)
    path = tmp_path_factory.mktemp("errors") / "tiny.gguf"
    subprocess.run([str(NTRANSFORMER), "make-model", "--preset", "tiny", "--type", "q4_k", "--out", str(path)],
                   check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    """stories260K: a model whose tokenizer has no chat template."""
    return convert_stories260k(tmp_path_factory.mktemp("errors"))


def fails(*args, code=1):
    """Runs ntransformer, expects failure with `code`; returns stderr."""
    result = subprocess.run([str(NTRANSFORMER), *map(str, args)], capture_output=True, text=True, timeout=60)
    assert result.returncode == code, f"exit {result.returncode}, stderr: {result.stderr}"
    for crash in ("terminate called", "Segmentation", "Aborted", "what():"):
        assert crash not in result.stderr
    return result.stderr


def run_model(model, *extra):
    return fails("run", "-m", model, "-p", "Hello", "-n", "2", "--temp", "0", *extra)


def copy_gguf(src, dst, drop_tensor=None, architecture="llama", overrides=None):
    """Rewrites a GGUF file through gguf-py, optionally dropping a tensor or changing metadata."""
    reader = GGUFReader(src)
    writer = GGUFWriter(dst, arch=architecture)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # the writer adds these
        value = (overrides or {}).get(key, field.contents())
        sub_type = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, field.types[0], sub_type)
    for t in reader.tensors:
        if t.name != drop_tensor:
            writer.add_tensor(t.name, t.data, raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def test_missing_model_file(tmp_path):
    missing = tmp_path / "no-such-model.gguf"
    assert str(missing) in run_model(missing)


def test_truncated_model(tiny, tmp_path):
    data = tiny.read_bytes()
    # Cut inside the tensor data: the message names a tensor that no longer fits.
    cut = tmp_path / "truncated-data.gguf"
    cut.write_bytes(data[:len(data) // 2])
    cut_off = {t.name for t in GGUFReader(tiny).tensors if t.data_offset + t.n_bytes > len(data) // 2}
    message = run_model(cut)
    assert cut.name in message and "truncated" in message
    assert any(f"'{name}'" in message for name in cut_off), message
    # Cut inside the header.
    cut = tmp_path / "truncated-header.gguf"
    cut.write_bytes(data[:100])
    assert cut.name in run_model(cut)


def test_garbage_and_empty_files(tmp_path):
    cases = {"garbage.gguf": os.urandom(4096), "magic-then-garbage.gguf": b"GGUF" + os.urandom(4096),
             "empty.gguf": b""}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        message = run_model(tmp_path / name)
        assert name in message, message


def test_missing_tensor(tiny, tmp_path):
    broken = copy_gguf(tiny, tmp_path / "no-ffn-down.gguf", drop_tensor="blk.2.ffn_down.weight")
    message = run_model(broken)
    assert broken.name in message and "blk.2.ffn_down.weight" in message


def test_unsupported_architecture(tiny, tmp_path):
    other = copy_gguf(tiny, tmp_path / "gpt2.gguf", architecture="gpt2")
    message = run_model(other)
    assert other.name in message and "gpt2" in message


def test_inconsistent_hyperparameters(tiny, tmp_path):
    broken = copy_gguf(tiny, tmp_path / "seven-heads.gguf", overrides={"llama.attention.head_count": 7})
    message = run_model(broken)
    assert broken.name in message and "head_count" in message


def test_prompt_longer_than_the_context(stories):
    prompt = "Once upon a time there was a little girl who loved to play outside in the park with her friends"
    message = fails("run", "-m", stories, "-c", "16", "-p", prompt, "-n", "4", "--temp", "0")
    assert "context" in message and "16" in message


def test_a_context_past_the_trained_one_runs_with_a_warning(stories):
    """As llama.cpp allows it: the run goes on, but says that the positions
    past the trained context (the file's llama.context_length) are untrained."""
    trained = int(GGUFReader(stories).fields["llama.context_length"].contents())
    for context, warned in ((trained, False), (2 * trained, True)):
        result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(stories), "-c", str(context), "-p", "Once", "-n", "2",
                                 "--temp", "0"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        warning = f"warning: a context of {context} is past the {trained} tokens the model was trained on"
        assert (warning in result.stderr) == warned, result.stderr


def test_unknown_chat_template(stories):
    message = run_model(stories, "--chat-template", "nope")
    assert "chat template" in message and "'nope'" in message


def test_unknown_quantization_type(tiny, tmp_path):
    message = fails("quantize", tiny, tmp_path / "out.gguf", "--type", "q9_z")
    assert "--type" in message and "'q9_z'" in message and "Q4_K_M" in message  # lists the valid names
    assert not (tmp_path / "out.gguf").exists()


def test_unknown_type_and_preset_for_make_model(tmp_path):
    message = fails("make-model", "--preset", "huge", "--out", tmp_path / "x.gguf")
    assert "--preset" in message and "'huge'" in message
    message = fails("make-model", "--preset", "tiny", "--type", "nope", "--out", tmp_path / "x.gguf")
    assert "--type" in message and "'nope'" in message


def test_missing_input_of_quantize_and_convert(tmp_path):
    # CLI11 validates these paths before the command runs; usage errors exit 1
    # like every other error, and the message names the file.
    missing = tmp_path / "absent.gguf"
    assert str(missing) in fails("quantize", missing, tmp_path / "out.gguf", "--type", "q8_0")
    assert str(missing) in fails("convert-llama2c", missing, missing, tmp_path / "out.gguf")


def test_corrupt_llama2c_checkpoint(tmp_path):
    tokenizer = SHARED_MODELS / "tok512.bin"
    if not tokenizer.exists() or not NTRANSFORMER.exists():
        pytest.skip("tok512.bin or ntransformer is missing")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(os.urandom(4096))
    message = fails("convert-llama2c", garbage, tokenizer, tmp_path / "out.gguf")
    assert garbage.name in message


@pytest.mark.parametrize("extra, message", [
    (["--split", "layer"], "--split needs --gpus"),
    (["--gpus", "0,x"], "--gpus '0,x': 'x' is not a GPU index"),
    (["--gpus", "0,1", "--vram-budget", "1GiB,2GiB,3GiB"], "3 values for 2 GPUs"),
    (["--gpus", "0,1", "--split", "rows"], "--split 'rows'"),
    (["--gpus", "0,1", "--cpu-layers", "2"], "the CPU computes no layers of a run over several GPUs"),
    (["--gpus", "0,1", "--device", "cpu"], "--gpus"),
    (["--gpus", "0,0"], "GPU 0"),  # no GPU visible: named as absent (or this build has none)
])
def test_gpu_flags_name_the_flag_or_the_gpu(tiny, extra, message):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(tiny), "-p", "Hello", "-n", "2", *extra],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 1, result.stderr
    assert "what():" not in result.stderr and "terminate called" not in result.stderr
    assert message in result.stderr or "no CUDA backend" in result.stderr, result.stderr
