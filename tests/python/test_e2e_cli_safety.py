"""The CLI as a new user meets it: outputs that never destroy an input nor
appear half-written, Ctrl-C and SIGTERM that stop cleanly with what was done,
threads clamped to the machine, and the flag spellings users bring from
llama.cpp (-s, -sys, -n -1, -ngl, --ignore-eos). Every signal test waits for
the program's own output before signalling, so none depends on timing."""

import hashlib
import json
import os
import re
import signal
import subprocess
import time

import pytest

from project_paths import MODELS_DIR, NTRANSFORMER, convert_stories260k, require_built

SMOLLM2 = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"
TIMEOUT = 300  # seconds any one process may take, however loaded the machine


def run(*args, **kwargs):
    return subprocess.run([str(NTRANSFORMER), *map(str, args)], capture_output=True, text=True, timeout=TIMEOUT, **kwargs)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("stories"))


def smollm2():
    require_built(NTRANSFORMER)
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is absent (scripts/fetch_default_model.sh fetches it)")
    return SMOLLM2


def wait_for(stream, needle, deadline):
    """Reads `stream` (a binary pipe) until `needle` appears; returns what was read."""
    seen = b""
    while needle not in seen:
        assert time.monotonic() < deadline, f"never saw {needle!r}; got {seen[-2000:]!r}"
        chunk = os.read(stream.fileno(), 4096)
        assert chunk, f"the stream ended before {needle!r}; got {seen[-2000:]!r}"
        seen += chunk
    return seen


# Data loss

@pytest.mark.parametrize("how", ["same path", "symlink", "hard link"])
def test_quantize_refuses_an_output_that_is_its_input(tmp_path, stories, how):
    model = tmp_path / "in.gguf"
    model.write_bytes(stories.read_bytes())
    before = digest(model)
    out = {"same path": model, "symlink": tmp_path / "link.gguf", "hard link": tmp_path / "hard.gguf"}[how]
    if how == "symlink":
        out.symlink_to(model)
    elif how == "hard link":
        os.link(model, out)
    result = run("quantize", model, out, "--type", "q8_0")
    assert result.returncode == 1, result.stderr
    assert "is the input" in result.stderr and "destroy" in result.stderr, result.stderr
    assert digest(model) == before


def test_batch_refuses_to_write_over_its_input(tmp_path, stories):
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"prompt": "Once", "max_tokens": 2}\n')
    result = run("batch", "-m", stories, "-i", lines, "-o", lines)
    assert result.returncode == 1 and "-o" in result.stderr and "is the input -i" in result.stderr, result.stderr
    assert lines.read_text() == '{"prompt": "Once", "max_tokens": 2}\n'


def test_an_output_that_cannot_be_created_names_the_reason(tmp_path, stories):
    result = run("batch", "-m", stories, "-o", tmp_path / "absent" / "x.jsonl", input="")
    assert result.returncode == 1 and "No such file or directory" in result.stderr, result.stderr
    result = run("quantize", stories, tmp_path / "absent" / "x.gguf", "--type", "q8_0")
    assert result.returncode == 1 and "No such file or directory" in result.stderr, result.stderr


