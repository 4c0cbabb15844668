"""The runner under misuse: bad input fails with exit code 2 and a message naming
the field or file, before any work starts.

No test here runs a notebook: ``no_run`` replaces the runner's task execution with a
failure, so an input check that stopped refusing would show up as that failure rather
than as a benchmark run.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

from hpcbench import cli
from hpcbench.core.errors import ConfigError, HpcbenchError, SuiteError
from hpcbench.experiments import EXPERIMENTS
from hpcbench.run.rundir import load_run
from hpcbench.run.suite import MAX_REPEAT, MAX_SUITE_TASKS, load_suite, parse_suite

ENV_TASK = {"experiment": "environment"}


@pytest.fixture(autouse=True)
def no_run(monkeypatch):
    """Fail the test if anything gets as far as running tasks."""
    import hpcbench.run.runner as runner

    def refuse(*args, **kwargs):
        raise AssertionError("input check passed: tasks were about to run")

    monkeypatch.setattr(runner, "_run_tasks", refuse)
    monkeypatch.setattr(runner, "run_suite", refuse)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_refused(rc: int, out: str, err: str, *needles: str) -> None:
    assert rc == 2, (out, err)
    assert "Traceback" not in err and "run dir:" not in out
    for needle in needles:
        assert needle in err, (needle, err)


def write_suite(tmp_path, text: str | bytes, name: str = "s.yaml"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def fake_run_dir(tmp_path, suite_json=None):
    """A run dir as ``prepare_run_dir`` leaves it, with ``suite.json`` replaceable."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    suite = parse_suite({"name": "mine", "tasks": [ENV_TASK]}, "mine.yaml")
    (run_dir / "run.json").write_text(json.dumps({"run_id": "run", "suite": "mine", "backend": "local"}))
    (run_dir / "suite.json").write_text(json.dumps(suite.to_dict() if suite_json is None else suite_json))
    return run_dir


# -- 4: names that become paths ------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../escaped", "a/b", ".hidden", "with space", "x\n"])
def test_suite_name_must_be_a_plain_name(name):
    with pytest.raises(SuiteError, match="suite name .* may hold only letters"):
        parse_suite({"name": name, "tasks": [ENV_TASK]}, "my.yaml")


