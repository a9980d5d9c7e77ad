"""Every bad input to the data build ends as one line `error: ...` with exit status 2, as early as it
is knowable, and leaves nothing half-done (docs/errors.md lists the inputs tried).

Builds run against copies of a synthetic source tree with one fault planted each. In-process tests
check the error's content and that no recipe ran (the source checks come first); the subprocess
tests run data_build/build.py itself to check the single line, the exit status and the traceback.
"""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import REPO, SMALL_TEST, build_cfg
from automon.data.io import _lock, sha256_file
from automon.data.build import BuildError, run_build
from automon.errors import UserError
from automon.sources import SOURCES, SourceError, read_source
from automon.sources.synthetic import write_synthetic_root

BUILD = REPO / "data_build" / "build.py"


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> Path:
    return write_synthetic_root(tmp_path_factory.mktemp("raw"), n=40)


@pytest.fixture
def root(synth, tmp_path) -> Path:
    """A fresh copy to plant a fault in, laid out like the real one (shared/data/raw)."""
    return shutil.copytree(synth, tmp_path / "shared" / "data" / "raw")


def _cfg(root: Path, out: Path, *overrides: str):
    return build_cfg([f"sources.root={root}", f"out={out}", *SMALL_TEST, *overrides])


def _hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".")) if parent.is_dir() else []


def fails(root: Path, tmp_path: Path, caplog, *overrides: str, out: Path | None = None) -> str:
    """The build's error message; checks it is one line, that no recipe ran and nothing was written."""
    out = out or tmp_path / "builds" / "b"
    caplog.set_level(logging.INFO, logger="automon.data")
    with pytest.raises(UserError) as e:
        run_build(_cfg(root, out, *overrides))
    msg = str(e.value)
    assert "\n" not in msg
    assert not [r for r in caplog.records if r.getMessage().endswith(" items")], "a recipe ran before the check"
    assert not out.exists() and not _hidden(out.parent), "a failed build left files behind"
    return msg


def _load(path: Path) -> list[dict]:
    if path.suffix == ".json":
        return json.loads(path.read_text())
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _save(path: Path, rows: list[dict]) -> None:
    """Rows back in the file's format; row i is at line (JSONL) or record index (JSON) i + 1."""
    if path.suffix == ".json":
        path.write_text(json.dumps(rows, indent=1))
        return
    text = "".join(json.dumps(r) + "\n" for r in rows)
    path.write_bytes(gzip.compress(text.encode()) if path.suffix == ".gz" else text.encode())


def _rewrite(path: Path, edit) -> None:
    _save(path, edit(_load(path)))


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BUILD), *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


def one_line_error(r: subprocess.CompletedProcess) -> str:
    """The error line of a run that must have failed the convention's way."""
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and r.stderr.rstrip().splitlines()[-1] == errors[0], r.stderr[-3000:]
    return errors[0]


# --- compressed and encoded files ---------------------------------------------------------------

