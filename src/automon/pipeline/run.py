"""`run(cfg)`: build -> train every subset -> held-out matrix -> report, skipping what is current.

Each stage's config is composed here, in-process, from the overrides the pipeline derives for it
(automon.pipeline.stages); the stage itself says whether its output is current for that config.
A stage that has work left runs as a subprocess of its own command line, built from the same
overrides, so what the pipeline runs is exactly what a user could type (the commands are printed
and logged under <state_dir>/logs/).
"""

from __future__ import annotations

import filecmp
import json
import shlex
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from automon.config.pipeline import STAGES, PipelineConfig
from automon.errors import UserError, one_line
import automon.pipeline.proc as proc
from automon.evaluation.errors import EvalError
from automon.evaluation.monitors import sweep_adapters
from automon.outdir import ensure_writable_dir
from automon.pipeline.checks import check_eval_outputs, validate
from automon.pipeline.compose import hydra_for
from automon.pipeline.stages import (PipelineError, StageRun, build_overrides, compose_stage, cpu_threads,
                                     entry_dirname, eval_overrides, probe_overrides, train_multirun_cmd,
                                     train_overrides)
from automon.pipeline.state import STATE_FILE, State
from automon.sources.synthetic import write_synthetic_root
from automon.stage_status import Currency, Status


def _typed(cfg: Any) -> PipelineConfig:
    if isinstance(cfg, PipelineConfig):
        return cfg
    from omegaconf import OmegaConf

    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


