"""The C API and the Python binding against the CLI: greedy output through
libntransformer (nt_decode and a greedy chain, driven by ctypes), through
the Python package (requests over the engine facade) and through
examples/c/simple equals `ntransformer run --temp 0`, token for token, on
stories260K and SmolLM2. Also the binding's chat, streaming, state and
error paths.
"""

import json
import os
import subprocess
import sys

import pytest

from project_paths import BUILD_DIR, MODELS_DIR, NTRANSFORMER, SOURCE_DIR, convert_stories260k, make_model, require_built

LIBRARY = BUILD_DIR / "src" / "capi" / "libntransformer.so"
SIMPLE = BUILD_DIR / "examples" / "c" / "simple"
SMOLLM2 = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
N_GEN = 48

PROMPTS = {
    "stories": ["Once upon a time", "Lily wanted to play with the big red ball"],
    "smollm2": ["The capital of France is", "def fibonacci(n):"],
}


@pytest.fixture(scope="module")
def nt():
    require_built(LIBRARY, NTRANSFORMER)
    os.environ["NT_LIBRARY"] = str(LIBRARY)
    sys.path.insert(0, str(SOURCE_DIR / "python"))
    import ntransformer
    return ntransformer


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    found = {"stories": convert_stories260k(tmp_path_factory.mktemp("stories"))}
    if SMOLLM2.exists():
        found["smollm2"] = SMOLLM2
    return found


def model_prompt_pairs():
    return [(name, prompt) for name, prompts in PROMPTS.items() for prompt in prompts]


def run_cli(model, prompt, tmp_path, *flags):
    """`ntransformer run --temp 0` as the reference: (prompt ids, generated ids, continuation text)."""
    ids = tmp_path / "ids.json"
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(model), "--device", "cpu", "--raw", "--temp", "0",
                             "-n", str(N_GEN), "-p", prompt, "--ids-out", str(ids), *flags],
                            capture_output=True, text=True, timeout=600, check=True)
    assert result.stdout.startswith(prompt)
    recorded = json.loads(ids.read_text())
    return recorded["prompt"], recorded["generated"], result.stdout[len(prompt):]


def model_path(models, name):
    if name not in models:
        pytest.skip(f"{SMOLLM2} is absent")
    return models[name]


@pytest.mark.parametrize("name,prompt", model_prompt_pairs())
def test_greedy_through_the_c_api_is_run(nt, models, tmp_path, name, prompt):
    path = model_path(models, name)
    prompt_ids, generated, text = run_cli(path, prompt, tmp_path)
    with nt.Model(path, device="cpu") as model:
        assert model.tokenize(prompt) == prompt_ids
        with model.context(n_ctx=len(prompt_ids) + N_GEN) as ctx:
            ids = ctx.greedy(prompt_ids, N_GEN)
        assert ids == generated
        assert model.detokenize(ids) == text


@pytest.mark.parametrize("name,prompt", model_prompt_pairs())
def test_greedy_through_the_python_binding_is_run(nt, models, tmp_path, name, prompt):
    path = model_path(models, name)
    _, generated, text = run_cli(path, prompt, tmp_path)
    with nt.Model(path, device="cpu", n_seq_max=2) as model:
        got = model.generate(prompt, max_tokens=N_GEN, temperature=0)
        assert got == text
        # Streamed, the same text in pieces; the stream says how it ended.
        stream = model.generate(prompt, max_tokens=N_GEN, temperature=0, stream=True)
        pieces = list(stream)
        assert "".join(pieces) == text and len(pieces) > 1
        assert stream.completion_tokens == len(generated)
        assert stream.stop_reason == ("token limit" if len(generated) == N_GEN else "end of text")


@pytest.mark.parametrize("name,prompt", model_prompt_pairs())
def test_examples_simple_prints_what_run_prints(models, tmp_path, name, prompt):
    require_built(SIMPLE)
    path = model_path(models, name)
    _, _, text = run_cli(path, prompt, tmp_path)
    result = subprocess.run([str(SIMPLE), str(path), prompt, str(N_GEN)], capture_output=True, text=True, timeout=600,
                            check=True)
    assert result.stdout.rstrip("\n") == text.rstrip("\n")


def test_examples_batched_decodes_four_sequences(models):
    batched = BUILD_DIR / "examples" / "c" / "batched"
    require_built(batched)
    result = subprocess.run([str(batched), str(models["stories"]), "Once upon a time", "24"], capture_output=True,
                            text=True, timeout=300, check=True)
    lines = result.stdout.splitlines()
    assert [line[:4] for line in lines] == ["[0] ", "[1] ", "[2] ", "[3] "]
    assert all(line[4:].startswith("Once upon a time") for line in lines)
    assert len(set(lines)) > 1  # four seeds, four stories
    # One pass for the prompt, then one per step for all four sequences together.
    assert result.stderr.startswith("24 passes")


