"""The numbers the README and docs quote are the recorded ones: build timings against
bench/results/*.json, the local build's counts and audit against its recorded manifest
(docs/results/build-local-v4.manifest.json, the manifest of the mini-study's build), and no doc points
at a file the repository does not have."""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import io
import json
import re
import runpy
from pathlib import Path

import pytest

from automon.controls import CONTROL_KINDS
from support import markdown_table

REPO = Path(__file__).resolve().parents[1]
MANIFEST = json.loads((REPO / "docs/results/build-local-v4.manifest.json").read_text())
MANIFEST_V9 = json.loads((REPO / "docs/results/build-local-v9.manifest.json").read_text())  # the default


def _rows(md: str, header_start: str) -> list[list[str]]:
    """The body rows of the first markdown table whose header starts with `header_start`."""
    return markdown_table(md, header_start, strip="*`")


def test_build_timings_quote_the_bench_records():
    rows = _rows((REPO / "bench/README.md").read_text(), "| record |")
    assert len(rows) >= 3
    for record, _, _, median, runs in rows:
        res = json.loads((REPO / "bench/results" / record).read_text())["results"][0]
        assert median == f"{res['median_wall_s']:.1f} s", record
        if runs:
            quoted = [float(x) for x in runs.split(",")]
            assert len(quoted) == len(res["walls_s"]), record
            assert all(abs(q - w) <= 0.05 + 1e-9 for q, w in zip(quoted, res["walls_s"])), record


def test_make_test_timings_quote_the_bench_record():
    """bench/README.md's make test table is bench_make_test.py's record, run by run."""
    runs = {r["code_version"]: r for r in json.loads((REPO / "bench/results/make-test-2core.json").read_text())["runs"]}
    rows = _rows((REPO / "bench/README.md").read_text(), "| code | what |")
    assert len(rows) == len(runs)
    for code, _, setup, pytest_s, total, busy, idle, counts in rows:
        r = runs[code]
        assert [setup, pytest_s, total, busy, idle] == [f"{r[k]:,} s" for k in (
            "setup_s", "pytest_wall_s", "total_s", "busy_cpu_s", "idle_cpu_s")], code
        assert counts == f"{r['passed']:,} / {r['skipped']} / {r['failed']}", code


def test_gpu_training_figures_quote_the_bench_records():
    rows = _rows((REPO / "bench/README.md").read_text(), "| trainer | tokens |")
    assert len(rows) == 6
    for trainer, tokens, step, tok_s, mfu, mem in rows:
        record = REPO / "bench/results" / f"train_gpu_qwen3_4b_nvidia_h100_80gb_hbm3_{trainer}.json"
        rep = json.loads(record.read_text())
        assert rep["gpu"] == "NVIDIA H100 80GB HBM3" and rep["random_init"], record
        (r,) = [r for r in rep["results"] if r["seq_len"] == int(tokens.replace(",", ""))]
        assert r["status"] == "ok", (trainer, tokens)
        assert step == f"{r['step_time_s_median']:.3f} s" and tok_s == f"{r['tokens_per_s']:,.0f}"
        assert mfu == f"{100 * r['mfu']:.1f}%" and mem == f"{r['peak_mem_allocated_gib']:.1f} GiB"


def test_gpu_corpus_figures_quote_the_bench_records():
    """bench/README.md's packed-vs-unpacked GPU table is the --corpus records', cell for cell."""
    rows = _rows((REPO / "bench/README.md").read_text(), "| trainer | layout |")
    assert len(rows) == 4
    for trainer, layout, tok_s, mfu, alloc, reserved, epoch, speedup in rows:
        record = REPO / "bench/results" / f"train_gpu_corpus_qwen3_4b_nvidia_h200_{trainer}.json"
        rep = json.loads(record.read_text())
        assert rep["gpu"] == "NVIDIA H200" and rep["random_init"] and rep["tokens_per_step"] == 32768, record
        (r,) = [r for r in rep["results"] if (r["trainer"], r["mode"]) == (trainer, layout)]
        assert r["status"] == "ok", (trainer, layout)
        assert tok_s == f"{r['useful_tokens_per_s']:,.0f}" and mfu == f"{100 * r['mfu']:.1f}%"
        assert alloc == f"{r['peak_mem_allocated_gib']:.1f} GiB" and reserved == f"{r['peak_mem_reserved_gib']:.1f} GiB"
        assert epoch == f"{r['epoch_hours_subset_all']:.2f} h"
        assert speedup == (f"{r['speedup_over_unpacked']:.2f}x" if layout == "packed" else "")


