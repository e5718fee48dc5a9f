"""What the commands print around their work, as a user or a log sees it:
progress in a log, option help, the version, the benchmark table."""

import subprocess

import pytest

from project_paths import NTRANSFORMER, require_built


def ntransformer(*args):
    """Runs the binary with stdout and stderr as bytes: decoding them as text
    would turn a carriage return into a newline."""
    return subprocess.run([str(NTRANSFORMER), *map(str, args)], check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    require_built(NTRANSFORMER)
    path = tmp_path_factory.mktemp("cli") / "tiny.gguf"
    ntransformer("make-model", "--preset", "tiny", "--type", "q4_k", "--out", path)
    return path


def test_quantize_writes_plain_lines_to_a_log(tiny, tmp_path):
    out = tmp_path / "tiny-q8_0.gguf"
    stderr = ntransformer("quantize", tiny, out, "--type", "q8_0").stderr.decode()
    assert "\r" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("quantizing to Q8_0: ") and "(100%" in lines[0], lines
    assert lines[1].startswith(f"wrote {out} ("), lines