def test_chat_is_run_with_the_template(nt, models, tmp_path):
    path = model_path(models, "smollm2")
    question = "Name three colors."
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(path), "--device", "cpu", "--temp", "0", "-n", "40",
                             "-p", question], capture_output=True, text=True, timeout=600, check=True)
    with nt.Model(path, device="cpu") as model:
        assert model.chat(question, max_tokens=40, temperature=0) == result.stdout
        rendered = model.apply_chat_template([{"role": "user", "content": question}])
        assert "<|im_start|>user\nName three colors.<|im_end|>" in rendered
        assert rendered.endswith("<|im_start|>assistant\n")


def test_sampled_generation_repeats_with_its_seed(nt, models):
    with nt.Model(models["stories"], device="cpu", n_seq_max=2) as model:
        a = model.generate("Once upon a time", max_tokens=32, temperature=0.9, seed=11)
        b = model.generate("Once upon a time", max_tokens=32, temperature=0.9, seed=11)
        assert a == b
        counters = model.counters()
        assert counters["passes"] > 0 and counters["generated_tokens"] > 0 and counters["weight_bytes_per_token"] > 0


def test_a_stream_closed_early_cancels_its_request(nt, models):
    with nt.Model(models["stories"], device="cpu") as model:
        stream = model.generate("Once upon a time", max_tokens=-1, ignore_eos=True, temperature=0, stream=True)
        first = next(stream)
        assert first
        stream.close()
        assert stream.stop_reason == "cancelled"
        # The context serves the next request.
        assert model.generate("Once", max_tokens=4, temperature=0)


def test_state_saved_and_restored_continues_the_same(nt, models):
    with nt.Model(models["stories"], device="cpu") as model:
        prompt = model.tokenize("Once upon a time")
        with model.context(n_ctx=128) as ctx:
            expected = ctx.greedy(prompt, 8)
            batch = nt.Batch(64)
            ctx.seq_rm(0)
            for i, t in enumerate(prompt):
                batch.add(t, i, 0, i == len(prompt) - 1)
            ctx.decode(batch)
            state = ctx.save_state(0)
            ctx.clear()
            ctx.load_state(state, 0)
            assert ctx.seq_length(0) == len(prompt)
            sampler = nt.Sampler(greedy=True)
            batch.clear().add(expected[0], len(prompt), 0, True)
            ctx.decode(batch)
            assert sampler.sample(ctx) == expected[1]


def test_a_windowed_sequence_says_where_it_can_be_cut_and_its_state_decodes_again(nt, tmp_path):
    """tiny-gemma3's local layers keep their window (16) and 256 positions
    more: past that, nt_seq_pos_min moves on and nt_seq_rm refuses a cut whose
    next position's window is gone. A saved state holds the tokens, decoded
    again on load: the next logits are those of the sequence it was saved from."""
    path = make_model(tmp_path / "gemma3.gguf", "tiny-gemma3", "f32", 8)
    window = 16
    ids = [(7 * i) % 3000 + 10 for i in range(1000)]
    with nt.Model(path, device="cpu") as model, model.context(n_ctx=2048, n_seq_max=2) as ctx:
        assert ctx.seq_pos_min(0) == -1
        batch = nt.Batch(256)
        for start in range(0, len(ids), 200):
            batch.clear()
            for i in range(start, min(start + 200, len(ids))):
                batch.add(ids[i], i, 0, i == len(ids) - 1)
            ctx.decode(batch)
        first = ctx.seq_pos_min(0)
        assert 0 < first < len(ids) - window
        with pytest.raises(nt.NtError, match="sliding-window") as e:
            ctx.seq_rm(0, first)
        assert e.value.status == 6 and str(first + window - 1) in e.value.message
        state = ctx.save_state(0)
        ctx.load_state(state, 1)
        ctx.seq_rm(0, first + window - 1)  # the earliest cut whose next position sees only what is held
        for seq in (0, 1):
            ctx.seq_rm(seq, first + window - 1)
            ctx.decode(batch.clear().add(ids[first + window - 1], first + window - 1, seq, True))
            if seq == 0:
                expected = ctx.logits()
        assert ctx.logits() == expected
        ctx.seq_rm(0, 0)
        assert ctx.seq_pos_min(0) == -1


def test_errors_raise_with_status_and_message(nt, models, tmp_path):
    with pytest.raises(nt.NtError) as e:
        nt.Model(tmp_path / "missing.gguf")
    assert e.value.status == 5 and "missing.gguf" in e.value.message
    with nt.Model(models["stories"], device="cpu") as model:
        with pytest.raises(nt.NtError, match="top_p"):
            model.generate("Once", top_p=2.0)
        with pytest.raises(TypeError):
            model.generate("Once", no_such_option=1)
        with model.context() as ctx:
            with pytest.raises(nt.NtError, match="outside the vocabulary"):
                ctx.decode(nt.Batch(1).add(model.vocab_size, 0, 0, True))
        plan = model.plan()
        assert len(plan["layers"]) == model.n_layers
        assert nt.version().endswith("(API 1)")