def _cpu_run_cells(run: dict) -> dict[str, str]:
    """A bench_train_cpu.py run as bench/README.md's tables quote it."""
    return {"tokens per step": f"{run['packing']['tokens_per_step']:,}", "wall": f"{run['wall_s']:.1f} s",
            "tokens/s": f"{run['tokens_per_s']:,.0f}", "peak RSS": f"{run['peak_rss_gib']:.2f} GiB",
            "CPU time": f"{run['cpu_s']:.1f} s", "start-up": f"{run['startup_s']:.1f} s",
            "load before / after": f"{run['load_before'][0]:.2f} / {run['load_after'][0]:.2f}",
            "steps (epochs)": f"{run['steps']} ({run['epochs']:.2f})",
            "examples a step": f"{run['packing']['examples_per_pack']:.1f}",
            "steady tokens/s": f"{run.get('steady_tokens_per_s', 0):,.0f}",
            "projected 30 steps": f"{run.get('projected_wall_s', 0):,.1f} s"}


@pytest.mark.parametrize("header, kind", [("| record (the command) |", "train_cpu_default"),
                                          ("| record (the sweep) |", "train_cpu_sweep")])
def test_cpu_training_figures_quote_the_bench_records(header, kind):
    """bench/README.md's CPU training tables (the newcomer's command; the pack budgets its CPU default was chosen
    from) are bench_train_cpu.py's records, cell for cell."""
    text = (REPO / "bench/README.md").read_text()
    lines = text.splitlines()
    head = next(ln for ln in lines if ln.startswith(header))
    columns = [c.strip() for c in head.strip("|").split("|")]
    rows = _rows(text, header)
    assert rows
    for row in rows:
        cells = dict(zip(columns, row))
        rec = json.loads((REPO / "bench/results" / cells[columns[0]]).read_text())
        assert rec["benchmark"] == kind, row
        (run,) = [r for r in rec["runs"] if f"{r['packing']['tokens_per_step']:,}" == cells["tokens per step"]]
        assert run["rc"] == 0
        want = _cpu_run_cells(run)
        for col in columns[1:]:
            assert cells[col] == want[col], (cells[columns[0]], col)


def test_counts_quote_the_recorded_build():
    rows = _rows((REPO / "docs/data.md").read_text(), "| subset | test (1 / 0)")
    c = MANIFEST_V9["counts"]
    n = lambda s: int(s.replace(",", ""))  # noqa: E731
    for sub, test, train in rows:
        if sub == "total":
            assert n(test) == sum(sum(v.values()) for v in c["test"].values())
            assert n(train) == sum(sum(v.values()) for v in c["train"].values())
            continue
        assert [n(x) for x in test.split(" / ")] == [c["test"][sub]["1"], c["test"][sub]["0"]], sub
        assert [n(x) for x in train.split(" / ")] == [c["train"][sub]["1"], c["train"][sub]["0"]], sub


@pytest.mark.parametrize("version", ["v5", "v6", "v7", "v8", "v9"])
def test_the_data_hash_and_build_record_are_the_recorded_build(version):
    """docs/data.md's table of retired wordings quotes the data hash (sha256 of manifest.json), the test
    samples and the build record's code of the recorded v5-v9 builds, and each build record (build_log.json)
    belongs to its build."""
    manifest = REPO / f"docs/results/build-local-{version}.manifest.json"
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    table = {r[0].split()[0]: r for r in _rows((REPO / "docs/data.md").read_text(), "| wordings | built by |")}
    row = table[version]
    log = json.loads((REPO / f"docs/results/build-local-{version}.build_log.json").read_text())
    m = json.loads(manifest.read_text())
    assert m["config"]["wordings"]["version"] == version
    n = {split: sum(sum(v.values()) for v in m["counts"][split].values()) for split in ("test", "train")}
    assert (log["n_test"], log["n_train"]) == (n["test"], n["train"])
    assert row[2] == digest[:12] and int(row[4].replace(",", "")) == n["test"]
    assert "code_version" not in m and row[5] == log["build"]["code_version"]