def test_outputs_appear_whole_and_leave_no_temporaries(tmp_path, stories):
    out = tmp_path / "q8.gguf"
    out.write_text("an older file")
    result = run("quantize", stories, out, "--type", "q8_0")
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:4] == b"GGUF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q8.gguf"]
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def current_umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_an_interrupted_write_leaves_neither_a_partial_file_nor_a_temporary(tmp_path):
    """make-model of an 8B streams gigabytes: interrupted once it has begun,
    the final path never appears and the temporary is removed."""
    require_built(NTRANSFORMER)
    out = tmp_path / "big.gguf"
    proc = subprocess.Popen([str(NTRANSFORMER), "make-model", "--preset", "llama3-8b", "--type", "q4_0", "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT
        while not any(p.name.startswith("big.gguf.partial-") for p in tmp_path.iterdir()):
            assert proc.poll() is None and time.monotonic() < deadline, "make-model ended before writing"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT) == -signal.SIGINT
    finally:
        proc.kill()
        proc.wait()
    assert list(tmp_path.iterdir()) == []


# Signals

def test_ctrl_c_stops_run_with_the_text_and_statistics():
    model = smollm2()
    proc = subprocess.Popen([str(NTRANSFORMER), "run", "-m", str(model), "--device", "cpu", "-t", "2", "-n", "-1",
                             "--ignore-eos", "--raw", "-p", "1, 2, 3,"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        text = wait_for(proc.stdout, b"1, 2, 3,", time.monotonic() + TIMEOUT)
        text += os.read(proc.stdout.fileno(), 4096)  # at least one generated piece
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    err = err.decode()
    assert "stopped by Ctrl-C" in err and "prefill:" in err, err
    assert len((text + rest).decode(errors="replace")) > len("1, 2, 3,")


def test_ctrl_c_in_chat_stops_the_reply_and_keeps_the_conversation():
    """Through a pty, as a person types: a reply stopped by Ctrl-C, then the
    commands, then Ctrl-C at the prompt quits."""
    import pty
    model = smollm2()
    leader, follower = pty.openpty()
    # --ignore-eos: the reply runs until the context is full, long after Ctrl-C.
    proc = subprocess.Popen([str(NTRANSFORMER), "chat", "-m", str(model), "--device", "cpu", "-t", "2", "-n", "-1",
                             "--ignore-eos", "--temp", "0"], stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    deadline = time.monotonic() + TIMEOUT

    class Pty:
        fileno = staticmethod(lambda: leader)

    try:
        wait_for(Pty, b"> ", deadline)
        os.write(leader, b"Tell me a story.\n")
        wait_for(Pty, b"story.\r\n", deadline)  # the terminal's echo of the line
        os.read(leader, 4096)  # the reply has begun
        proc.send_signal(signal.SIGINT)
        shown = wait_for(Pty, b"> ", deadline)
        assert b"reply stopped by Ctrl-C" in shown, shown
        os.write(leader, b"/help\n")
        assert b"/reset" in wait_for(Pty, b"> ", deadline)
        os.write(leader, b"/nonsense\n")
        assert b"unknown command /nonsense" in wait_for(Pty, b"> ", deadline)
        os.write(leader, b"   \n")  # skipped: the prompt again
        wait_for(Pty, b"> ", deadline)
        os.write(leader, b"/reset\n")
        assert b"conversation cleared" in wait_for(Pty, b"> ", deadline)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=TIMEOUT) == 0
        with pytest.raises(OSError):  # the program has closed the terminal
            wait_for(Pty, b"never", deadline)
    finally:
        proc.kill()
        proc.wait()
        os.close(leader)


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_batch_cuts_the_running_lines_and_writes_every_answer(tmp_path, sig, status):
    model = smollm2()
    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen([str(NTRANSFORMER), "batch", "-m", str(model), "--device", "cpu", "-t", "2", "-np", "2",
                             "-c", "4096", "--ignore-eos", "-o", str(out)],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for i in range(3):  # the third waits for a slot
            proc.stdin.write(json.dumps({"id": i, "prompt": f"Line {i}:", "max_tokens": -1}).encode() + b"\n")
        proc.stdin.flush()  # left open: batch waits for more lines
        wait_for(proc.stderr, b"decode ", time.monotonic() + TIMEOUT)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
    assert proc.returncode == status, err
    answers = [json.loads(line) for line in out.read_text().splitlines()]
    assert [a["id"] for a in answers] == [0, 1, 2]
    assert all(a["stop_reason"] == "interrupted" for a in answers), answers
    assert answers[0]["completion_tokens"] > 0


def test_batch_exits_non_zero_when_a_line_failed_unless_told_to_keep_going(stories):
    lines = '{"prompt": "Once", "max_tokens": 2}\n\n{"prompt": 3}\n'
    result = run("batch", "-m", stories, input=lines)
    assert result.returncode == 1 and "exit status 1 (--keep-going: 0)" in result.stderr, result.stderr
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects) == 2 and "text" in objects[0] and objects[1]["line"] == 3  # the blank line got no object
    assert run("batch", "-m", stories, "--keep-going", input=lines).returncode == 0


def test_batch_refuses_unknown_roles_and_cuts_the_echo_of_a_huge_bad_line(stories):
    huge = '{"prompt": "' + "x" * 5_000_000 + '", oops}\n'
    bad_role = json.dumps({"messages": [{"role": "narrator", "content": "hi"}]}) + "\n"
    result = run("batch", "-m", stories, "--keep-going", input=huge + bad_role)
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objects[0]["error"]) < 1000, len(objects[0]["error"])
    assert objects[1]["field"] == "messages[0].role" and "narrator" in objects[1]["error"]


def test_batch_progress_gives_prefill_and_decode_rates_apart(stories):
    result = run("batch", "-m", stories, input='{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}\n')
    answer = json.loads(result.stdout)
    assert f"prefill {answer['prompt_tokens']} tokens (" in result.stderr, result.stderr
    assert f"decode {answer['completion_tokens']} tokens (" in result.stderr, result.stderr


# Resources

def test_threads_beyond_the_machine_are_clamped_with_a_warning(stories):
    result = run("run", "-m", stories, "-t", 10000, "-n", 2, "-p", "Once")
    assert result.returncode == 0, result.stderr
    hardware = os.cpu_count()
    assert f"this machine runs {hardware} threads at once; using {hardware}" in result.stderr
    assert f"cpu ({hardware} threads" in result.stderr


def test_a_context_past_host_memory_names_c_and_the_bytes(stories):
    result = run("run", "-m", stories, "-c", 2**40, "-n", 1, "--device", "cpu")
    assert result.returncode == 1, result.stderr
    assert f"-c {2**40}" in result.stderr and "of host memory, but" in result.stderr and "lower -c" in result.stderr


# Conventions from llama.cpp

def test_s_is_the_seed_and_the_default_seed_is_random_and_printed(stories):
    sampled = ["run", "-m", stories, "-p", "Once", "-n", 24, "--temp", 1]
    first, again = run(*sampled, "-s", 42), run(*sampled, "--seed", 42)
    assert first.stdout == again.stdout and "seed:" not in first.stderr
    random_runs = [run(*sampled) for _ in range(3)] + [run(*sampled, "--seed", -1)]
    seeds = [int(r.stderr.split("seed: ")[1].split()[0]) for r in random_runs]
    assert len(set(seeds)) == len(seeds), seeds
    repeat = run(*sampled, "--seed", seeds[0])
    assert repeat.stdout == random_runs[0].stdout


def test_sys_is_the_system_prompt():
    model = smollm2()
    ids = [run("run", "-m", model, "--device", "cpu", "-n", 0, "--temp", 0, flag, "You are terse.", "-p", "Hi",
               "--show-ids").stderr.split("prompt ids:")[1] for flag in ("-sys", "--system-prompt")]
    assert ids[0] == ids[1]
    plain = run("run", "-m", model, "--device", "cpu", "-n", 0, "--temp", 0, "-p", "Hi", "--show-ids").stderr
    assert plain.split("prompt ids:")[1] != ids[0]


def test_n_minus_one_and_ignore_eos_generate_until_the_context_is_full(stories):
    result = run("run", "-m", stories, "-c", 64, "-n", -1, "--ignore-eos", "-p", "Once")
    assert result.returncode == 0 and "stopped by context full" in result.stderr, result.stderr


def test_ngl_runs_on_the_cpu_at_zero_and_points_to_the_budget_flags_between(stories):
    cpu = run("run", "-m", stories, "-ngl", 0, "-n", 2, "-p", "Once")
    assert cpu.returncode == 0 and "on cpu (" in cpu.stderr, cpu.stderr
    between = run("run", "-m", stories, "-ngl", 2, "-n", 2, "-p", "Once")
    assert between.returncode == 1 and "--vram-budget" in between.stderr and "has 5 layers" in between.stderr


def test_bench_takes_lists_of_threads_prompts_and_generations(stories):
    out = run("bench", "-m", stories, "-t", "1,2", "-p", "4,8", "-n", "2", "-r", 1).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "tok/s" not in line]
    tests = [(row.split("|")[2].strip().split(" threads")[0].split("(")[1], row.split("|")[3].strip()) for row in rows]
    assert tests == [("1", "pp4"), ("1", "pp8"), ("1", "tg2 @ 0"), ("2", "pp4"), ("2", "pp8"), ("2", "tg2 @ 0")], out


# One table of limits

LIMITS = [  # flag, value, JSON field: out of range alike
    ("--temp", "-1", "temperature"),
    ("--top-k", "-3", "top_k"),
    ("--top-p", "2", "top_p"),
    ("--min-p", "1.5", "min_p"),
    ("--repeat-penalty", "0", "repeat_penalty"),
    ("--repeat-last-n", "-5", "repeat_last_n"),
    ("-n", "-2", "max_tokens"),
]


@pytest.mark.parametrize("flag, value, field", LIMITS)
def test_flags_and_batch_fields_share_one_range_table(stories, flag, value, field):
    by_flag = run("run", "-m", stories, flag, value, "-p", "Once")
    assert by_flag.returncode != 0, by_flag.stderr
    line = json.dumps({"prompt": "Once", field: json.loads(value)})
    by_field = json.loads(run("batch", "-m", stories, "--keep-going", input=line + "\n").stdout)
    message = by_field["error"].split(": ", 2)[-1]  # after "line 1: field ..."
    assert message in by_flag.stderr, (message, by_flag.stderr)
    assert "e+38" not in message and "2147483647" not in message, message


def test_a_bad_flag_fails_before_the_model_loads(stories):
    result = run("batch", "-m", stories, "--top-p", "2", input="")
    assert result.returncode != 0 and "--top-p" in result.stderr and "loading" not in result.stderr, result.stderr
    assert "must be 0 or more" in run("bench", "-m", stories, "-p", "-5").stderr


# Small things

def test_sizes_print_in_units_that_fit(tmp_path, stories):
    result = run("quantize", stories, tmp_path / "q.gguf", "--type", "q8_0")
    assert "KiB" in result.stderr and "0.00 GB" not in result.stderr, result.stderr


def test_no_display_prompt_keeps_the_prompt_out_of_the_output(stories):
    shown = run("run", "-m", stories, "-p", "Once upon", "-n", 4, "--temp", 0).stdout
    hidden = run("run", "-m", stories, "-p", "Once upon", "-n", 4, "--temp", 0, "--no-display-prompt").stdout
    assert shown.startswith("Once upon") and shown == "Once upon" + hidden


def test_tokenize_warns_of_text_the_vocabulary_cannot_encode(tmp_path):
    text = tmp_path / "bytes.txt"
    text.write_bytes(b"Once \xff\xfe x")  # bytes of no UTF-8 character, which SmolLM2's vocabulary lacks
    result = run("tokenize", "-m", smollm2(), "-f", text)
    assert "2 pieces of the text have no token" in result.stderr and "unknown token 0" in result.stderr, result.stderr
    clean = run("tokenize", "-m", smollm2(), "-p", "Once x")
    assert "warning" not in clean.stderr


def test_a_chat_template_whose_tokens_the_vocabulary_lacks_warns(stories):
    result = run("run", "-m", stories, "--chat-template", "llama3", "-n", 1, "-p", "Hi")
    assert "no special token for <|start_header_id|>" in result.stderr, result.stderr


def test_plan_without_a_gpu_or_budget_says_what_it_assumed(stories):
    result = run("plan", "-m", stories)
    if "free on" in result.stdout:
        pytest.skip("this machine has a GPU")
    assert result.returncode == 0 and "ASSUMED: a 24 GiB card" in result.stdout, result.stdout + result.stderr


def test_help_lists_the_cuda_options_apart():
    require_built(NTRANSFORMER)
    text = run("run", "--help").stdout
    assert "CUDA options" in text and text.index("--vram-budget") > text.index("CUDA options"), text


def test_chat_drops_the_oldest_turns_when_the_context_fills_and_says_why_replies_end():
    model = smollm2()
    turns = [f"Tell me something about the number {n}, and why it matters to people." for n in range(1, 6)]
    too_long = "word " * 300
    result = run("chat", "-m", model, "--device", "cpu", "-t", 2, "-c", 160, "-n", 16, "--temp", 0,
                 input="\n".join(turns[:3] + [too_long] + turns[3:]) + "\n")
    assert result.returncode == 0, result.stderr
    assert "reply cut at -n 16 tokens" in result.stderr, result.stderr
    assert "went to fit the context of 160 tokens" in result.stderr, result.stderr
    assert "the message makes a prompt of" in result.stderr and "raise -c" in result.stderr, result.stderr
    replies = re.findall(r"^\[.*\d+ tokens, [\d.]+ tok/s; prompt", result.stderr, re.M)
    assert len(replies) == 5, result.stderr  # every turn but the one too long got a reply


def interrupt_after(args, stream_name, needle):
    """Starts the command, sends SIGINT once `needle` is on the named stream; its status and both streams."""
    proc = subprocess.Popen([str(NTRANSFORMER), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        seen = wait_for(getattr(proc, stream_name), needle, time.monotonic() + TIMEOUT)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        proc.kill()
        proc.wait()
    if stream_name == "stdout":
        out = seen + out
    else:
        err = seen + err
    return proc.returncode, out.decode(), err.decode()


def test_ctrl_c_gives_the_perplexity_of_the_windows_scored_so_far(tmp_path, stories):
    text = tmp_path / "text.txt"
    text.write_text("Once upon a time there was a little dog who liked to run in the park. " * 4000)
    status, out, err = interrupt_after(["perplexity", "-m", stories, "-f", text, "-c", 64, "-t", 1], "stderr", b"[1] ")
    assert status == 130, err
    scored = re.search(r"PPL = [\d.]+ \+/- [\d.]+ \(\d+ tokens scored in (\d+) windows of 64; interrupted, (\d+) windows not", out)
    assert scored and int(scored[1]) >= 1 and int(scored[2]) > 0, out + err


def test_ctrl_c_keeps_the_bench_rows_measured_so_far(stories):
    status, out, err = interrupt_after(["bench", "-m", stories, "-t", 1, "-p", ",".join(["8"] * 200), "-n", 0, "-r", 20],
                                       "stdout", b"| pp8 |")
    assert status == 130 and "interrupted" in err, err
    assert 1 <= out.count("| pp8 |") < 200, out