def test_truncated_gzip_names_the_file_one_line_no_traceback(root, tmp_path):
    gz = root / "humaneval" / "HumanEval.jsonl.gz"
    gz.write_bytes(gz.read_bytes()[: gz.stat().st_size // 2])
    r = cli(f"sources.root={root}", f"out={tmp_path / 'b'}", *SMALL_TEST)
    line = one_line_error(r)
    assert "truncated or corrupt gzip" in line and str(gz) in line
    assert " items" not in r.stderr, "the file is read before any recipe runs"
    assert not (tmp_path / "b").exists() and not _hidden(tmp_path)


def test_debug_env_shows_the_traceback(root, tmp_path):
    gz = root / "humaneval" / "HumanEval.jsonl.gz"
    gz.write_bytes(b"not gzip at all")
    r = cli(f"sources.root={root}", f"out={tmp_path / 'b'}", *SMALL_TEST, env={"AUTOMON_DEBUG": "1"})
    assert r.returncode == 2 and "Traceback" in r.stderr and "SourceError" in r.stderr
    assert r.stderr.rstrip().splitlines()[-1].startswith("error: truncated or corrupt gzip")


def test_undecodable_bytes_name_file_and_line(root, tmp_path, caplog):
    p = root / "gsm8k" / "train.jsonl"
    lines = p.read_bytes().split(b"\n")
    lines[6] = lines[6][:20] + b"\xff\xfe" + lines[6][20:]
    p.write_bytes(b"\n".join(lines))
    msg = fails(root, tmp_path, caplog)
    assert f"{p}:7" in msg and "0xff" in msg and "sources.on_malformed=skip" in msg
    m = run_build(_cfg(root, tmp_path / "skip", "subsets=[syco_reasoning]", "sources.on_malformed=skip"))
    assert m["malformed_rows_skipped"] == {"gsm8k": 1}


def test_undecodable_bytes_in_a_csv_name_file_and_line(root, tmp_path, caplog):
    p = root / "truthfulqa" / "TruthfulQA.csv"
    lines = p.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"Misconceptions", b"Misconcep\xfftions")
    p.write_bytes(b"\n".join(lines))
    msg = fails(root, tmp_path, caplog)
    assert f"{p}:4" in msg and "not UTF-8" in msg


# --- wrong types, bad ids, duplicates ------------------------------------------------------------

def test_wrong_type_in_a_row_names_file_and_line(root, tmp_path, caplog):
    rows = _load(root / "mbpp" / "mbpp.jsonl")
    rows[11]["test_list"] = 5
    _save(root / "mbpp" / "mbpp.jsonl", rows)
    msg = fails(root, tmp_path, caplog)
    assert f"{root / 'mbpp' / 'mbpp.jsonl'}:12" in msg
    assert "'test_list' must be a list of strings, got int" in msg


@pytest.mark.parametrize("source,field,bad", [
    ("mbpp", "task_id", "abc"),          # MBPP ids are positive integers
    ("mbpp", "task_id", 0),
    ("humaneval", "task_id", "abc"),     # HumanEval/<n>
    ("cyberseceval_instruct", "prompt_id", -1),
    ("securityeval", "ID", "../../etc/passwd"),
])
def test_bad_ids_are_rejected_with_file_and_line(synth, tmp_path, source, field, bad):
    root = shutil.copytree(synth, tmp_path / "raw")
    path = next(root.glob(SOURCES[source].local[0]))
    rows = _load(path)
    rows[2][field] = bad
    _save(path, rows)
    with pytest.raises(SourceError, match=re.escape(f"{path}:3")) as e:
        list(read_source(source, root))
    assert field in str(e.value) and repr(bad) in str(e.value)


@pytest.mark.parametrize("source", [s for s, spec in SOURCES.items() if spec.id_field])
def test_a_duplicated_row_names_both_lines_and_the_id(synth, tmp_path, source):
    root = shutil.copytree(synth, tmp_path / "raw")
    path = next(root.glob(SOURCES[source].local[0]))
    rows = _load(path)
    _save(path, rows + [rows[4]])
    n = len(rows) + 1
    with pytest.raises(SourceError) as e:
        list(read_source(source, root))
    msg = str(e.value)
    the_id = rows[4][SOURCES[source].id_field]
    assert f"duplicate {SOURCES[source].id_field} {the_id!r}, first at {path}:5 ({path}:{n})" in msg, msg
    counts: dict = {}
    assert len(list(read_source(source, root, "skip", counts))) == n - 1
    assert counts == {source: 1}


def test_a_duplicated_mbpp_row_fails_before_any_recipe(root, tmp_path, caplog):
    _rewrite(root / "mbpp" / "mbpp.jsonl", lambda rows: rows[:20] + [rows[7]] + rows[20:])
    msg = fails(root, tmp_path, caplog)
    assert re.search(r"duplicate task_id 8, first at .*mbpp\.jsonl:8 \(.*mbpp\.jsonl:21\)", msg), msg


# --- empty and missing files ---------------------------------------------------------------------

@pytest.mark.parametrize("rel,content,expect", [
    ("truthfulqa/TruthfulQA.csv", b"", "empty CSV file"),
    ("truthfulqa/TruthfulQA.csv", b"Type,Category,Question,Best Answer,Correct Answers,Incorrect Answers,Source\n",
     "has no rows"),
    ("mmlu/dev/synthetic_history_dev.csv", b"", "has no rows"),
    ("gsm8k/test.jsonl", b"\n\n", "has no rows"),
    ("caa-sycophancy/test_dataset.json", b"", "empty file"),
])
def test_empty_files_are_named(root, tmp_path, caplog, rel, content, expect):
    (root / rel).write_bytes(content)
    msg = fails(root, tmp_path, caplog)
    assert expect in msg and str(root / rel) in msg


def test_a_missing_file_is_named(root, tmp_path, caplog):
    (root / "mbpp" / "mbpp.jsonl").unlink()
    msg = fails(root, tmp_path, caplog)
    assert "no file matches mbpp/mbpp.jsonl" in msg and "sources.root" in msg


def test_an_unreachable_hub_is_one_error(monkeypatch):
    import datasets

    def offline(*a, **k):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (OfflineModeIsEnabled)")
    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(SourceError, match=r"load source gsm8k from the hub.*OfflineModeIsEnabled.*sources\.root"):
        list(read_source("gsm8k", None))


# --- changed sources: the checksum list ----------------------------------------------------------

def _write_sums(root: Path, base: Path, where: Path) -> Path:
    """A sha256sum list of every file under root, with paths relative to base (as shared/ has it)."""
    lines = [f"{sha256_file(p)}  {p.relative_to(base).as_posix()}" for p in sorted(root.rglob("*")) if p.is_file()]
    where.write_text("\n".join(lines) + "\n")
    return where


def _append_row(root: Path) -> Path:
    p = root / "gsm8k" / "train.jsonl"
    with open(p, "a") as f:
        f.write(json.dumps({"question": "How many?", "answer": "1 + 1 = <<1+1=2>>2\n#### 2"}) + "\n")
    return p


@pytest.mark.parametrize("beside", [False, True])
def test_a_changed_source_file_fails_against_sha256sums(root, tmp_path, caplog, beside):
    # In the root with paths relative to shared/ (the real layout), or beside the root.
    sums = (_write_sums(root, root.parent, root.parent / "SHA256SUMS") if beside else
            _write_sums(root, root.parents[1], root / "SHA256SUMS"))
    changed = _append_row(root)
    msg = fails(root, tmp_path, caplog)
    assert f"source file gsm8k/train.jsonl differs from {sums}" in msg and str(changed) in msg
    assert "sources.on_checksum=warn" in msg


def test_checksum_warn_builds_and_the_manifest_records_it(root, tmp_path, caplog):
    sums = _write_sums(root, root.parents[1], root / "SHA256SUMS")
    ok = run_build(_cfg(root, tmp_path / "clean", "subsets=[syco_reasoning]"))
    assert ok["source_checksums"] == {"on_mismatch": "fail", "differences": {}}  # the files' sha256 are in sources
    record = json.loads((tmp_path / "clean" / "build_log.json").read_text())["build"]
    assert record["source_checksums_list"] == str(sums)  # where the list lay: the machine's, not the data's
    changed = _append_row(root)
    caplog.set_level(logging.WARNING, logger="automon.data")
    m = run_build(_cfg(root, tmp_path / "warned", "subsets=[syco_reasoning]", "sources.on_checksum=warn"))
    diff = m["source_checksums"]["differences"]
    assert m["source_checksums"]["on_mismatch"] == "warn" and list(diff) == ["gsm8k/train.jsonl"]
    # The manifest's per-file sha256 is the hash taken while reading (not a second read).
    assert diff["gsm8k/train.jsonl"]["actual"] == sha256_file(changed)
    assert m["sources"]["gsm8k"]["files"]["gsm8k/train.jsonl"] == sha256_file(changed)
    assert any("differs from" in r.getMessage() for r in caplog.records)


def test_a_source_file_missing_from_the_list_or_a_bad_list_line_fails(root, tmp_path, caplog):
    sums = _write_sums(root, root.parents[1], root / "SHA256SUMS")
    lines = sums.read_text().splitlines()
    sums.write_text("\n".join(line for line in lines if "mbpp.jsonl" not in line) + "\n")
    assert "mbpp/mbpp.jsonl is not in" in fails(root, tmp_path, caplog)
    sums.write_text("\n".join(lines[:3] + ["deadbeef  data/raw/x.jsonl"] + lines[3:]) + "\n")
    assert f"{sums}:4" in fails(root, tmp_path, caplog)
    msg = fails(root, tmp_path, caplog, f"sources.checksums={tmp_path / 'nope'}")
    assert "no checksum list at" in msg


# --- config values and sizes ---------------------------------------------------------------------

@pytest.mark.parametrize("override,expect", [
    ("sources.on_malformed=bogus", "use one of: stop, skip"),
    ("sources.on_checksum=bogus", "use one of: fail, warn"),
    ("disjoint.on_conflict=bogus", "use one of: drop, fail"),
    ("sg_code.visible_tests=0", "sg_code.visible_tests=0 is out of range (sg_code.visible_tests); use a value >= 1"),
    ("sg_code.timeout_s=0", "is out of range (sg_code.timeout_s); use a positive number of CPU seconds"),
    ("+sources.revisions.gsm8kk=abc", "unknown source(s) ['gsm8kk']"),
    ("test.safety_qa=-1", "test.safety_qa=-1 is out of range"),
    ("scale=0", "scale=0 is out of range"),
    ("disjoint.threshold=1.5", "disjoint.threshold=1.5"),
    ("subsets=[]", "subsets is empty"),
])
def test_bad_config_values_fail_at_start_with_the_valid_ones(root, tmp_path, caplog, override, expect):
    (root / "humaneval" / "HumanEval.jsonl.gz").write_bytes(b"broken")  # never reached: config comes first
    assert expect in fails(root, tmp_path, caplog, override)


def test_more_test_pairs_than_available_says_how_many(synth, tmp_path):
    with pytest.raises(BuildError, match=r"safety_qa: only 40 test pairs available, 41 requested"):
        run_build(_cfg(synth, tmp_path / "b", "subsets=[safety_qa]", "test.safety_qa=41"))
    assert not _hidden(tmp_path) and not (tmp_path / "b").exists()


def test_hydra_errors_are_one_line_too(tmp_path):
    line = one_line_error(cli(f"out={tmp_path / 'b'}", "test.safety_qa=abc"))
    assert "test.safety_qa=abc" in line and "could not be converted to Integer" in line
    line = one_line_error(cli(f"out={tmp_path / 'b'}", "disjoint.treshold=0.5"))
    assert "treshold" in line and "valid keys here: ngram, num_perm, threshold" in line
    line = one_line_error(cli("sources.on_malformed=bogus", f"out={tmp_path / 'b'}"))
    assert line == ("error: sources.on_malformed='bogus' is not a valid value (sources.on_malformed); "
                    "use one of: stop, skip")


# --- output paths --------------------------------------------------------------------------------

def test_an_unwritable_out_fails_before_any_work(root, tmp_path, caplog):
    (root / "humaneval" / "HumanEval.jsonl.gz").write_bytes(b"broken")  # would fail later: out comes first
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    msg = fails(root, tmp_path, caplog, out=blocker / "sub" / "b")
    assert "cannot create the directory for out=" in msg and "choose an out=" in msg
    msg = fails(root, tmp_path, caplog, out=blocker / "b")
    assert f"cannot write in {blocker}: Not a directory" in msg
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        assert "cannot write in" in fails(root, tmp_path, caplog, out=ro / "b")
    deep = tmp_path / "new" / "deeper" / "b"
    fails(root, tmp_path, caplog, out=deep)
    assert not (tmp_path / "new").exists(), "a failed build removes the parent dirs it created"


def test_an_out_that_is_a_symlink_loop_fails_before_any_work(root, tmp_path, caplog):
    """out= a symlink loop: the build noticed only when it moved the finished build in."""
    (root / "humaneval" / "HumanEval.jsonl.gz").write_bytes(b"broken")  # would fail later: out comes first
    (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
    (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
    for out in (tmp_path / "loop-a", tmp_path / "loop-a" / "b"):
        msg = fails(root, tmp_path, caplog, out=out)
        assert "symlink loop" in msg and "choose another out=" in msg, msg


def test_concurrent_writability_checks_of_shared_parents_all_succeed(tmp_path):
    """check-then-mkdir without exist_ok: 20 of 400 concurrent calls failed (a parallel pipeline once)."""
    from concurrent.futures import ThreadPoolExecutor

    from automon.data.io import ensure_writable_dir

    def one(i):
        return ensure_writable_dir(tmp_path / f"p{i % 3}" / "runs" / f"r{i}", "output_dir")

    with ThreadPoolExecutor(16) as ex:
        done = list(ex.map(one, range(400)))
    assert len(done) == 400


def test_ctrl_c_during_the_build_is_one_line_and_leaves_nothing(synth, tmp_path):
    """SIGINT to the whole process group (the build and its recipe workers) in the middle of the recipes
    was a KeyboardInterrupt traceback; now one line, exit 130, and no temp dir left."""
    out = tmp_path / "b"
    p = subprocess.Popen([sys.executable, str(BUILD), f"sources.root={synth}", f"out={out}", *SMALL_TEST],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = []
    for line in p.stdout:
        log.append(line)
        if "INFO sg_qa:" in line:  # the recipes are running
            os.killpg(p.pid, signal.SIGINT)
            break
    log.append(p.stdout.read())
    text = "".join(log)
    assert p.wait(timeout=120) == 130 and "Traceback" not in text, text[-3000:]
    assert text.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)")
    assert not out.exists() and not _hidden(tmp_path)


def test_a_full_disk_while_writing_is_one_error_and_leaves_nothing(synth, tmp_path, monkeypatch):
    import automon.data.io as io

    def full(path, samples):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    monkeypatch.setattr(io, "write_jsonl", full)
    with pytest.raises(BuildError, match=r"cannot write the build: No space left on device \(.*test\.jsonl\); free"):
        run_build(_cfg(synth, tmp_path / "b", "subsets=[safety_qa]"))
    assert list(tmp_path.iterdir()) == []


def test_overwrite_refuses_a_directory_that_is_not_a_build(root, tmp_path, caplog):
    mine = tmp_path / "home"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(BuildError, match="not a data build"):
        run_build(_cfg(root, mine, "overwrite=true"))
    assert (mine / "notes.txt").read_text() == "keep me"


def test_leftovers_of_killed_builds_are_removed_and_dirs_follow_the_umask(synth, tmp_path):
    out = tmp_path / "b"
    junk = tmp_path / ".b.tmp-dead1"
    junk.mkdir()
    (junk / "train.jsonl").write_text("half")
    old = tmp_path / ".b.old-dead2"  # killed mid-swap: the previous build sits in old/d, out is gone
    (old / "d").mkdir(parents=True)
    (old / "d" / "manifest.json").write_text("{}")
    (tmp_path / ".other.tmp-x").mkdir()  # another out's: not ours to touch
    mask = os.umask(0o027)
    try:
        run_build(_cfg(synth, out, "subsets=[safety_qa]", "overwrite=true"))
    finally:
        os.umask(mask)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.tmp-x", "b"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o750
    assert stat.S_IMODE((out / "train.jsonl").stat().st_mode) == 0o640


def test_a_running_build_of_the_same_out_is_not_disturbed(synth, tmp_path):
    live = tmp_path / ".b.tmp-live"
    live.mkdir()
    fd = _lock(live)  # what a build holds while it runs
    try:
        with pytest.raises(UserError, match="another build is writing"):
            run_build(_cfg(synth, tmp_path / "b", "subsets=[safety_qa]"))
        assert live.is_dir()
    finally:
        os.close(fd)


def _wait_for(pred, proc: subprocess.Popen, timeout: float = 240) -> None:
    t0 = time.monotonic()
    while not pred():
        assert proc.poll() is None, f"build ended (status {proc.returncode}) before the point to stop it at"
        assert time.monotonic() - t0 < timeout
        time.sleep(0.005)


def test_sigkill_while_writing_then_a_rerun_leaves_no_leftovers(synth, tmp_path):
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, str(BUILD), f"sources.root={synth}", f"out={out}", *SMALL_TEST],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: any(tmp_path.glob(".b.tmp-*/train.jsonl")), proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
    assert not out.exists() and _hidden(tmp_path), "the kill should leave the temp dir (the case under test)"
    run_build(_cfg(synth, out, "subsets=[safety_qa]"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_sigterm_cleans_up_at_once(synth, tmp_path):
    out = tmp_path / "b"
    proc = subprocess.Popen([sys.executable, str(BUILD), f"sources.root={synth}", f"out={out}", *SMALL_TEST],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: any(tmp_path.glob(".b.tmp-*")), proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_a_parent_made_and_removed_again_by_another_check_is_retried(tmp_path, monkeypatch):
    """mkdir's EEXIST for a directory another check had made and already removed again: is_dir() is
    False then, and the check failed with "File exists" (CI: 1 of 400 concurrent calls)."""
    from pathlib import Path

    from automon.data.io import ensure_writable_dir

    target = tmp_path / "p" / "runs"
    real_mkdir, raced = Path.mkdir, []

    def mkdir(self, *a, **kw):
        if self == target and not raced:  # the other check made it, and removed it again, just now
            raced.append(self)
            raise FileExistsError(17, "File exists", str(self))
        return real_mkdir(self, *a, **kw)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    assert ensure_writable_dir(target / "r1", "output_dir") == target / "r1"
    assert raced and not (tmp_path / "p").exists()


def test_a_stop_right_after_the_temp_dir_is_made_leaves_nothing(tmp_path, monkeypatch):
    """SIGTERM (SystemExit) between the temp dir's mkdir and its path reaching atomic_dir: mkdtemp's
    directory was left (test_sigterm_cleans_up_at_once, once under load)."""
    from automon.data.io import atomic_dir

    real_mkdir = os.mkdir

    def mkdir_then_stop(path, *a, **kw):
        real_mkdir(path, *a, **kw)
        if ".b.tmp-" in str(path):
            raise SystemExit(143)

    monkeypatch.setattr(os, "mkdir", mkdir_then_stop)
    with pytest.raises(SystemExit), atomic_dir(tmp_path / "x" / "b"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_stop_in_the_middle_of_the_swap_puts_the_previous_build_back_at_once(tmp_path, monkeypatch):
    """Between moving the previous `out` aside and moving the new one in, `out` is missing: a stop there
    left it missing until the next build put it back; now the stopped one puts it back itself."""
    from automon.data.io import atomic_dir

    out = tmp_path / "b"
    out.mkdir()
    (out / "manifest.json").write_text("previous")
    real_replace = os.replace

    def replace(src, dst):
        if Path(src).name.startswith(".b.tmp-"):
            raise SystemExit(143)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(SystemExit), atomic_dir(out, overwrite=True) as tmp:
        (tmp / "manifest.json").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"] and (out / "manifest.json").read_text() == "previous"