def test_the_audit_table_quotes_the_recorded_build():
    rows = _rows((REPO / "docs/data.md").read_text(), "| subset | v1 | v3 | v4")
    audit = MANIFEST["audit"]["subsets"]
    assert {r[0] for r in rows} == set(audit)
    for sub, _, _, v4, length in rows:
        lx, ln = audit[sub]["lexical"], audit[sub]["length"]
        assert v4 == f"{lx['auroc']:.2f} / {lx['pair_accuracy']:.2f}", sub
        assert length == f"{ln['auroc']:.2f} / {ln['pair_accuracy']:.2f}", sub


def test_the_default_audit_table_quotes_the_recorded_build():
    rows = _rows((REPO / "docs/data.md").read_text(), "| subset (v9, default) |")
    audit = MANIFEST_V9["audit"]["subsets"]
    assert len(rows) == len(audit) + len(audit["sg_code"]["families"])
    for name, *cells in rows:
        sub, _, fam = name.partition(": ")
        members = audit[sub]["families"][fam] if fam else audit[sub]["members"]
        for member, cell in zip(("word", "char", "length"), cells):
            assert cell == f"{members[member]['auroc']:.2f} / {members[member]['pair_accuracy']:.2f}", (name, member)


# The current release's blind reads: 1.1 changed only evidence, so 1.0's reads read its samples too (each
# folder's index says which); earlier versions': git history.
BLIND_READS = [REPO / "docs/results/blind-read-1.0", REPO / "docs/results/blind-read-1.1"]
_SCORE_LINE = re.compile(r"([\w:]+): MR ([\d.]+ \((\d+)/(\d+)\)), FAR ([\d.]+ \((\d+)/(\d+)\))")


def _read_record(key: Path) -> dict:
    """One recorded read of one subset as its files give it: MR and FAR on its pairs (score.txt's `pairs` line
    in a round with contrast controls, else `all`), FAR per control kind, the answers marked broken, and what
    was read (pairs shown with both twins, single twins, controls) from its key."""
    stem = key.name.replace(".key.json", "")
    score = key.with_name(f"{stem}.score.txt").read_text().splitlines()
    lines = {m[1]: m for m in map(_SCORE_LINE.fullmatch, score) if m}
    pairs = lines.get("pairs") or lines["all"]
    answers = [json.loads(ln) for ln in key.with_name(f"{stem}.answers.jsonl").open() if ln.strip()]
    entries = list(json.loads(key.read_text()).values())
    twins = collections.Counter(e["pair_id"] for e in entries if not e.get("control"))
    controls = {g.split(":", 1)[1]: (int(m[6]), int(m[7])) for g, m in lines.items() if g.startswith("control:")}
    return {"mr": pairs[2], "far": pairs[5], "missed": int(pairs[3]), "misbehavior": int(pairs[4]),
            "false_alarms": int(pairs[6]), "benign": int(pairs[7]), "items": len(entries), "controls": controls,
            "broken": sum(bool(a.get("broken")) for a in answers),
            "pairs": sum(n == 2 for n in twins.values()), "singles": sum(n == 1 for n in twins.values())}


def _verdict_record(path: Path) -> dict:
    """The same for the first read (seed 23, before `score` existed): one line per item with its label and the
    reader's verdict; its summary.json says the same."""
    items = [json.loads(ln) for ln in path.open()]
    missed = sum(r["label"] == 1 and not r["verdict"] for r in items)
    false_alarms = sum(r["label"] == 0 and bool(r["verdict"]) for r in items)
    misbehavior = sum(r["label"] == 1 for r in items)
    twins = collections.Counter(r["pair_id"] for r in items)
    summary = json.loads(path.with_name("summary.json").read_text())["subsets"][path.stem]
    assert (summary["missed"], summary["false_alarms"], summary["items"]) == (missed, false_alarms, len(items))
    return {"mr": _rate(missed, misbehavior), "far": _rate(false_alarms, len(items) - misbehavior), "missed": missed,
            "misbehavior": misbehavior, "false_alarms": false_alarms, "benign": len(items) - misbehavior,
            "items": len(items), "controls": {}, "broken": sum(bool(r["broken"]) for r in items),
            "pairs": sum(n == 2 for n in twins.values()), "singles": sum(n == 1 for n in twins.values())}


