"""`run(cfg)`: build -> train every subset -> held-out matrix -> report, skipping what is current.

Each stage is a subprocess of its own command line, so what the pipeline runs is exactly what a
user could type (the commands are printed and logged under <state_dir>/logs/).
"""

from __future__ import annotations

import shlex
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from automon.config.pipeline import STAGES, PipelineConfig
from automon.pipeline import proc
from automon.pipeline.stages import (PipelineError, Check, build_cmd, check_build, check_eval, check_run,
                                     cpu_threads, entry_dirname, eval_cmd, resolved_config, run_adapters,
                                     train_cmd, train_multirun_cmd)
from automon.pipeline.state import STATE_FILE, State


def _typed(cfg: Any) -> PipelineConfig:
    if isinstance(cfg, PipelineConfig):
        return cfg
    from omegaconf import OmegaConf

    return OmegaConf.to_object(cfg)  # type: ignore[return-value]


def validate(c: PipelineConfig) -> None:
    bad = [s for s in list(c.stages) + list(c.force) if s not in STAGES]
    if bad:
        raise PipelineError(f"unknown stage(s) {bad}; stages are {', '.join(STAGES)}")
    if not c.train.subsets:
        raise PipelineError("train.subsets is empty; e.g. train.subsets=[safety_code,syco_qa]")
    names = [entry_dirname(e) for e in c.train.subsets]
    if len(set(names)) != len(names):
        raise PipelineError(f"train.subsets names a run twice: {c.train.subsets}")
    if c.train.parallel < 1:
        raise PipelineError(f"train.parallel must be >= 1, got {c.train.parallel}")


