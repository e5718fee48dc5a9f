"""Mixtures of experts through the engine's other paths, on random-weight
tiny presets: `batch` (continuous batching: sequences' prompt chunks and
decode steps share passes, so an expert takes tokens of several sequences at
once) gives every line the greedy text `run` gives it alone (tiny-qwen3moe,
and tiny-gpt-oss with its MXFP4 experts and sliding layers), and `plan` plans
a MoE model with the note that it runs on the CPU. (The logits themselves are
checked against the float64 reference in test_architectures.py.)"""

import json
import subprocess

import pytest

from project_paths import NTRANSFORMER, model_maker

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


# What `plan` notes before planning a model that runs on the CPU only: each block the CUDA backend lacks.
PLAN_NOTES = {
    "tiny-mixtral": "note: mixture-of-experts layers run on the CPU only for now",
    # gpt-oss's MXFP4 experts are planned at their file size.
    "tiny-gpt-oss": "note: mixture-of-experts layers, attention sinks and YaRN RoPE run on the CPU only for now",
}


@pytest.mark.parametrize("preset", list(PLAN_NOTES))
def test_plan_notes_what_runs_on_the_cpu(model, preset):
    result = subprocess.run([str(NTRANSFORMER), "plan", "-m", str(model(preset)), "--vram-budget", "200MiB",
                             "--ram-budget", "1GiB", "-c", "512", "--h2d-gbps", "8", "--disk-gbps", "2",
                             "--gpu-gbps", "500", "--cpu-gbps", "20"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert PLAN_NOTES[preset] in result.stdout
