"""Whether an evaluation is complete: failed requests, answers a failing server cannot have meant,
and the comparison with results already in the output directory (a worse run never replaces them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from automon.backends import JudgeResult
from automon.prompts import parse_answer

UNPARSEABLE = "unparseable answer"


def mark_unparseable(res: JudgeResult, kind: str, prompt: str) -> JudgeResult:
    """For backends whose unreadable answers are failures (BackendConfig.unparseable_fails): an answer
    the prompt's parser cannot read, and with no P(yes) to score, becomes a failed request (not
    cached, sent again by the next run, counted against max_failed_share). The text is kept."""
    if res.error is not None or (kind == "direct" and res.p_yes is not None):
        return res
    if parse_answer(res.text or "", prompt).pred is not None:
        return res
    return JudgeResult(p_yes=res.p_yes, text=res.text, mass=res.mass,
                       error=f"{UNPARSEABLE} {str(res.text or '')[:120]!r} (the {prompt} prompt cannot read it)")


def request_summary(rows: Sequence[dict], max_failed_share: float) -> dict[str, Any]:
    """How many of an evaluation's requests the backend failed on, and whether that is few enough for
    the evaluation to count as complete (metrics.json "requests"; report.md opens with a warning if not)."""
    errors = [r["error"] for r in rows if r["error"] is not None]
    n = len(rows)
    return {"n": n, "failed": len(errors), "failed_share": round(len(errors) / n, 6) if n else 0.0,
            "max_failed_share": max_failed_share, "complete": len(errors) <= max_failed_share * n,
            "first_error": errors[0][:300] if errors else None}


def requests_complete(doc: dict[str, Any]) -> bool:
    """Whether a monitor's requests were answered often enough: the clean test set's and, with
    stress=, the stressed sets' (metrics.json "robustness" "requests")."""
    stressed = (doc.get("robustness") or {}).get("requests") or {}
    return bool(doc["requests"]["complete"] and stressed.get("complete", True))


def worst(docs: dict[str, dict]) -> str:
    """'monitor' (failed/n) with the largest share of failed requests, for the error line."""
    name, d = max(docs.items(), key=lambda kv: kv[1]["requests"]["failed_share"])
    return f"monitor {name} ({d['requests']['failed']}/{d['requests']['n']})"


def incomplete_fix(first_error: str | None) -> str:
    """What to do about an incomplete evaluation, by what its requests failed on."""
    rerun = ("rerun the same command: failed requests are not cached and are sent again, answered ones come "
             "from the cache")
    if (first_error or "").startswith(UNPARSEABLE):
        return ("the server answered text the prompt cannot read: check that backend.model_name is a chat model "
                "that follows the prompt (and backend.base_url the server you mean), then " + rerun
                + "; or raise max_failed_share to score such answers by the unparseable policy")
    return "fix the backend (is the server up? backend.base_url?) and " + rerun


def earlier_failures(out_dir: Path, manifest_hash: str, n_test: int, c: Any) -> int | None:
    """Failed requests of the results already in `out_dir`, if they evaluate the same thing (same data,
    test samples, prompt and shots); None when there are none to compare with."""
    try:
        doc = json.loads((out_dir / "metrics.json").read_text(encoding="utf-8"))
        data = doc.get("data") or {}
        same = (data.get("manifest_hash") == manifest_hash and data.get("n_test") == n_test
                and doc.get("prompt") == c.prompt.name and doc.get("shots") == c.shots)
        if not same:
            return None
        if "requests" in doc:
            return int(doc["requests"]["failed"])
        if "monitors" in doc:  # a sweep written before "requests" was recorded
            return sum(int(m["overall"].get("errors", 0)) for m in doc["monitors"].values())
        return int((doc.get("overall") or {}).get("errors", 0))
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None  # unreadable earlier results are nothing to keep