class Pipeline:
    def __init__(self, c: PipelineConfig, repo: Path) -> None:
        self.c = c
        self.repo = repo
        self.py = c.python or sys.executable
        self.env = proc.base_env(c.env)
        self.state_dir = Path(c.state_dir)
        self.logs = self.state_dir / "logs"
        self.state = State(self.state_dir / STATE_FILE)
        self.timings: dict[str, float] = {}
        self.summary: list[tuple[str, str, str]] = []  # (stage, outcome, detail)
        self.verb = "would run" if c.dry_run else "running"
        self._wants: dict[tuple, dict] = {}

    # ---------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        proc.say(f"[pipeline] {msg}")

    def _run(self, argv: list[str], log_name: str, prefix: str, env: dict | None = None) -> None:
        proc.check_stopped()
        self.say("$ " + shlex.join(argv))
        if self.c.dry_run:
            return
        log = self.logs / f"{log_name}.log"
        rc = proc.run_logged(argv, env or self.env, log, self.c.echo, prefix)
        proc.check_stopped()
        if rc != 0:
            raise PipelineError(f"{log_name} failed (exit status {rc}):\n  {shlex.join(argv)}\n"
                                f"log: {log}\n--- last lines ---\n{proc.tail(log)}")

    def _want(self, cmd: list[str]) -> dict:
        """The config the stage would run with (`--cfg job --resolve`), asked once per command."""
        key = tuple(cmd)
        if key not in self._wants:
            self._wants[key] = resolved_config(cmd, self.env, proc.capture)
        return self._wants[key]

    def preflight(self) -> None:
        """Ask every selected stage for its resolved config up front, side by side: a typo in any
        stage's settings stops the pipeline before the first stage runs."""
        c = self.c
        cmds = []
        if "build" in c.stages:
            cmds.append(build_cmd(c, self.py, self.repo, self._sources_root(write=False)))
        if "train" in c.stages:
            cmds += [train_cmd(c, self.py, self.repo, e) for e in c.train.subsets]
        if "eval" in c.stages:
            cmds.append(eval_cmd(c, self.py, self.repo))
        with ThreadPoolExecutor(max_workers=4) as ex:
            list(ex.map(self._want, cmds))

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

    def _manifest_sha(self) -> str | None:
        mf = Path(self.c.build.out) / "manifest.json"
        return self.state.sha256(mf) if mf.exists() else None

    # ---------------------------------------------------------------- stages
    def build(self) -> None:
        c = self.c
        t0 = time.perf_counter()
        root = self._sources_root()
        cmd = build_cmd(c, self.py, self.repo, root)
        chk = check_build(Path(c.build.out), self._want(cmd), self.state)
        if chk.current and "build" not in c.force:
            self._skip("build", chk.reason)
        else:
            why = "forced" if chk.current else chk.reason
            self.say(f"build: {self.verb} ({why})")
            overwrite = Path(c.build.out).exists()
            self._run(cmd + (["overwrite=true"] if overwrite else []), "build", "  build | ")
            self.summary.append(("build", "would run" if c.dry_run else "ran", why))
        if not c.dry_run:
            self.state.stages["build"] = {"out": c.build.out, "sources_root": root, "command": cmd,
                                          "manifest_sha256": self._manifest_sha(), "reason": chk.reason}
            self.state.save()
        self.timings["build"] = time.perf_counter() - t0

    def train(self) -> None:
        c = self.c
        t0 = time.perf_counter()
        msha = self._manifest_sha()
        if msha is None and not c.dry_run:
            raise PipelineError(f"no data build at {c.build.out}; run the build stage (stages=[build,train,eval])")
        cmds = {e: train_cmd(c, self.py, self.repo, e) for e in c.train.subsets}
        wants = {e: self._want(cmd) for e, cmd in cmds.items()}
        todo: list[tuple[str, Check]] = []
        runs_dir = Path(c.train.runs_dir)
        for e in c.train.subsets:
            chk = check_run(runs_dir / entry_dirname(e), wants[e], msha)
            if chk.current and "train" not in c.force:
                self._skip(f"train {entry_dirname(e)}", chk.reason)
            else:
                todo.append((e, chk))
        if todo:
            if c.train.launcher:
                self._train_launcher(todo)
            else:
                self._train_local(todo, cmds)
        extra = sorted(set(run_adapters(runs_dir)) - {entry_dirname(e) for e in c.train.subsets})
        if extra:
            self.say(f"note: {runs_dir} also holds runs {extra} (not in train.subsets); the evaluation "
                     "scores every adapter in it: move them elsewhere to leave them out")
        if not c.dry_run:
            self.state.stages["train"] = {
                "runs_dir": c.train.runs_dir, "data_manifest_sha256": msha,
                "runs": {name: {"adapter_sha256": self.state.dir_hash(a)}
                         for name, a in run_adapters(runs_dir).items()}}
            self.state.save()
        self.timings["train"] = time.perf_counter() - t0

    def _train_local(self, todo: list[tuple[str, Check]], cmds: dict[str, list[str]]) -> None:
        c = self.c
        env = dict(self.env)
        if c.train.parallel > 1 and len(todo) > 1 and "OMP_NUM_THREADS" not in self.env:
            env["OMP_NUM_THREADS"] = str(cpu_threads(min(c.train.parallel, len(todo))))

        def one(item: tuple[str, Check]) -> None:
            e, chk = item
            name = entry_dirname(e)
            why = "forced" if chk.current else chk.reason
            self.say(f"train {name}: {self.verb} ({why})")
            force = chk.overwrite or "train" in c.force
            self._run(cmds[e] + (["overwrite=true"] if force else []), f"train-{name}", f"  train {name} | ", env)
            self.summary.append((f"train {name}", "would run" if c.dry_run else "ran", why))

        if c.train.parallel <= 1 or len(todo) == 1:
            for item in todo:
                one(item)
            return
        with ThreadPoolExecutor(max_workers=c.train.parallel) as ex:
            futures = [ex.submit(one, item) for item in todo]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]

    def _train_launcher(self, todo: list[tuple[str, Check]]) -> None:
        c = self.c
        force = "train" in c.force
        groups = {True: [e for e, chk in todo if chk.overwrite or force],
                  False: [e for e, chk in todo if not (chk.overwrite or force)]}
        for overwrite, entries in groups.items():
            if not entries:
                continue
            for e, chk in todo:
                if e in entries:
                    self.say(f"train {entry_dirname(e)}: {'would submit' if c.dry_run else 'submitting'} via "
                             f"hydra/launcher={c.train.launcher} "
                             f"({'forced' if chk.current else chk.reason})")
            cmd = train_multirun_cmd(c, self.py, self.repo, entries, overwrite)
            self._run(cmd, "train-multirun", "  train | ")
            for e, chk in todo:
                if e in entries:
                    self.summary.append((f"train {entry_dirname(e)}", "would run" if c.dry_run else "ran",
                                         f"via {c.train.launcher}: " + ("forced" if chk.current else chk.reason)))
        if not c.dry_run:  # the launcher returns when every job has ended: check each run finished
            msha = self._manifest_sha()
            for e, _ in todo:
                d = Path(c.train.runs_dir) / entry_dirname(e)
                chk = check_run(d, self._want(train_cmd(c, self.py, self.repo, e)), msha)
                if not chk.current:
                    raise PipelineError(f"training run {d} did not finish: {chk.reason}; see {d}/train.log "
                                        f"and {c.train.runs_dir}/.submitit/")

    def eval(self) -> None:
        c = self.c
        t0 = time.perf_counter()
        msha = self._manifest_sha()
        adapters = {n: self.state.dir_hash(a) for n, a in run_adapters(Path(c.train.runs_dir)).items()}
        if not adapters and not c.dry_run:
            raise PipelineError(f"no trained adapters in {c.train.runs_dir}; run the train stage first")
        cmd = eval_cmd(c, self.py, self.repo)
        recorded = self.state.stages.get("eval", {})
        chk = check_eval(Path(c.eval.out), self._want(cmd), msha, adapters, recorded, self.state)
        if chk.current and "eval" not in c.force:
            self._skip("eval", chk.reason)
        else:
            why = "forced" if chk.current else chk.reason
            self.say(f"eval: {self.verb} ({why})")
            self._run(cmd, "eval", "  eval | ")
            self.summary.append(("eval", "would run" if c.dry_run else "ran", why))
            if not c.dry_run:
                out = Path(c.eval.out)
                self.state.stages["eval"] = {"out": c.eval.out, "command": cmd, "data_manifest_sha256": msha,
                                             "adapters": adapters,
                                             "metrics_sha256": self.state.sha256(out / "metrics.json")}
                self.state.save()
        self.timings["eval"] = time.perf_counter() - t0

    def _skip(self, stage: str, reason: str) -> None:
        self.say(f"{stage}: current, skipped ({reason})")
        self.summary.append((stage, "current", reason))

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
            mmd = out / "matrix.md"
            if mmd.exists():
                print("\n" + mmd.read_text().strip())
            print(f"\nreport: {out / 'report.md'}  (matrix.csv, matrix.md, heatmap.png, pareto.png, curves.png, "
                  f"metrics.json, monitors/<name>/)")
            print(f"data build: {c.build.out}   runs: {c.train.runs_dir}   "
                  f"pipeline record: {self.state.path}", flush=True)


def _write_synthetic(dest: Path, n: int, seed: int) -> None:
    """automon's synthetic source tree at `dest`, touching only files whose bytes differ (it is
    deterministic, so on a second run nothing is written and the build stays current)."""
    import filecmp
    import shutil
    import tempfile

    from automon.sources.synthetic import write_synthetic_root

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
    except PipelineError as e:
        print(f"[pipeline] error: {e}", file=sys.stderr)
        return 2
