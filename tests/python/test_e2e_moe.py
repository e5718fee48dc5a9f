"""Mixtures of experts through the engine's other paths, on random-weight
tiny presets: `batch` (continuous batching: sequences' prompt chunks and
decode steps share passes, so an expert takes tokens of several sequences at
once) gives every line the greedy text `run` gives it alone (tiny-qwen3moe,
and tiny-gpt-oss with its MXFP4 experts and sliding layers), and so do
speculative decoding (drafts from the context, from the model's own first
layers, from a draft model, as chains and as trees) and the server's
concurrent completions through the official `openai` client; `plan`
places a MoE model's experts: all in VRAM when the budget holds them, else as
many as fit cached in front of pinned RAM, with sizes read from the file by
the `gguf` package; a gpt-oss file is planned with the note of the blocks the
GPU lacks. (The logits themselves are checked against the float64 reference
in test_architectures.py, the GPU's against the CPU's in the GPU tests.)"""

import concurrent.futures
import json
import subprocess

import gguf
import pytest

from project_paths import NTRANSFORMER, make_model, model_maker

PROMPTS = ["Once upon a time", "The", "In a small village by the sea, there lived an old fisherman who",
           "1, 2, 3, 4,", "Hello"]
N_PREDICT = 24


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return model_maker(tmp_path_factory, "q8_0", 4)


def run_alone(path, prompt):
    result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(path), "--device", "cpu", "--raw", "--temp", "0",
                             "-n", str(N_PREDICT), "--ignore-eos", "-p", prompt],
                            capture_output=True, text=True, check=True)
    assert result.stdout.startswith(prompt)
    return result.stdout[len(prompt):]


@pytest.mark.parametrize("preset", ["tiny-qwen3moe", "tiny-gpt-oss"])
def test_batch_greedy_output_equals_run(model, preset):
    path = model(preset)
    lines = "".join(json.dumps({"id": i, "prompt": p, "max_tokens": N_PREDICT, "temperature": 0}) + "\n"
                    for i, p in enumerate(PROMPTS))
    # Three at a time, prompts cut into chunks of 32 positions beside the others' decode steps.
    result = subprocess.run([str(NTRANSFORMER), "batch", "-m", str(path), "--device", "cpu", "-np", "3", "-b", "32",
                             "--ignore-eos"], input=lines, capture_output=True, text=True, check=True)
    outputs = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["id"] for o in outputs] == list(range(len(PROMPTS)))
    for prompt, out in zip(PROMPTS, outputs):
        assert out["text"] == run_alone(path, prompt), prompt


SPECULATION = {"lookup": ["--lookup"], "self": ["--draft-self", "2"], "model": ["--draft-model", None],
               "tree": ["--draft-model", None, "--draft-tree", "8"]}


@pytest.mark.parametrize("source", SPECULATION)
@pytest.mark.parametrize("preset", ["tiny-qwen3moe", "tiny-gpt-oss"])
def test_speculative_greedy_output_equals_run(model, preset, source):
    """Verification passes route every drafted token through the experts at
    once; rejected drafts leave the cache as plain decoding would."""
    path = model(preset)
    flags = [str(path) if f is None else f for f in SPECULATION[source]]
    for prompt in PROMPTS[:3]:
        result = subprocess.run([str(NTRANSFORMER), "run", "-m", str(path), "--device", "cpu", "--raw", "--temp", "0",
                                 "-n", str(N_PREDICT), "--ignore-eos", "-p", prompt, *flags],
                                capture_output=True, text=True, check=True)
        assert result.stdout == prompt + run_alone(path, prompt), (prompt, result.stderr)


def test_the_server_completes_each_request_as_run_does(model):
    """Concurrent requests share the server's passes and so its expert reads."""
    test_server = pytest.importorskip("test_server")
    path = model("tiny-qwen3moe")
    with test_server.serving("-np", 3, model=path) as server:
        client = server.openai()

        def complete(prompt):
            return client.completions.create(model=path.stem, prompt=prompt, max_tokens=N_PREDICT, temperature=0,
                                             extra_body={"ignore_eos": True}).choices[0].text

        with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
            texts = list(pool.map(complete, PROMPTS))
    for prompt, text in zip(PROMPTS, texts):
        assert text == run_alone(path, prompt), prompt


PLAN_RATES = ["--h2d-gbps", "8", "--disk-gbps", "2", "--gpu-gbps", "500", "--cpu-gbps", "20"]


def plan(path, vram_budget, *extra):
    return subprocess.run([str(NTRANSFORMER), "plan", "-m", str(path), "--vram-budget", vram_budget, "--ram-budget", "1GiB",
                           "-c", "512", *PLAN_RATES, *extra], capture_output=True, text=True, timeout=120)


