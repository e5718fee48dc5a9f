"""`ntransformer run` (and chat, bench, batch) with speculative decoding, chains and token trees: greedy,
the text is what plain greedy decoding prints (with penalties too); sampling, a seed gives one text;
the closing statistics report acceptance and tokens per pass, and unsupported
flag combinations end with an error naming the flag. (That sampling keeps the
target's distribution is tested statistically in the unit tests.)"""

import json
import subprocess

import pytest

from project_paths import MODELS_DIR, NTRANSFORMER, convert_stories260k

SMOLLM2 = MODELS_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def stories(tmp_path_factory):
    return convert_stories260k(tmp_path_factory.mktemp("speculation"))


def command(name, *args, code=0, stdin=None):
    result = subprocess.run([str(NTRANSFORMER), name, *map(str, args)], capture_output=True, text=True, timeout=120,
                            input=stdin)
    assert result.returncode == code, f"exit {result.returncode}, stderr: {result.stderr}"
    for crash in ("terminate called", "Segmentation", "Aborted", "what():"):
        assert crash not in result.stderr
    return result


def run(*args, code=0):
    return command("run", *args, code=code)


def speculation_line(stderr):
    return next(l for l in stderr.splitlines() if l.startswith("speculation:"))


@pytest.mark.parametrize("source", [["--lookup"], ["--draft-self"], ["--draft-self", "1", "--draft-max", "3"]])
def test_speculative_text_is_plain_greedy_text(stories, source):
    common = ["-m", stories, "-p", "Once upon a time", "-n", "120", "--temp", "0"]
    plain = run(*common)
    spec = run(*common, *source)
    assert spec.stdout == plain.stdout
    assert "speculation:" not in plain.stderr
    line = speculation_line(spec.stderr)
    assert "drafted tokens accepted" in line and "tokens per pass" in line


def test_greedy_with_penalties_is_plain_greedy_with_penalties(stories):
    common = ["-m", stories, "-p", "Once upon a time", "-n", "120", "--temp", "0", "--repeat-penalty", "1.3",
              "--presence-penalty", "0.5"]
    plain = run(*common)
    assert plain.stdout != run(*common[:-4]).stdout, "the penalties should change this text"
    assert run(*common, "--lookup").stdout == plain.stdout
    assert run(*common, "--draft-self", "2").stdout == plain.stdout


@pytest.mark.parametrize("source", [["--lookup"], ["--draft-self", "2"]])
def test_sampling_with_speculation_is_reproducible_and_reports_acceptance(stories, source):
    common = ["-m", stories, "-p", "Once upon a time", "-n", "80", "--temp", "0.9", "--seed", "5", *source]
    first = run(*common)
    assert run(*common).stdout == first.stdout, "one seed, one text"
    assert run(*common[:-len(source) - 2], "--seed", "6", *source).stdout != first.stdout
    line = speculation_line(first.stderr)
    assert "drafted tokens accepted" in line and "tokens per pass" in line


def test_a_predicted_output_is_drafted_from_and_changes_no_token(stories, tmp_path):
    """The plain greedy text as the prediction: nearly every draft is accepted; an unrelated prediction
    keeps the text too, accepting less."""
    common = ["-m", stories, "-p", "Once upon a time", "-n", "120", "--temp", "0", "--draft-max", "4"]
    plain = run(*common[:-2])
    assert plain.stdout.startswith("Once upon a time")
    right, wrong = tmp_path / "right.txt", tmp_path / "wrong.txt"
    right.write_text(plain.stdout[len("Once upon a time"):])
    wrong.write_text("The dog ran to the park and played with a red ball all day long.")
    accepted = {}
    for name, path in (("right", right), ("wrong", wrong)):
        spec = run(*common, "--prediction", path)
        assert spec.stdout == plain.stdout, name
        line = speculation_line(spec.stderr)
        accepted[name] = float(line.split("accepted (")[1].split("%")[0])
        tokens_per_pass = float(line.split(", ")[-1].split(" tokens per pass")[0])
        if name == "right":
            assert accepted[name] > 90 and tokens_per_pass > 4.0, line
    assert accepted["wrong"] < accepted["right"]
    # The same prediction as the ids --ids-out wrote: every draft is the greedy token.
    ids_file = tmp_path / "plain.json"
    run(*common[:-2], "--ids-out", ids_file)
    ids = tmp_path / "generated.ids"
    ids.write_text(str(json.loads(ids_file.read_text())["generated"]))
    spec = run(*common, "--prediction-ids", ids)
    assert spec.stdout == plain.stdout
    assert "(100.0%)" in speculation_line(spec.stderr), spec.stderr
    assert "--prediction-ids: " in run(*common, "--prediction-ids", "1, 99999", code=1).stderr
    assert "give the prediction once" in run(*common, "--prediction", right, "--prediction-ids", ids, code=1).stderr