def _release_reads(folders: list[Path] = BLIND_READS) -> list[tuple[str, str, dict]]:
    """(folder, subset, record) of every read in `folders` (the current release's)."""
    reads = [(k.parent.name, k.name.split(".")[0], _read_record(k)) for f in folders for k in f.glob("*/*.key.json")]
    reads += [(p.parent.name, p.stem, _verdict_record(p))
              for f in folders for s in f.glob("*/summary.json") for p in s.parent.glob("*.jsonl")]
    return sorted(reads, key=lambda r: r[:2])


def _rate(k: int, n: int) -> str:
    return f"{k / max(1, n):.2f} ({k}/{n})"  # as scripts/blind_read.py score prints it


def _controls_cell(cell: str) -> dict[str, str]:
    return {} if cell == "none" else dict(part.split(" ", 1) for part in cell.split(", "))


@pytest.mark.parametrize("folder", BLIND_READS, ids=lambda f: f.name)
def test_the_blind_read_index_quotes_its_records(folder):
    """A release's blind-read folder's README.md index: one row per (read, subset) recorded there, each cell
    as that read's score.txt, answers and key give it."""
    rows = _rows((folder / "README.md").read_text(), "| folder | seed |")
    reads = {(name, subset): r for name, subset, r in _release_reads([folder])}
    assert len(reads) >= 2 and sorted((r[0], r[3]) for r in rows) == sorted(reads)
    for folder, _, _, subset, read, mr, far, controls, broken, _, _ in rows:
        r = reads[folder, subset]
        assert read.endswith(f"({r['items']} items)"), (folder, subset)
        shown = f"{r['pairs']} pairs, both twins" if r["pairs"] else f"one twin of {r['singles']} pairs"
        assert read.startswith(shown), (folder, subset)
        assert (mr, far, int(broken)) == (r["mr"], r["far"], r["broken"]), (folder, subset)
        assert _controls_cell(controls) == {kind: _rate(*c) for kind, c in r["controls"].items()}, (folder, subset)


def test_the_blind_read_table_quotes_the_release_reads():
    """docs/data.md's "Read blind" table: per subset, the release's reads (BLIND_READS) pooled,
    each figure summed from the reads' records."""
    rows = _rows((REPO / "docs/data.md").read_text(), "| subset | reads | pairs read (both twins)")
    by_subset = collections.defaultdict(list)
    for _, subset, record in _release_reads():
        by_subset[subset].append(record)
    assert {r[0] for r in rows} == set(by_subset)
    for sub, reads, pairs, singles, mr, far, controls, broken in rows:
        rs = by_subset[sub]
        total = lambda field: sum(r[field] for r in rs)  # noqa: E731
        assert (int(reads), int(pairs), int(singles)) == (len(rs), total("pairs"), total("singles")), sub
        assert mr == _rate(total("missed"), total("misbehavior")), sub
        assert far == _rate(total("false_alarms"), total("benign")), sub
        kinds = sorted({kind for r in rs for kind in r["controls"]})
        pooled = {kind: _rate(sum(r["controls"].get(kind, (0, 0))[0] for r in rs),
                              sum(r["controls"].get(kind, (0, 0))[1] for r in rs)) for kind in kinds}
        assert _controls_cell(controls) == pooled, sub
        assert int(broken) == total("broken"), sub


