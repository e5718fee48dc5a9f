"""Where the Python tests find the source tree, the build, the models and the
engine (CTest sets the NT_* variables; the defaults suit a run from the source
tree), and the shared stories260K model converted to GGUF, which several
suites test against their own references."""

import os
import subprocess
from pathlib import Path

import pytest

SOURCE_DIR = Path(os.environ.get("NT_SOURCE_DIR", Path(__file__).resolve().parents[2]))
BUILD_DIR = Path(os.environ.get("NT_BUILD_DIR", SOURCE_DIR / "build"))
SHARED_MODELS = Path(os.environ.get("NT_SHARED_MODELS", SOURCE_DIR.parent / "shared" / "models"))
MODELS_DIR = Path(os.environ.get("NT_MODELS_DIR", SOURCE_DIR / "models"))
REFERENCE_DIR = SOURCE_DIR / "tests" / "reference"  # llama_ref.py, the float64 forward pass
NTRANSFORMER = BUILD_DIR / "src" / "ntransformer"


def require_built(*tools):
    """Skips the calling test or fixture unless every tool is built."""
    for tool in tools:
        if not tool.exists():
            pytest.skip(f"{tool} is not built")


def convert_stories260k(out_dir):
    """llama2.c's stories260K.bin and tok512.bin from the shared models, as
    GGUF through `ntransformer convert-llama2c`; skips when either is absent."""
    require_built(NTRANSFORMER)
    model, tokenizer = SHARED_MODELS / "stories260K.bin", SHARED_MODELS / "tok512.bin"
    if not model.exists() or not tokenizer.exists():
        pytest.skip(f"stories260K.bin / tok512.bin are absent from {SHARED_MODELS}")
    out = Path(out_dir) / "stories260K.gguf"
    subprocess.run([str(NTRANSFORMER), "convert-llama2c", str(model), str(tokenizer), str(out)],
                   check=True, capture_output=True)
    return out


def make_model(path, preset, weight_type, seed):
    """`ntransformer make-model` of a preset into path; returns path."""
    require_built(NTRANSFORMER)
    subprocess.run([str(NTRANSFORMER), "make-model", "--preset", preset, "--type", weight_type, "--seed", str(seed),
                    "--out", str(path)], check=True, capture_output=True)
    return path


def model_maker(tmp_path_factory, weight_type, seed):
    """For a module fixture: make(preset), each preset's file written once, of this type and seed."""
    made = {}

    def make(preset):
        if preset not in made:
            made[preset] = make_model(tmp_path_factory.mktemp(preset) / f"{preset}.gguf", preset, weight_type, seed)
        return made[preset]

    return make