@pytest.mark.parametrize("args, message", [
    (["--lookup", "--draft-self", "--temp", "0"], "--draft-model, --draft-self and --lookup (or --prediction): choose one draft source"),
    (["--prediction", "/nonexistent/guess.txt", "--temp", "0"], "--prediction: cannot open '/nonexistent/guess.txt'"),
    (["--prediction", "/nonexistent/guess.txt", "--draft-self"], "choose one draft source"),
    (["--draft-max", "4", "--temp", "0"], "--draft-max needs a draft source"),
    (["--draft-self", "5", "--temp", "0"], "--draft-self 5: the model has 5 layers, so draft with 1 to 4"),
    (["--lookup", "--temp", "0", "--teacher-ids", "1,2"], "--lookup with --teacher-ids: teacher forcing generates nothing"),
])
def test_bad_speculation_flags_name_the_flag(stories, args, message):
    stderr = run("-m", stories, "-p", "Hello", "-n", "2", *args, code=1).stderr
    assert message in stderr


# The target as its own draft: its chains keep every token, and its trees
# learn that in the first passes (what the target keeps calibrates them).
@pytest.mark.parametrize("source, share", [(["--lookup"], 1.0), (["--draft-self", "4"], 1.0),
                                           (["--draft-model", "self"], 0.9)])
def test_token_trees_give_plain_greedy_text_and_more_tokens_per_pass(stories, source, share):
    source = [stories if a == "self" else a for a in source]
    common = ["-m", stories, "-p", "Once upon a time", "-n", "160", "--temp", "0", *source]
    plain = run(*common[:-len(source)])
    chain = run(*common, "--draft-tree", "0")
    tree = run(*common, "--draft-tree", "24")
    assert tree.stdout == plain.stdout
    assert chain.stdout == plain.stdout
    tokens_per_pass = lambda r: float(speculation_line(r.stderr).split(", ")[-1].split()[0])
    assert tokens_per_pass(tree) >= share * tokens_per_pass(chain)


def test_a_token_tree_without_a_size_is_measured_and_said(stories):
    result = run("-m", stories, "-p", "Once upon a time", "-n", "40", "--temp", "0", "--draft-self", "3", "--draft-tree")
    line = next(l for l in result.stderr.splitlines() if l.startswith("--draft-tree: "))
    assert "passes against the chain's 9 tokens" in line and "a tree may cost 1.25x" in line
    assert "tokens per pass" in speculation_line(result.stderr)


def test_sampling_with_a_token_tree_is_reproducible(stories):
    common = ["-m", stories, "-p", "Once upon a time", "-n", "80", "--temp", "0.9", "--seed", "5", "--draft-self", "4",
              "--draft-tree", "12"]
    first = run(*common)
    assert run(*common).stdout == first.stdout, "one seed, one text"
    assert "drafted tokens accepted" in speculation_line(first.stderr)


@pytest.mark.parametrize("args, message", [
    (["--draft-tree", "16", "--temp", "0"], "--draft-tree needs a draft source"),
    (["--lookup", "--draft-tree", "1"], "--draft-tree 1: a tree holds at least 2 tokens per pass"),
    (["--lookup", "--draft-tree", "many"], "--draft-tree many: a tree holds at least 2 tokens per pass"),
])
def test_bad_tree_sizes_name_the_flag(stories, args, message):
    assert message in run("-m", stories, "-p", "Hello", "-n", "2", *args, code=1).stderr


@pytest.mark.parametrize("args", [["--lookup", "--draft-max", "0"], ["--draft-self", "0"]])
def test_non_positive_counts_are_refused_by_the_parser(stories, args):
    stderr = run("-m", stories, "-p", "Hello", "-n", "2", "--temp", "0", *args, code=1).stderr
    assert args[-2] in stderr


@pytest.fixture(scope="module")
def stories_q8_0(stories):
    out = stories.parent / "stories260K-q8_0.gguf"
    subprocess.run([str(NTRANSFORMER), "quantize", str(stories), str(out), "--type", "q8_0"], check=True,
                   capture_output=True)
    return out


@pytest.mark.parametrize("draft_max", ["1", "6"])
def test_a_draft_model_gives_plain_greedy_text(stories, stories_q8_0, draft_max):
    common = ["-m", stories, "-p", "Once upon a time", "-n", "120", "--temp", "0"]
    plain = run(*common)
    for draft in (stories, stories_q8_0):
        spec = run(*common, "--draft-model", draft, "--draft-max", draft_max)
        assert spec.stdout == plain.stdout, draft
        assert "tokens per pass" in speculation_line(spec.stderr)