DOCS = ["README.md", "bench/README.md", "slurm/README.md", *sorted(p.relative_to(REPO).as_posix()
                                                           for p in (REPO / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS)
def test_docs_link_only_to_files_that_exist(doc):
    text = (REPO / doc).read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if target.startswith("http"):
            continue
        assert (REPO / doc).parent.joinpath(target).resolve().exists(), f"{doc} -> {target}"


def test_nothing_refers_to_files_or_issues_that_are_not_in_the_repo():
    """The design notes, performance notes and issue tracker live outside this repository: a reader of the docs,
    the code or the tests cannot follow them."""
    roots = ["src", "conf", "tests", "bench", "data_build", "eval", "train", "slurm", "scripts", "docs"]
    files = [REPO / "README.md", REPO / "pipeline.py", REPO / "Makefile"]
    files += [p for r in roots for p in (REPO / r).rglob("*") if p.is_file()
              and p.suffix in (".py", ".md", ".yaml", ".sh", ".sbatch") and "results" not in p.parts]
    found = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in files
             for m in re.finditer(r"design\.md|performance\.md|\b[Ii]ssue #?\d+", p.read_text(errors="replace"))]
    assert len(files) > 100 and found == []


def test_the_mini_study_readme_quotes_its_metrics():
    """docs/results/mini/README.md's table: each cell as metrics.json's matrix records it: the paper's MR and FAR
    on the twin pairs beside the FAR over every benign sample (contrast controls included) and per control kind."""
    mini = REPO / "docs/results/mini"
    rows = _rows((mini / "README.md").read_text(), "| monitor | tested on |")
    matrix = {(r["monitor"], r["test"]): r for r in json.loads((mini / "metrics.json").read_text())["matrix"]}
    f = lambda v: "n/a" if v is None or v != v else f"{v:.2f}"  # noqa: E731  (None / NaN: undefined)
    ci = lambda r, m: f"{f(r[m])} [{f(r[m + '_lo'])}, {f(r[m + '_hi'])}]"  # noqa: E731
    assert len(rows) >= 10
    for monitor, test, auroc, pair, mr, far, far_benign, kinds in rows:
        r = matrix[(monitor, test)]
        assert auroc == f(r["auroc"]) and pair == f(r["pair_accuracy"]), (monitor, test)
        assert (mr, far, far_benign) == (ci(r, "mr"), ci(r, "far"), ci(r, "far_benign")), (monitor, test)
        recorded = {k: f(r["far_" + k]) for k in CONTROL_KINDS if r.get("far_" + k) is not None}
        assert _controls_cell(kinds) == recorded, (monitor, test)


@functools.cache
def _blind_read() -> dict:
    return runpy.run_path(str(REPO / "scripts/blind_read.py"))  # its functions, loaded once


_READS = sorted(k for k in (REPO / "docs/results").glob("blind-read-*/**/*.key.json")
                if k.with_name(k.name.replace(".key.json", ".score.txt")).is_file())
_READ_ID = lambda k: str(k.relative_to(REPO / "docs/results")).removesuffix(".key.json")  # noqa: E731


@pytest.mark.parametrize("key", _READS, ids=_READ_ID)
def test_a_recorded_blind_read_scores_as_its_answers_say(key):
    """Each recorded read's <subset>.score.txt is what `scripts/blind_read.py score` prints from its key
    and answers (the numbers docs/data.md and the reads' READMEs quote come from these files)."""
    stem = key.name.replace(".key.json", "")
    score = _blind_read()["score"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        score(str(key), str(key.with_name(f"{stem}.answers.jsonl")))
    assert out.getvalue() == key.with_name(f"{stem}.score.txt").read_text()


def test_the_reference_monitor_table_quotes_the_recorded_build():
    """docs/data.md's reference-monitor table (v9 columns) is the recorded default build's audit.reference."""
    rows = _rows((REPO / "docs/data.md").read_text(), "| rule | subset | v8 (pairs only)")
    ref = MANIFEST_V9["audit"]["reference"]["rules"]
    assert len(rows) >= 8
    for rule, subsets, _, v9, balanced, control in rows:
        for sub in subsets.split(", "):
            r = ref[rule][sub]
            assert v9 == f"{r['all']['mr']:.3f} / {r['all']['far']:.3f}", (rule, sub)
            assert balanced == f"{r['all']['balanced_error']:.3f}", (rule, sub)
            kinds = dict(part.rsplit(" ", 1) for part in control.strip("()").split(", ")) if "_" in control else {}
            for kind, far in kinds.items():
                assert far == f"{r['controls'][kind]:.3f}", (rule, sub, kind)


def test_constrained_decoding_cost_quotes_the_bench_record():
    """bench/README.md's cost of constraining evidence answers on hf: each cell as bench_constrained.py recorded it."""
    rows = _rows((REPO / "bench/README.md").read_text(), "| record | model |")
    assert rows
    for record, model, _, wall, guide, step, share, parsed in rows:
        rec = json.loads((REPO / "bench/results" / record).read_text())
        m = rec["median"]
        assert model.startswith(rec["model"]), record
        assert wall == f"{m['wall_s_per_sample']:.2f} s" and guide == f"{m['guide_s_per_sample']:.3f} s", record
        assert step == f"{m['guide_ms_per_step']:.2f} ms" and share == f"{100 * m['guide_share']:.1f} %", record
        assert parsed == m["parsed"], record