def test_escaping_suite_name_writes_nothing_outside_out(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    path = write_suite(tmp_path / "a", "name: ../../escaped\ntasks: [{experiment: environment}]\n")
    rc, out, err = run_cli(capsys, "suite", path, "--out", tmp_path / "a" / "out")
    assert_refused(rc, out, err, "s.yaml", "'../../escaped'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_variant_name_with_trailing_newline_is_refused():
    # re.match with "$" accepted "a\n": "$" also matches before a final newline.
    with pytest.raises(SuiteError, match="variant name 'a\\\\n'"):
        parse_suite({"tasks": [{"experiment": "environment", "variants": {"a\n": {}}}]}, "my.yaml")


def test_summary_quotes_the_run_dir_for_the_shell(tmp_path, capsys):
    run_dir = tmp_path / "it's a dir; rm -rf x"
    failed = SimpleNamespace(state="failed", task_id="environment.default.r0", error="boom",
                             batch_log=None, notebook="notebook.ipynb")
    assert cli._summary([failed], run_dir) == 1
    out = capsys.readouterr().out
    quoted = "'" + str(run_dir).replace("'", "'\"'\"'") + "'"
    assert f"hpcbench suite resume {quoted}" in out
    assert f"hpcbench report {quoted} --out " in out


@pytest.mark.parametrize("edit,needles", [
    (lambda d: d.pop("tasks"), ["'tasks' is missing"]),
    (lambda d: d.update(tasks={"a": 1}), ["'tasks' must be a non-empty list"]),
    (lambda d: d["tasks"][0].update(extra=1), ["tasks[0]", "unknown key(s) ['extra']"]),
    (lambda d: d["tasks"][0].pop("params"), ["tasks[0]", "missing key(s) ['params']"]),
    (lambda d: d["tasks"][0].update(task_id="../../../x"), ["tasks[0]", "task_id '../../../x'"]),
    (lambda d: d["tasks"][0].update(experiment="nosuch"), ["tasks[0]", "unknown experiment 'nosuch'"]),
    (lambda d: d["tasks"][0].update(variant="../v"), ["tasks[0]", "variant name '../v'"]),
    (lambda d: d["tasks"][0]["params"].update(sysfs_root="/nonexistent"), ["tasks[0]", "sysfs_root"]),
    (lambda d: d.update(name="../up"), ["suite name '../up'"]),
])
def test_resume_validates_a_hand_edited_suite_json(tmp_path, capsys, edit, needles):
    data = parse_suite({"name": "mine", "tasks": [ENV_TASK]}, "mine.yaml").to_dict()
    edit(data)
    run_dir = fake_run_dir(tmp_path, data)
    with pytest.raises(HpcbenchError) as exc:
        load_run(run_dir)
    for needle in [str(run_dir / "suite.json"), *needles]:
        assert needle in str(exc.value)
    rc, out, err = run_cli(capsys, "suite", "resume", run_dir)
    assert_refused(rc, out, err, "suite.json", *needles)


def test_a_valid_suite_json_still_loads(tmp_path):
    suite, info = load_run(fake_run_dir(tmp_path))
    assert [t.task_id for t in suite.tasks] == ["environment.default.r0"] and info["backend"] == "local"


# -- 5: duplicate YAML keys ------------------------------------------------------------------

@pytest.mark.parametrize("text,key,line", [
    ("tasks:\n  - experiment: environment\n    variants:\n      a: {}\n      a: {}\n", "'a'", 5),
    ("tasks:\n  - experiment: collectives\n    params:\n      iters: 1\n      iters: 2\n", "'iters'", 5),
    ("name: x\nname: y\ntasks: [{experiment: environment}]\n", "'name'", 2),
])
def test_duplicate_yaml_keys_are_refused(tmp_path, text, key, line):
    path = write_suite(tmp_path, text)
    with pytest.raises(SuiteError) as exc:
        load_suite(path)
    assert f"{path}, line {line}: key {key} is given twice" in str(exc.value)


def test_yaml_merge_keys_may_still_be_overridden(tmp_path):
    path = write_suite(tmp_path, "tasks:\n  - experiment: collectives\n    params: &p {iters: 2, warmup_iters: 1}\n"
                                 "    variants:\n      a: {<<: *p, iters: 3}\n")
    assert load_suite(path).tasks[0].params["iters"] == 3


# -- 6: exit code 2 for bad paths and shapes ----------------------------------------------------

@pytest.mark.parametrize("command", [["run", "environment"], ["suite", "demo"]])
@pytest.mark.parametrize("option", ["--run-dir", "--out"])
def test_a_file_as_run_dir_or_out_is_refused(tmp_path, capsys, command, option):
    file = tmp_path / "afile"
    file.write_text("x")
    rc, out, err = run_cli(capsys, *command, option, file)
    assert_refused(rc, out, err, f"{option} {file}", "is a file")
    assert file.read_text() == "x"


@pytest.mark.parametrize("path", ["/proc/nope", "/proc/nope/run"])
def test_uncreatable_run_dir_is_refused_before_any_work(capsys, path):
    rc, out, err = run_cli(capsys, "run", "environment", "--run-dir", path)
    assert_refused(rc, out, err, f"--run-dir {path}", "cannot create")


def test_non_empty_run_dir_is_refused_before_the_run_dir_line(tmp_path, capsys):
    (tmp_path / "keep").write_text("x")
    rc, out, err = run_cli(capsys, "run", "environment", "--run-dir", tmp_path)
    assert_refused(rc, out, err, "not empty")


def test_accepted_run_dir_is_printed_and_the_probe_leaves_nothing(tmp_path, capsys):
    target = tmp_path / "new" / "run"
    with pytest.raises(AssertionError, match="tasks were about to run"):
        cli.main(["run", "environment", "--run-dir", str(target)])
    assert f"run dir: {target}" in capsys.readouterr().out
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("make", [lambda p: p.write_text("{}"), lambda p: None])
def test_resume_of_a_file_or_missing_path_is_refused(tmp_path, capsys, make):
    path = tmp_path / "suite.yaml"
    make(path)
    rc, out, err = run_cli(capsys, "suite", "resume", path)
    assert_refused(rc, out, err, str(path))


def test_list_valued_variant_is_refused(tmp_path, capsys):
    path = write_suite(tmp_path, "tasks:\n  - experiment: environment\n    variants: {a: [1, 2]}\n")
    rc, out, err = run_cli(capsys, "suite", path)
    assert_refused(rc, out, err, "s.yaml", "variant 'a'", "must be a mapping")


def test_non_utf8_suite_is_refused(tmp_path, capsys):
    path = write_suite(tmp_path, "name: caf\xe9\ntasks: [{experiment: environment}]\n".encode("latin-1"))
    rc, out, err = run_cli(capsys, "suite", path)
    assert_refused(rc, out, err, "s.yaml", "not UTF-8")


@pytest.mark.parametrize("jobs", ["-3", "0", "two"])
def test_jobs_must_be_a_positive_integer(capsys, jobs):
    with pytest.raises(SystemExit) as exc:
        cli.main(["suite", "demo", "--jobs", jobs])
    assert exc.value.code == 2 and "--jobs" in capsys.readouterr().err


def test_io_formats_dataset_must_exist(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "run", "io_formats", "-p", "dataset=/nonexistent")
    assert_refused(rc, out, err, "IoFormatsConfig.dataset", "'/nonexistent' does not exist")
    rc, out, err = run_cli(capsys, "run", "io_formats", "-p", f"dataset={tmp_path}")
    assert_refused(rc, out, err, "IoFormatsConfig.dataset", "manifest.json")
    (tmp_path / "manifest.json").write_text("{}")  # its content is load_manifest's to check, in the run
    assert EXPERIMENTS.get("io_formats").config.from_dict({"dataset": str(tmp_path)}).dataset == str(tmp_path)


@pytest.mark.parametrize("experiment,key,value", [
    ("comm_modes", "bucket_cap_mb", "inf"), ("comm_modes", "bucket_cap_mb", "-inf"),
    ("batch_scaling", "bucket_cap_mb", "inf"), ("io_formats", "compute_ms", "1e999"),
])
def test_infinite_floats_are_refused(capsys, experiment, key, value):
    rc, out, err = run_cli(capsys, "run", experiment, "-p", f"{key}={value}")
    assert_refused(rc, out, err, f".{key}:", "infinity is not allowed")


def test_params_listing_says_what_is_checked(capsys):
    for name in EXPERIMENTS:
        assert cli.main(["params", name]) == 0
        out = capsys.readouterr().out
        assert "; valid)" not in out, name
    rows = {r["name"]: r["allowed"] for r in EXPERIMENTS.get("io_formats").config.describe()}
    assert "existing folder" in rows["dataset"] and rows["seed"] == "any integer"
    assert rows["stage_dir"] == "any text" and rows["decode"] == "true or false"
    assert rows["workers"] == "a list, each between 0 and 256; non-empty"
    assert "byte size" in rows["shard_size"] or rows["shard_size"] == ">= 4096"
    rows = {r["name"]: r["allowed"] for r in EXPERIMENTS.get("comm_modes").config.describe()}
    assert "> 0" in rows["bucket_cap_mb"]
    rows = {r["name"]: r["allowed"] for r in EXPERIMENTS.get("environment").config.describe()}
    assert rows["sysfs_root"] == "an existing directory"


# -- did you mean --------------------------------------------------------------------------

def test_misspelled_experiment_gets_a_suggestion(capsys):
    rc, out, err = run_cli(capsys, "params", "colectives")
    assert_refused(rc, out, err, "unknown experiment 'colectives'", "registered: advisor, affinity, batch_scaling",
                   "did you mean 'collectives'?")


def test_misspelled_parameter_gets_a_suggestion(capsys):
    rc, out, err = run_cli(capsys, "run", "collectives", "-p", "itres=3")
    assert_refused(rc, out, err, "unknown parameter(s) ['itres']", "did you mean 'iters'?",
                   "valid parameters: ['nodes'")


@pytest.mark.parametrize("data,needles", [
    ({"tsks": [ENV_TASK]}, ["unknown key(s) ['tsks']", "did you mean 'tasks'?", "valid keys:"]),
    ({"tasks": [{"experiment": "environment", "paramz": {}}]}, ["tasks[0]", "did you mean 'params'?"]),
])
def test_unknown_suite_keys_get_a_suggestion(data, needles):
    with pytest.raises(SuiteError) as exc:
        parse_suite(data, "my.yaml")
    for needle in needles:
        assert needle in str(exc.value)


# -- numbers ------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [
    ("1e3", 1000), ("2.5e3", 2500), ("1E3", 1000), (" 42 ", 42), (3.0e3, 3000),
    ("123456789012345678901234567890", 123456789012345678901234567890), ("1e30", 10**30), (1e30, 10**30),
])
def test_integers_in_exponent_notation_are_exact(text, value):
    cfg = EXPERIMENTS.get("io_formats").config.from_dict({"seed": text})
    assert cfg.seed == value and type(cfg.seed) is int