def test_sampling_with_a_draft_model_is_reproducible(stories, stories_q8_0):
    common = ["-m", stories, "-p", "Once upon a time", "-n", "80", "--temp", "1", "--seed", "3",
              "--draft-model", stories_q8_0]
    first = run(*common)
    assert run(*common).stdout == first.stdout
    accepted = speculation_line(first.stderr)
    assert "drafted tokens accepted" in accepted


def test_a_draft_model_of_another_vocabulary_is_refused(stories):
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is absent")
    stderr = run("-m", stories, "-p", "Hello", "-n", "2", "--draft-model", SMOLLM2, code=1).stderr
    assert f"--draft-model {SMOLLM2}: its vocabulary has 49152 tokens" in stderr
    assert f"the target {stories}'s 512" in stderr


def test_a_missing_draft_model_is_named(stories, tmp_path):
    missing = tmp_path / "absent.gguf"
    stderr = run("-m", stories, "-p", "Hello", "-n", "2", "--draft-model", missing, code=1).stderr
    assert "--draft-model" in stderr and str(missing) in stderr


@pytest.mark.parametrize("source", [["--lookup"], ["--draft-self", "3"], ["--draft-model", "self"]])
def test_chat_speculates_and_replies_as_plain_greedy(stories, source):
    source = [stories if a == "self" else a for a in source]
    turns = "Once upon a time\nThe dog\n/exit\n"
    common = ["-m", stories, "--temp", "0", "-n", "40"]
    plain = command("chat", *common, stdin=turns)
    spec = command("chat", *common, *source, stdin=turns)
    assert spec.stdout == plain.stdout
    statistics = [l for l in spec.stderr.splitlines() if "tok/s" in l]
    assert len(statistics) == 2 and all("tokens per pass" in l for l in statistics), spec.stderr
    assert "tokens per pass" not in plain.stderr


def test_bench_reports_speculation_beside_plain_decoding(stories):
    out = command("bench", "-m", stories, "-p", "0", "-n", "24", "-r", "1", "--draft-model", stories).stdout
    header = next(l for l in out.splitlines() if "tokens/pass" in l)
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "model", "backend", "test", "draft", "tok/s", "tok/s without", "speedup", "acceptance", "tokens/pass"]
    row = out.splitlines()[out.splitlines().index(header) + 2].strip("|").split("|")
    assert row[3].strip() == f"--draft-model {stories}, max 8"
    # The target as its own draft: every drafted token is accepted (greedy), 9 a pass where there is room for 8.
    assert float(row[7].strip().rstrip("%")) > 90
    assert 4 < float(row[8]) <= 9
    assert float(row[6]) > 0


@pytest.mark.parametrize("args, message", [
    (["batch", "--draft-model", "x.gguf"], "--draft-model: "),
    (["batch", "--draft-max", "3"], "--draft-max needs a draft source"),
    (["batch", "--draft-self", "99"], "--draft-self 99: the model has"),
    (["bench", "-npl", "2", "--draft-self"], "bench -npl --draft-self: bench -npl does not decode speculatively"),
    (["chat", "--lookup", "--draft-self"], "--draft-model, --draft-self and --lookup (or --prediction): choose one draft source"),
    (["bench", "--draft-max", "2"], "--draft-max needs a draft source"),
    (["bench", "-npl", "2", "--draft-tree", "8"], "bench -npl --draft-tree: bench -npl does not decode speculatively"),
])
def test_commands_refuse_speculation_they_cannot_do(stories, args, message):
    stderr = command(args[0], "-m", stories, *args[1:], code=1, stdin="").stderr
    assert message in stderr


@pytest.mark.parametrize("source", [["--lookup"], ["--draft-self", "2", "--draft-max", "3"], ["--draft-model", "q8_0"]])
def test_batch_speculates_and_each_line_is_plain_greedy(stories, stories_q8_0, source):
    source = [str(stories_q8_0) if s == "q8_0" else s for s in source]  # a draft model: the target quantized
    prompts = ["Once upon a time", "Lily and Tom went to the park. Lily and Tom", "The cat", "One day"]
    lines = "".join(json.dumps({"id": i, "prompt": p, "max_tokens": 60, "temperature": 0}) + "\n"
                    for i, p in enumerate(prompts))
    result = command("batch", "-m", stories, "-np", 3, *source, stdin=lines)
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["id"] for o in out] == list(range(len(prompts)))
    for prompt, o in zip(prompts, out):
        alone = run("-m", stories, "--raw", "-p", prompt, "-n", "60", "--temp", "0").stdout
        assert prompt + o["text"] == alone, prompt
    assert sum(o["accepted"] for o in out) > 0
    assert "tokens per sequence per pass" in result.stderr
    # Token trees: the same lines.
    trees = command("batch", "-m", stories, "-np", 3, *source, "--draft-tree", "12", stdin=lines)
    assert [json.loads(line)["text"] for line in trees.stdout.splitlines()] == [o["text"] for o in out]
