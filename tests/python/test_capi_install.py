"""The installed library: `cmake --install` into a temporary prefix puts the
header, libntransformer.so (with its SONAME) and .a, the CMake package and
ntransformer.pc in place; examples/c/simple.c builds against them with
pkg-config and with CMake (find_package), and runs; `pip install ./python`
gives a package that finds the installed library.
"""

import os
import shutil
import subprocess
import sys

import pytest

from project_paths import BUILD_DIR, SOURCE_DIR, convert_stories260k, require_built

LIBRARY = BUILD_DIR / "src" / "capi" / "libntransformer.so"
SIMPLE_SOURCE = SOURCE_DIR / "examples" / "c" / "simple.c"


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    require_built(LIBRARY, BUILD_DIR / "src" / "capi" / "libntransformer.a")
    root = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", str(BUILD_DIR), "--prefix", str(root)], check=True, capture_output=True,
                   text=True)
    return root


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("stories"))


def libdir(prefix):
    found = sorted(prefix.glob("lib*/**/libntransformer.so"))
    assert found, f"no libntransformer.so under {prefix}"
    return found[0].parent


def run_simple(binary, model, prefix):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(prefix)))
    result = subprocess.run([str(binary), str(model), "Once upon a time", "16"], capture_output=True, text=True,
                            env=env, timeout=300, check=True)
    return result.stdout


def reference_text(model):
    """What the build tree's simple prints."""
    simple = BUILD_DIR / "examples" / "c" / "simple"
    require_built(simple)
    return subprocess.run([str(simple), str(model), "Once upon a time", "16"], capture_output=True, text=True,
                          timeout=300, check=True).stdout


def test_the_tree_is_installed(prefix):
    lib = libdir(prefix)
    assert (prefix / "include" / "ntransformer.h").is_file()
    assert (lib / "libntransformer.a").is_file()
    assert (lib / "pkgconfig" / "ntransformer.pc").is_file()
    assert (lib / "cmake" / "ntransformer" / "ntransformerConfig.cmake").is_file()
    assert (lib / "cmake" / "ntransformer" / "ntransformerConfigVersion.cmake").is_file()
    soname = subprocess.run(["objdump", "-p", str(lib / "libntransformer.so")], capture_output=True, text=True,
                            check=True).stdout
    assert "SONAME               libntransformer.so.1" in soname


def test_simple_builds_with_pkg_config(prefix, stories, tmp_path):
    if not shutil.which("pkg-config") or not shutil.which("cc"):
        pytest.skip("pkg-config or cc is absent")
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir(prefix) / "pkgconfig"))
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "ntransformer"], capture_output=True, text=True,
                           env=env, check=True).stdout.split()
    binary = tmp_path / "simple"
    subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", str(SIMPLE_SOURCE), *flags, "-o", str(binary)], check=True,
                   env=env)
    assert run_simple(binary, stories, prefix) == reference_text(stories)


def test_simple_builds_with_cmake(prefix, stories, tmp_path):
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(SOURCE_DIR / "examples" / "c"), "-B", str(build), f"-DCMAKE_PREFIX_PATH={prefix}",
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True, text=True)
    subprocess.run(["cmake", "--build", str(build), "--target", "simple"], check=True, capture_output=True, text=True)
    assert run_simple(build / "simple", stories, prefix) == reference_text(stories)


def test_pip_installed_package_finds_the_installed_library(prefix, stories, tmp_path):
    target = tmp_path / "site"
    source = tmp_path / "python"  # a copy: pip's build leaves files beside the project it builds
    shutil.copytree(SOURCE_DIR / "python", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                             "--target", str(target), str(source)], capture_output=True, text=True)
    if result.returncode != 0 and ("No module named" in result.stderr or "bdist_wheel" in result.stderr):
        pytest.skip("setuptools or wheel is absent from this Python (tests/requirements.txt has them)")
    assert result.returncode == 0, result.stderr
    code = ("import ntransformer, sys; m = ntransformer.Model(sys.argv[1], device='cpu'); "
            "print(ntransformer.library_path()); print(m.generate('Once upon a time', max_tokens=16, temperature=0))")
    env = dict(os.environ, PYTHONPATH=str(target), LD_LIBRARY_PATH=str(libdir(prefix)))
    env.pop("NT_LIBRARY", None)
    out = subprocess.run([sys.executable, "-c", code, str(stories)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300, check=True).stdout
    path, text = out.split("\n", 1)
    assert "libntransformer" in path
    assert text.rstrip("\n") == reference_text(stories).rstrip("\n")