@pytest.mark.parametrize("text", ["1.5", "1e-1", "inf", "nan", "1e999999999", True, "x"])
def test_non_integers_are_refused(text):
    with pytest.raises(ConfigError, match="IoFormatsConfig.seed"):
        EXPERIMENTS.get("io_formats").config.from_dict({"seed": text})


@pytest.mark.parametrize("text,value", [("1e6", 10**6), ("1.5K", 1536), ("2e3K", 2000 << 10), ("4M", 4 << 20)])
def test_byte_sizes_in_exponent_notation(text, value):
    assert EXPERIMENTS.get("collectives").config.from_dict({"max_bytes": text}).max_bytes == value


@pytest.mark.parametrize("text", ["1e-3", "1.0000001K", "inf"])
def test_fractional_byte_sizes_are_refused(text):
    with pytest.raises(ConfigError, match="CollectivesConfig.max_bytes"):
        EXPERIMENTS.get("collectives").config.from_dict({"max_bytes": text})


# -- usage and bounds ------------------------------------------------------------------------

def test_suite_usage_says_one_suite(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["suite", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "hpcbench suite [options] SUITE" in out and "hpcbench suite resume [options] RUN_DIR" in out
    assert "SUITE | resume RUN_DIR [" not in out


def test_huge_repeat_is_refused_at_once(tmp_path, capsys):
    path = write_suite(tmp_path, "repeat: 100000000\ntasks: [{experiment: environment}]\n")
    start = time.monotonic()
    rc, out, err = run_cli(capsys, "suite", path)
    assert time.monotonic() - start < 10
    assert_refused(rc, out, err, "s.yaml: repeat", "100000000", str(MAX_REPEAT))


def test_total_tasks_are_bounded_before_expanding():
    variants = {f"v{i}": {} for i in range(20)}
    with pytest.raises(SuiteError) as exc:
        parse_suite({"repeat": 1000, "tasks": [{"experiment": "environment", "variants": variants}]}, "my.yaml")
    assert "20 variant(s) x repeat 1000 = 20000 tasks" in str(exc.value)
    assert str(MAX_SUITE_TASKS) in str(exc.value)