def row(text, start):
    """The first plan line that starts with `start`."""
    return next(line for line in text.splitlines() if line.strip().startswith(start))


def mib(size):
    """MiB of a printed size such as "768.00 KiB"."""
    number, unit = size.split()
    return float(number) * {"B": 2**-20, "KiB": 2**-10, "MiB": 1, "GiB": 2**10}[unit]


def test_plan_places_experts_in_vram_then_pinned_ram(tmp_path):
    # F32 experts: the GPU keeps their file layout, so an expert's bytes are its three matrices' from the file.
    path = make_model(tmp_path / "moe.gguf", "tiny-qwen3moe", "f32", 4)
    reader = gguf.GGUFReader(str(path))
    stacks = [t for t in reader.tensors if t.name.startswith("blk.") and "_exps." in t.name]
    layers = len({t.name.split(".")[1] for t in stacks})
    experts_per_layer = int(stacks[0].shape[-1])
    expert_mib = sum(int(t.n_bytes) for t in stacks) / (layers * experts_per_layer) / 2**20
    total = layers * experts_per_layer

    roomy = plan(path, "2GiB")
    assert roomy.returncode == 0, roomy.stderr
    experts = row(roomy.stdout, "experts (")  # "experts (32 of 32, 768.00 KiB each)   24.00 MiB"
    assert f"experts ({total} of {total}, " in experts
    assert abs(mib(experts.split(", ")[1].split(" each")[0]) - expert_mib) < 0.01, experts
    assert abs(mib(" ".join(experts.split()[-2:])) - total * expert_mib) < 0.01, experts

    # A budget that leaves room for six and a half experts past everything
    # else: one expert's file bytes go to the landing buffer a miss copies
    # into, five to slots.
    fixed = mib(" ".join(row(roomy.stdout, "total").split()[1:3])) - total * expert_mib
    tight = plan(path, f"{fixed + 6.5 * expert_mib:.3f}MiB")
    assert tight.returncode == 0, tight.stderr
    assert f"experts (5 of {total}, " in row(tight.stdout, "experts ("), tight.stdout
    landing = row(tight.stdout, "a miss's landing buffer")
    assert abs(mib(" ".join(landing.split()[-2:])) - expert_mib) < 0.01, landing
    pinned = row(tight.stdout, "experts (every one")
    assert abs(mib(" ".join(pinned.split()[-2:])) - total * expert_mib) < 0.01, pinned
    assert f"{100 * 5 / total:.1f}%" in row(tight.stdout, "in VRAM"), tight.stdout

    # The predictions: the misses' bytes over the link alone, or over the
    # link and the CPU together (PLAN_RATES: 8 and 20 GB/s).
    def seconds(label):
        return float(row(tight.stdout, label).split("ms/token")[0].split()[-1]) / 1e3
    link_mib = mib(" ".join(row(tight.stdout, "over the link").split()[-2:]))
    link_seconds = link_mib * 2**20 / 8e9
    both_seconds = link_mib * 2**20 / 28e9
    assert abs((seconds("predicted, misses copied") - seconds("predicted, misses split")) -
               (link_seconds - both_seconds)) < 2e-6, tight.stdout

    # Too small for one expert: the error says both sizes.
    none = plan(path, f"{fixed:.3f}MiB")
    assert none.returncode != 0
    assert "at least one expert's" in none.stderr, none.stderr


def test_plan_refuses_experts_over_several_gpus(model):
    result = plan(model("tiny-mixtral"), "200MiB", "--gpus", "0,1")
    assert result.returncode != 0
    assert "run dense models only so far" in result.stderr, result.stderr


def test_plan_places_gpt_oss_mxfp4_experts_at_their_file_size(model):
    # The GPU's MXFP4 layout (codes, then the exponent) keeps a block's 17 bytes.
    path = model("tiny-gpt-oss")
    reader = gguf.GGUFReader(str(path))
    stacks = [t for t in reader.tensors if t.name.startswith("blk.") and "_exps.weight" in t.name]
    assert {t.tensor_type for t in stacks} == {gguf.GGMLQuantizationType.MXFP4}
    layers = len({t.name.split(".")[1] for t in stacks})
    experts_per_layer = int(stacks[0].shape[-1])
    total = layers * experts_per_layer
    expert_mib = sum(int(t.n_bytes) for t in stacks) / total / 2**20
    result = plan(path, "200MiB")
    assert result.returncode == 0, result.stderr
    experts = row(result.stdout, "experts (")
    assert f"experts ({total} of {total}, " in experts, result.stdout
    assert abs(mib(experts.split(", ")[1].split(" each")[0]) - expert_mib) < 0.01, experts