class Pipeline:
    def __init__(self, c: PipelineConfig, repo: Path) -> None:
        self.c = c
        self.repo = repo
        self.py = c.python or sys.executable
        self.env = proc.base_env(c.env)
        self.state_dir = Path(c.state_dir)
        self.logs = self.state_dir / "logs"
        self.state = State(self.state_dir / STATE_FILE)
        self._state_lock = threading.Lock()
        self.timings: dict[str, float] = {}
        self.summary: list[tuple[str, str, str]] = []  # (stage, outcome, detail)
        self.verb = "would run" if c.dry_run else "running"
        self.build_run: StageRun | None = None
        self.train_runs: dict[str, StageRun] = {}  # subsets entry -> its run
        self.eval_runs: dict[str, StageRun] = {}  # "eval" and "eval <name>" per eval.also entry -> its run
        self.probe_runs: dict[str, StageRun] = {}  # "probe <features>-<subset>" -> its run (of backend=probe evals)
        # dry run only: what would have run before a later stage (that stage's answer can only be provisional)
        self.build_pending = False
        self.train_pending: list[str] = []

    # ---------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        proc.say(f"[pipeline] {msg}")

    def _starting(self, line: str) -> None:
        """Say a stage starts ('train sg_code: running (...)'), unless a signal has stopped the pipeline:
        a training run queued behind train.parallel said 'running' after Ctrl-C and stopped at once."""
        proc.check_stopped()
        self.say(line)

    def _run(self, argv: list[str], log_name: str, prefix: str, env: dict | None = None, *,
             name: str | None = None) -> None:
        proc.check_stopped()
        self.say("$ " + shlex.join(argv))
        if self.c.dry_run:
            return
        log = self.logs / f"{log_name}.log"
        rc = proc.run_logged(argv, env or self.env, log, self.c.echo, prefix)
        if proc.stopped_by():  # the stage's last line is not its 'running'
            ended = "finished" if rc == 0 else f"interrupted (exit status {rc})"
            self.say(f"{name or log_name}: {ended}; {proc.stopped_by()} stops the pipeline")
        proc.check_stopped()
        if rc != 0:
            if not self.c.echo:  # its last lines, as context above the one error line (echoed ones are there)
                self.say(f"{log_name}: the last lines of {log}:")
                print("\n".join("  " + ln for ln in proc.tail(log, 12).splitlines()), flush=True)
            how = f"killed by {proc.signal_name(-rc)}" if rc < 0 else f"exit status {rc}"
            raise PipelineError(f"{name or log_name} failed ({how}); its output is in {log}, and `{shlex.join(argv)}` "
                                "runs it alone; fix what it says and rerun the same pipeline command (finished "
                                "stages are kept)")

    def preflight(self) -> None:
        """Compose every selected stage's config up front: a typo in any stage's settings stops the
        pipeline before the first stage runs."""
        c = self.c
        if not c.dry_run:  # its record and logs: written after the first stage's work otherwise
            ensure_writable_dir(self.state_dir, "state_dir")
        with hydra_for(self.repo / "conf"):
            if "build" in c.stages:
                self.build_run = compose_stage("build", "build", build_overrides(c, self._sources_root(write=False)),
                                               self.py, self.repo)
            if "train" in c.stages:
                self.train_runs = {e: compose_stage("train", f"train {entry_dirname(e)}", train_overrides(c, e),
                                                    self.py, self.repo) for e in c.train.subsets}
            if "eval" in c.stages or "probe" in c.stages:  # the probes are those the evaluations score
                self.eval_runs = {"eval": compose_stage("eval", "eval", eval_overrides(c), self.py, self.repo)}
                for name in c.eval.also:
                    self.eval_runs[f"eval {name}"] = compose_stage("eval", f"eval {name}", eval_overrides(c, name),
                                                                   self.py, self.repo)
            if "eval" in c.stages:
                check_eval_outputs(c, self.eval_runs)
            if "probe" in c.stages:
                for r in self.eval_runs.values():
                    if r.cfg.backend.name != "probe":
                        continue
                    for subset in r.cfg.backend.train_subsets:
                        name = f"probe {r.cfg.backend.features}-{subset}"
                        run = compose_stage("probe", name, probe_overrides(r.cfg, subset), self.py, self.repo)
                        if name in self.probe_runs and self.probe_runs[name].overrides != run.overrides:
                            name = f"{name} ({r.name})"  # the same probe with other settings in another evaluation
                        self.probe_runs.setdefault(name, run)

    @property
    def eval_run(self) -> StageRun | None:
        return self.eval_runs.get("eval")

    def _sources_root(self, write: bool = True) -> str | None:
        s = self.c.sources
        if s.root is not None:
            if not Path(s.root).is_dir():
                raise PipelineError(f"sources.root={s.root} is not a directory")
            return s.root
        if not s.synthetic:
            return None  # the hub
        if write and not self.c.dry_run:
            _write_synthetic(Path(s.synthetic_dir), s.synthetic_n, s.synthetic_seed)
        return s.synthetic_dir

    def _status(self, r: StageRun) -> Status:
        """The stage's own answer; in a dry run whose build would run first, an answer against the
        build on disk (a byte-identical rebuild keeps it)."""
        if not self.build_pending:
            return r.status()
        if not (Path(self.c.build.out) / "manifest.json").exists():
            return Status(Currency.MISSING, "no data build yet; the build stage makes it first")
        st = r.status()
        return Status(st.state, f"{st.reason}; checked against the build on disk, which the build stage replaces")

    def _skip(self, r: StageRun, st: Status) -> None:
        self.say(f"{r.name}: current, skipped ({st.reason})")
        self.summary.append((r.name, "current", st.reason))

    def _why(self, stage: str, st: Status) -> str:
        return f"forced; {st}" if st.current and stage in self.c.force else str(st)

    def _record(self, key: str, r: StageRun, st: Status, outcome: str, cmd: list[str] | None) -> None:
        if self.c.dry_run:
            return
        with self._state_lock:  # parallel training runs record from their threads
            self.state.stages[key] = {"status": st.state.value, "reason": st.reason, "outcome": outcome,
                                      "command": cmd, "overrides": r.overrides}
            self.state.save()

    # ---------------------------------------------------------------- stages
    def build(self) -> None:
        c, r = self.c, self.build_run
        assert r is not None
        t0 = time.perf_counter()
        self._sources_root(write=True)
        st = r.status()
        cmd = None
        if st.current and "build" not in c.force:
            self._skip(r, st)
        else:
            why = self._why("build", st)
            self._starting(f"build: {self.verb} ({why})")
            # anything at build.out (another config's build, a damaged one, a forced rebuild) is replaced
            cmd = r.command(self.py, self.repo, *(["overwrite=true"] if st.state is not Currency.MISSING else []))
            self._run(cmd, "build", "  build | ", name="build")
            self.summary.append(("build", self.verb if c.dry_run else "ran", why))
            self.build_pending = c.dry_run
        self._record("build", r, st, "ran" if cmd else "current", cmd)
        self.timings["build"] = time.perf_counter() - t0

    def train(self) -> None:
        c = self.c
        t0 = time.perf_counter()
        todo: list[tuple[StageRun, Status]] = []
        for r in self.train_runs.values():
            st = self._status(r)
            if st.current and "train" not in c.force:
                self._skip(r, st)
                self._record(r.name, r, st, "current", None)
            else:
                todo.append((r, st))
        if todo:
            if c.train.launcher:
                self._train_launcher(todo)
            else:
                self._train_local(todo)
        self.train_pending = [r.name.removeprefix("train ") for r, _ in todo] if c.dry_run else []
        self._note_other_runs()
        self.timings["train"] = time.perf_counter() - t0

    def _overwrite(self, st: Status) -> bool:
        """Another config's or build's run must be replaced; a finished run is retrained only when forced."""
        return st.state is Currency.STALE or (st.current and "train" in self.c.force)

    def _train_local(self, todo: list[tuple[StageRun, Status]]) -> None:
        c = self.c
        env = dict(self.env)
        if c.train.parallel > 1 and len(todo) > 1 and "OMP_NUM_THREADS" not in self.env:
            env["OMP_NUM_THREADS"] = str(cpu_threads(min(c.train.parallel, len(todo))))

        def one(item: tuple[StageRun, Status]) -> None:
            r, st = item
            why = self._why("train", st)
            self._starting(f"{r.name}: {self.verb} ({why})")
            cmd = r.command(self.py, self.repo, *(["overwrite=true"] if self._overwrite(st) else []))
            self._run(cmd, r.name.replace(" ", "-"), f"  {r.name} | ", env, name=r.name)
            self.summary.append((r.name, self.verb if c.dry_run else "ran", why))
            self._record(r.name, r, st, "ran", cmd)

        if c.train.parallel <= 1 or len(todo) == 1:
            for item in todo:
                one(item)
            return
        with ThreadPoolExecutor(max_workers=c.train.parallel) as ex:
            futures = [ex.submit(one, item) for item in todo]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]

    def _train_launcher(self, todo: list[tuple[StageRun, Status]]) -> None:
        c = self.c
        entries = {r.name: e for e, r in self.train_runs.items()}
        for overwrite in (True, False):
            group = [(r, st) for r, st in todo if self._overwrite(st) == overwrite]
            if not group:
                continue
            for r, st in group:
                self._starting(f"{r.name}: {'would submit' if c.dry_run else 'submitting'} via "
                               f"hydra/launcher={c.train.launcher} ({self._why('train', st)})")
            cmd = train_multirun_cmd(c, self.py, self.repo, [entries[r.name] for r, _ in group], overwrite)
            self._run(cmd, "train-multirun", "  train | ", name=", ".join(r.name for r, _ in group))
            for r, st in group:
                why = f"via {c.train.launcher}: {self._why('train', st)}"
                self.summary.append((r.name, self.verb if c.dry_run else "ran", why))
                self._record(r.name, r, st, "ran", cmd)
        if not c.dry_run:  # the launcher returns when every job has ended: each run must now be current
            for r, _ in todo:
                st = r.status()
                if not st.current:
                    out = r.cfg.output_dir
                    raise PipelineError(f"training run {out} did not finish ({st}); see {out}/train.log "
                                        f"and {c.train.runs_dir}/.submitit/")

    def _note_other_runs(self) -> None:
        try:
            found = {name for name, _ in sweep_adapters(Path(self.c.train.runs_dir))}
        except EvalError:
            return
        extra = sorted(found - {entry_dirname(e) for e in self.c.train.subsets})
        if extra:
            self.say(f"note: {self.c.train.runs_dir} also holds runs {extra} (not in train.subsets); the "
                     "evaluation scores every adapter in it: move them elsewhere to leave them out")

    def probe(self) -> None:
        """Train the probes the evaluations with backend=probe score, each by train/probe.py, one after
        another (each encoder uses every core); a trained one is current and skipped."""
        c = self.c
        t0 = time.perf_counter()
        for r in self.probe_runs.values():
            st = self._status(r)
            if st.current and "probe" not in c.force:
                self._skip(r, st)
                self._record(r.name, r, st, "current", None)
                continue
            why = self._why("probe", st)
            self._starting(f"{r.name}: {self.verb} ({why})")
            cmd = r.command(self.py, self.repo)
            self._run(cmd, r.name.replace(" ", "-"), f"  {r.name} | ", name=r.name)
            self.summary.append((r.name, self.verb if c.dry_run else "ran", why))
            self._record(r.name, r, st, "ran", cmd)
        if self.probe_runs:
            self.timings["probe"] = time.perf_counter() - t0

    def eval(self) -> None:
        c = self.c
        t0 = time.perf_counter()
        for key, r in self.eval_runs.items():
            t1 = time.perf_counter()
            if self.train_pending:
                st = Status(Currency.STALE, f"the runs it scores are trained first: {', '.join(self.train_pending)}")
            else:
                st = self._status(r)
            cmd = None
            if st.current and "eval" not in c.force:
                self._skip(r, st)
            else:
                why = self._why("eval", st)
                self._starting(f"{key}: {self.verb} ({why})")
                cmd = r.command(self.py, self.repo)
                self._run(cmd, key.replace(" ", "_"), f"  {key} | ", name=key)
                self.summary.append((key, self.verb if c.dry_run else "ran", why))
            self._record(key, r, st, "ran" if cmd else "current", cmd)
            if len(self.eval_runs) > 1:
                self.timings[key] = time.perf_counter() - t1
        if c.eval.also and not c.dry_run:
            from automon.report.combined import combine, publish  # matplotlib: only when a combined report is made

            outs = {key.removeprefix("eval").strip() or c.monitor.prompt: Path(r.cfg.output_dir)
                    for key, r in self.eval_runs.items()}
            combine(outs, Path(c.eval.out) / "combined", f"{c.name}: every monitor of {len(outs)} evaluations")
            if c.eval.publish:
                publish(outs, Path(c.eval.out) / "combined", Path(c.eval.publish), self.state.path)
                self.say(f"published to {c.eval.publish}")
        self.timings["evals (all)" if len(self.eval_runs) > 1 else "eval"] = time.perf_counter() - t0

    # ---------------------------------------------------------------- all
    def run(self) -> None:
        t0 = time.perf_counter()
        self.preflight()
        self.timings["configs"] = time.perf_counter() - t0
        for stage in STAGES:
            if stage in self.c.stages:
                getattr(self, stage)()
        self.timings["total"] = time.perf_counter() - t0
        if not self.c.dry_run:
            self.state.data["timings_s"] = {k: round(v, 2) for k, v in self.timings.items()}
            self.state.data["experiment"] = self.c.name
            self.state.save()
        self.report()

    def report(self) -> None:
        c = self.c
        print("\n== pipeline summary", flush=True)
        for stage, outcome, detail in self.summary:
            print(f"  {stage:<22s} {outcome:<10s} {detail}")
        print("  timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()))
        out = Path(c.eval.out)
        if "eval" in c.stages and (out / "report.md").exists() and not c.dry_run:
            notes = json.loads((out / "metrics.json").read_text()).get("caveats") if (out / "metrics.json").exists() else []
            for note in notes or []:  # before the matrix: a smoke run's numbers are not findings
                print(f"\nCAVEAT: {note}")
            mmd = out / "combined" / "matrix.md" if c.eval.also else out / "matrix.md"
            if mmd.exists():
                print("\n" + mmd.read_text().strip())
            print(f"\nreport: {out / 'report.md'}  (matrix.csv, matrix.md, heatmap.png, pareto.png, curves.png, "
                  f"metrics.json, monitors/<name>/)")
            print(f"data build: {c.build.out}   runs: {c.train.runs_dir}   "
                  f"pipeline record: {self.state.path}", flush=True)


def _write_synthetic(dest: Path, n: int, seed: int) -> None:
    """automon's synthetic source tree at `dest`, touching only files whose bytes differ (it is
    deterministic, so on a second run nothing is written and the build stays current)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".synthetic-", dir=dest.parent) as tmp:
        write_synthetic_root(tmp, n=n, seed=seed)
        for src in sorted(Path(tmp).rglob("*")):
            if not src.is_file():
                continue
            dst = dest / src.relative_to(tmp)
            if dst.is_file() and filecmp.cmp(src, dst, shallow=False):
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)


def run(cfg: Any, repo: Path) -> int:
    """Entry point of pipeline.py. Returns the exit status (0 ok, 2 a problem to fix, 128+signal stopped)."""
    try:
        c = _typed(cfg)
        validate(c)
        proc.install_signal_forwarding()
        Pipeline(c, repo).run()
        return 0
    except proc.Stopped as e:
        print(f"[pipeline] {e}; rerun the same command to continue (finished work is kept)", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("[pipeline] interrupted; rerun the same command to continue (finished work is kept)", file=sys.stderr)
        return 130
    except (PipelineError, UserError) as e:
        print(f"error: {one_line(str(e))}", file=sys.stderr, flush=True)
        return 2
