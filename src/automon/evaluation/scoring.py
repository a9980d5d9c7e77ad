"""Score every monitor through the prediction cache (automon.backends.cache).

Each (monitor, prompt) is looked up first; only what is missing is scored, in chunks of
`backend.chunk_size` prompts, the cache flushed after each, so a killed run loses at most one chunk
and a run with nothing missing loads no model at all. Monitors load what they need (the judge
backend, a probe) only when they have something to score. A fused monitor scores last: it reads its
judge's predictions from here and is not cached itself (its inputs are).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, MutableMapping, Sequence

from tqdm.auto import tqdm

from automon.backends import make_judge
from automon.config.eval import HoldoutConfig
from automon.data.io import load_build
from automon.errors import disk_full
from automon.backends.cache import PredictionCache
from automon.evaluation.completeness import mark_unparseable
from automon.evaluation.errors import EvalError
from automon.evaluation.inputs import Inputs
from automon.monitors import FusedMonitor, Monitor, Prediction, Rendered, Resources
from automon.prompts import get_template

log = logging.getLogger("automon.evaluation")


def cache_key(c: HoldoutConfig, m: Monitor, prompt_kind: str) -> dict[str, Any]:
    """Everything besides the prompt itself that changes a prediction: what the backend says
    identifies its model and settings, plus the adapter, prompt and shots (the same for every backend)."""
    return {
        "backend": c.backend.name,
        **c.backend.cache_identity(c.model, prompt_kind, m.name if m.artifact_dir else None),
        # spelled "adapter" as before Monitor.artifact_hash was renamed: another key would orphan every
        # cached prediction
        "adapter": m.artifact_hash, "prompt": c.prompt.name,
        "shots": c.shots, "shots_seed": c.shots_seed if c.shots else None,
        "enable_thinking": c.model.enable_thinking,
    }


@dataclass
class Scored:
    predictions: dict[str, dict[str, Prediction]]   # monitor name -> sample id -> prediction (test + reference)
    caches: dict[str, PredictionCache]               # monitor name -> its cache (a fused monitor: its judge's)
    n_computed: int = 0
    n_cached: int = 0

    def of(self, m: Monitor, items: Sequence[Rendered]) -> list[Prediction]:
        return [self.predictions[m.name][it.sample.id] for it in items]


def score_monitors(c: HoldoutConfig, monitors: Sequence[Monitor], inputs: Inputs, tm: MutableMapping[str, float],
                   judge_factory: Callable[..., Any] = make_judge) -> Scored:
    """Every monitor's predictions on the test items and its calibration items. `judge_factory(cfg,
    prompt kind, adapters, tokenizer)` builds the judge backend (a test may wrap it)."""
    prompt_kind = get_template(c.prompt.name).kind
    own = [m for m in monitors if not isinstance(m, FusedMonitor)]
    # The stressed prompts (stress=) come after every clean one, in chunks of their own: the clean
    # prompts are batched exactly as without stress, so their scores are too.
    wanted = [{m.name: [*inputs.items, *inputs.calibration(m)] for m in own},
              {m.name: inputs.stressed_items() for m in own}]
    caches = {m.name: PredictionCache(inputs.cache_root, cache_key(c, m, prompt_kind)) for m in own}
    scored = Scored({m.name: {} for m in own}, caches)
    todo: list[list[tuple[Monitor, Rendered]]] = [[], []]
    for part, want in zip(todo, wanted):
        for m in own:
            for it in want[m.name]:
                hit = caches[m.name].get(it.sample.id, it.prompt_sha)
                if hit is None:
                    part.append((m, it))
                else:
                    scored.predictions[m.name][it.sample.id] = Prediction(p_yes=hit.p_yes, text=hit.text, mass=hit.mass)
    total = sum(len(v) for want in wanted for v in want.values())
    n_todo = sum(len(part) for part in todo)
    scored.n_cached, scored.n_computed = total - n_todo, n_todo
    if scored.n_cached:
        log.info("%d of %d predictions come from the cache in %s", scored.n_cached, total, inputs.cache_root)
    for m in {id(m): m for part in todo for m, _ in part}.values():  # before the model loads
        caches[m.name].require_writable()
    if n_todo:
        _score_missing(c, prompt_kind, todo, scored, inputs, tm, total, judge_factory)
    for f in monitors:
        if isinstance(f, FusedMonitor):
            t0 = time.perf_counter()
            f.judge_scores = lambda items, j=f.judge: scored.of(j, items)  # type: ignore[misc]
            scored.predictions[f.name] = dict(zip((it.sample.id for it in inputs.items), f.score(inputs.items)))
            if inputs.stressed:  # scored apart, so the clean scores are exactly those without stress
                stressed = inputs.stressed_items()
                scored.predictions[f.name].update(zip((it.sample.id for it in stressed), f.score(stressed)))
            scored.caches[f.name] = caches[f.judge.name]  # type: ignore[union-attr]
            tm["detectors_s"] += time.perf_counter() - t0
    return scored


def _score_missing(c: HoldoutConfig, prompt_kind: str, todo: list[list[tuple[Monitor, Rendered]]],
                   scored: Scored, inputs: Inputs, tm: MutableMapping[str, float], total: int,
                   judge_factory: Callable[..., Any]) -> None:
    """Load the monitors that have something to score, then score it chunk by chunk (no chunk spans
    two parts of `todo`), caching as it comes."""
    needed = list({id(m): m for part in todo for m, _ in part}.values())
    t0 = time.perf_counter()
    resources = Resources(make_judge=lambda adapters: judge_factory(c, prompt_kind, adapters, inputs.tokenizer),
                          adapters=[m.lora for m in needed if m.lora is not None],
                          train_split=lambda build_dir: load_build(build_dir).samples("train"))
    for m in needed:
        m.load(resources)
    tm["load_s"] += time.perf_counter() - t0
    bar = tqdm(total=total, initial=scored.n_cached, unit="sample", desc=f"{c.backend.name} {c.prompt.name}",
               disable=not c.progress, dynamic_ncols=True, smoothing=0.1)
    t_loop = time.perf_counter()
    try:
        chunks = [part[i:i + c.backend.chunk_size] for part in todo for i in range(0, len(part), c.backend.chunk_size)]
        for chunk in chunks:
            for parts in _by_engine(chunk):  # monitors that share an engine are scored in one call
                for (m, items), out in zip(parts, type(parts[0][0]).score_together(parts)):
                    if c.backend.unparseable_fails:
                        out = [_as_prediction(mark_unparseable(p, prompt_kind, c.prompt.name)) for p in out]  # type: ignore[arg-type]
                    for it, p in zip(items, out):
                        scored.predictions[m.name][it.sample.id] = p
                    scored.caches[m.name].put_many((it.sample.id, it.prompt_sha, p) for it, p in zip(items, out))
            bar.update(len(chunk))
    except OSError as e:
        if not disk_full(e):
            raise
        raise EvalError(f"cannot write the prediction cache: {e.strerror}", e.filename or str(inputs.cache_root),
                        "free some space (or quota) there, or set cache_dir= elsewhere, and rerun the same "
                        "command: the predictions cached so far are kept") from e
    finally:
        bar.close()
        tm["score_loop_s"] += time.perf_counter() - t_loop
        resources.close()
    tm["model_s"] = resources.timing.model_s
    tm["tokenize_s"] = resources.timing.tokenize_s
    tm["prompt_tokens"] = resources.timing.prompt_tokens


def _by_engine(chunk: Sequence[tuple[Monitor, Rendered]]) -> list[list[tuple[Monitor, list[Rendered]]]]:
    """The chunk's (monitor, its items) parts, grouped by the engine that scores them (in order)."""
    groups: dict[Any, dict[str, tuple[Monitor, list[Rendered]]]] = {}
    for m, it in chunk:
        key = (type(m), id(m.engine)) if m.engine is not None else (type(m), id(m))
        groups.setdefault(key, {}).setdefault(m.name, (m, []))[1].append(it)
    return [list(parts.values()) for parts in groups.values()]


def _as_prediction(r: Any) -> Prediction:
    return r if isinstance(r, Prediction) else Prediction(p_yes=r.p_yes, text=r.text, mass=r.mass, error=r.error)

