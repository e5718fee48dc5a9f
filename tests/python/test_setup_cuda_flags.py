"""scripts/cuda_flags.sh, which picks the CUDA build scripts/setup.sh makes, on
machines made of stubs: a working or a failing nvidia-smi, nvcc or not. The
script sees only the stubs and the few tools it uses."""

import os
import shutil
import subprocess

import pytest

from project_paths import SOURCE_DIR

SCRIPT = SOURCE_DIR / "scripts" / "cuda_flags.sh"
BASH = shutil.which("bash")


def machine(tmp_path, gpu=None, nvcc=False):
    """A PATH holding grep and head, nvidia-smi (answering with `gpu`, or failing as
    without a driver when gpu is False) and nvcc as asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("grep", "head"):
        (bin_dir / tool).symlink_to(shutil.which(tool))

    def stub(name, body):
        path = bin_dir / name
        path.write_text(f"#!{BASH}\n{body}\n")
        path.chmod(0o755)

    if gpu:
        stub("nvidia-smi", f'[[ $1 == -L ]] && echo "GPU 0: {gpu} (UUID: GPU-0)" || echo "{gpu}"')
    elif gpu is False:
        stub("nvidia-smi", 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9')
    if nvcc:
        stub("nvcc", "echo nvcc")
    return bin_dir


def flags(bin_dir, **env):
    result = subprocess.run([BASH, str(SCRIPT)], capture_output=True, text=True, check=True,
                            env={"PATH": str(bin_dir), "CUDA_HOME": str(bin_dir / "no-cuda"), **env})
    return result.stdout.split(), result.stderr


def test_gpu_and_nvcc_build_for_that_gpu_only(tmp_path):
    bin_dir = machine(tmp_path, gpu="NVIDIA H200", nvcc=True)
    out, why = flags(bin_dir)
    assert out == ["-DNT_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={bin_dir / 'nvcc'}", "-DCMAKE_CUDA_ARCHITECTURES=native"]
    assert "NVIDIA H200" in why


@pytest.mark.parametrize("gpu", [None, False])
def test_nvcc_without_a_gpu_builds_cpu_only_unless_asked(tmp_path, gpu):
    bin_dir = machine(tmp_path, gpu=gpu, nvcc=True)
    out, why = flags(bin_dir)
    assert out == ["-DNT_CUDA=OFF"] and "NT_CUDA=ON" in why
    out, _ = flags(bin_dir, NT_CUDA="ON")
    assert out == ["-DNT_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={bin_dir / 'nvcc'}", "-DCMAKE_CUDA_ARCHITECTURES=90"]


def test_nvcc_found_in_cuda_home(tmp_path):
    bin_dir = machine(tmp_path)
    cuda_bin = tmp_path / "cuda" / "bin"
    cuda_bin.mkdir(parents=True)
    (cuda_bin / "nvcc").symlink_to(shutil.which("true"))
    out, _ = flags(bin_dir, CUDA_HOME=str(tmp_path / "cuda"), NT_CUDA="ON")
    assert f"-DCMAKE_CUDA_COMPILER={cuda_bin / 'nvcc'}" in out and "-DCMAKE_CUDA_ARCHITECTURES=90" in out


@pytest.mark.parametrize("gpu", [None, False, "NVIDIA H200"])
def test_without_nvcc_the_build_is_cpu_only(tmp_path, gpu):
    out, why = flags(machine(tmp_path, gpu=gpu))
    assert out == ["-DNT_CUDA=OFF"]
    assert ("nvcc" in why) and (gpu != "NVIDIA H200" or "NVIDIA H200" in why)


def test_nt_cuda_off_asks_for_cpu_only(tmp_path):
    out, _ = flags(machine(tmp_path, gpu="NVIDIA H200", nvcc=True), NT_CUDA="OFF")
    assert out == ["-DNT_CUDA=OFF"]
