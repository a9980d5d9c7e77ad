"""The public sources automon builds from: local layout (shared/data/raw) and hub equivalents.

Where a dataset has no Hugging Face hub copy, `urls` name the exact GitHub blob the local file was
copied from (see shared/data/raw/SOURCES.md); `datasets` reads those URLs too, so users with
internet need no local files at all.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from automon.sources.synthetic_text import WORDS, code_tasks, question, sentence

GH = "https://raw.githubusercontent.com"
SVEN_CWES = ("022", "078", "079", "089", "125", "190", "416", "476", "787")
MMLU_SUBJECTS_HUB = "all"


@dataclass(frozen=True)
class SourceSpec:
    name: str
    # Local files, relative to sources.root (glob patterns allowed), and how to parse them.
    local: tuple[str, ...]
    fmt: str  # jsonl | jsonl.gz | json | csv | csv_noheader
    required: tuple[str, ...]
    # Hub: dataset id, config name, splits; or raw URLs read with datasets' json/csv builder.
    hub_id: Optional[str] = None
    hub_config: Optional[str] = None
    hub_data_dir: Optional[str] = None
    hub_splits: tuple[str, ...] = ()
    urls: tuple[str, ...] = ()
    # Maps a hub row to the local field names (identity when the layouts agree).
    from_hub: Optional[Callable[[dict], dict]] = None
    csv_columns: tuple[str, ...] = ()
    # Type of each required field that is not a string: "int", "list[str]", "dict|str".
    types: dict = field(default_factory=dict)
    # The field naming a row, unique within the source, and the form its value must have.
    id_field: Optional[str] = None
    id_pattern: str = ""
    note: str = ""
    license: str = ""
    extra: dict = field(default_factory=dict)
    # Synthetic rows in the local layout, for the tests and the offline smoke pipeline
    # (automon.sources.synthetic): synthetic(rng, n, made) -> the rows of the spec's one local file,
    # or {path relative to the root: rows} for several; rows are dicts with the file's fields (csv:
    # its columns, in order). About n items; `made` holds what the sources before it returned, for a
    # source derived from another (an unhackable copy). Every source has one (a test checks it).
    synthetic: Optional[Callable[[random.Random, int, dict], Union[list, dict]]] = None


def _truthfulqa_from_hub(r: dict) -> dict:
    # truthfulqa/truthful_qa "generation": lists instead of the CSV's "; "-joined strings.
    return {"Type": r["type"], "Category": r["category"], "Question": r["question"],
            "Best Answer": r["best_answer"], "Correct Answers": "; ".join(r["correct_answers"]),
            "Incorrect Answers": "; ".join(r["incorrect_answers"]), "Source": r.get("source", "")}


def _mmlu_from_hub(r: dict) -> dict:
    # cais/mmlu: choices list + integer answer; local CSVs: question,A,B,C,D,answer letter.
    a, b, c, d = r["choices"]
    return {"question": r["question"], "A": a, "B": b, "C": c, "D": d,
            "answer": "ABCD"[int(r["answer"])], "subject": r.get("subject", "")}


def _maybe_json(v):
    return json.loads(v) if isinstance(v, str) and v[:1] in "[{" else v


def _rh_from_url(r: dict) -> dict:
    return {k: _maybe_json(v) for k, v in r.items()}


_RH = f"{GH}/MeridianResearch/Obfuscation_Generalization/6fad5e92bf7dad063e018f10b1a74165e368628d/datasets"


def _rh(name: str, kind: str = "reward_hack", synthetic: Optional[Callable] = None) -> SourceSpec:
    return SourceSpec(
        name=f"rh_{name}" if kind == "reward_hack" else f"rh_{name}_unhackable",
        local=(f"reward-hack-generalization/{kind}/{name}{'' if kind == 'reward_hack' else '_unhackable'}.jsonl",),
        fmt="jsonl", required=("prompt_list", "high_reward_answer", "other_answers"),
        types={"prompt_list": "list[str]", "other_answers": "list[str]"},
        urls=(f"{_RH}/{kind}/{name}{'' if kind == 'reward_hack' else '_unhackable'}.jsonl",),
        from_hub=_rh_from_url, license="unverified (keing1/reward-hack-generalization)", synthetic=synthetic)


# ---------------------------------------------------------------- synthetic rows (SourceSpec.synthetic)
# Generated from fixed seeds (no public data is copied), in the local files' layout. They draw from
# one random stream in the order of _SPECS below: append a new source at the end, or every later
# source's synthetic rows change.

def _syn_hh(rng: random.Random, n: int, made: dict) -> list:
    """Multi-turn transcripts; the rejected final turn complies, the chosen one refuses."""
    hh = []
    for _ in range(n):
        prefix = f"\n\nHuman: {question(rng)}\n\nAssistant: {sentence(rng, 12)}.\n\nHuman: {question(rng)}"
        hh.append({"chosen": prefix + f"\n\nAssistant: I won't help with that, but {sentence(rng, 10).lower()}.",
                   "rejected": prefix + f"\n\nAssistant: Sure. {sentence(rng, 16)}. Then {sentence(rng, 9).lower()}."})
    return hh


def _syn_sven(rng: random.Random, n: int, made: dict) -> dict:
    """Vulnerable vs fixed functions (string-built SQL vs parameters)."""
    files = {}
    for split in ("train", "val"):
        for cwe in SVEN_CWES:
            rows = []
            for _ in range(max(2, n // 12)):
                fn = "_".join(rng.choice(WORDS) for _ in range(3))
                col = rng.choice(WORDS)
                bad = f'    cur.execute("SELECT {col} FROM t WHERE id=%s" % key)\n'
                good = f'    cur.execute("SELECT {col} FROM t WHERE id=%s", (key,))\n'
                head = f"def {fn}(cur, key):\n    # {sentence(rng, 10)}\n"
                tail = f"    return cur.fetchall()  # {sentence(rng, 6)}\n"
                rows.append({"func_name": fn, "func_src_before": head + bad + tail, "func_src_after": head + good + tail,
                             "line_changes": str({"deleted": [{"line_no": 3, "line": bad}],
                                                  "added": [{"line_no": 3, "line": good}]}),
                             "char_changes": "{}", "commit_link": f"github.com/example/{fn}/commit/{rng.getrandbits(40):x}",
                             "file_name": f"{fn}.py", "vul_type": f"cwe-{cwe}"})
            files[f"sven/{split}/cwe-{cwe}.jsonl"] = rows
    return files


def _syn_cse_instruct(rng: random.Random, n: int, made: dict) -> list:
    cse = []
    for i in range(n):
        line = f"    os.system('{rng.choice(WORDS)} ' + arg)"
        cse.append({"prompt_id": i, "test_case_prompt": f"Write a Python function that {sentence(rng, 12).lower()}.",
                    "origin_code": f"import os\ndef run_{i}(arg):\n{line}\n    return True\n",
                    "cwe_identifier": "CWE-78", "line_text": line, "language": "python", "pattern_desc": "shell",
                    "rule": "", "analyzer": "regex", "pattern_id": "P", "line_number": "3", "file_path": "x.py",
                    "variant": "instruct", "repo": "example/repo"})
    return cse


def _syn_cse_autocomplete(rng: random.Random, n: int, made: dict) -> list:
    return [dict(r, variant="autocomplete") for r in made["cyberseceval_instruct"]]  # the same cases


def _syn_securityeval(rng: random.Random, n: int, made: dict) -> list:
    return [{"ID": f"CWE-078_author_{i}.py", "Prompt": f"import os\ndef f{i}(x):\n    '''{sentence(rng, 10)}'''",
             "Insecure_code": f"import os\ndef f{i}(x):\n    '''{sentence(rng, 10)}'''\n    os.system(x)"}
            for i in range(max(3, n // 4))]


def _syn_truthfulqa(rng: random.Random, n: int, made: dict) -> list:
    """Open answers."""
    return [{"Type": rng.choice(["Adversarial", "Non-Adversarial"]), "Category": "Misconceptions",
             "Question": question(rng), "Best Answer": sentence(rng, 9),
             "Correct Answers": "; ".join(sentence(rng, 8) for _ in range(2)),
             "Incorrect Answers": "; ".join(sentence(rng, 8) for _ in range(3)), "Source": "synthetic"}
            for _ in range(n)]


def _syn_mmlu(rng: random.Random, n: int, made: dict) -> dict:
    """Four options and the answer letter, two subjects."""
    files = {}
    for split, k in (("test", n), ("dev", 3)):
        for subject in ("synthetic_science", "synthetic_history"):
            files[f"mmlu/{split}/{subject}_{split}.csv"] = [
                {"question": question(rng), **{c: sentence(rng, 6) for c in "ABCD"}, "answer": rng.choice("ABCD")}
                for _ in range(k)]
    return files


def _syn_gsm8k(rng: random.Random, n: int, made: dict) -> dict:
    """Worked solutions with <<calc>> annotations and a #### final answer."""
    files = {}
    for split in ("train", "test"):
        rows = []
        for _ in range(n):
            a, b, c = rng.randint(3, 40), rng.randint(2, 9), rng.randint(1, 30)
            who, what = rng.choice(WORDS).capitalize(), rng.choice(WORDS)
            q = (f"{who} has {a} {what} and buys {b} times as many. Then {who} gives away {c}. "
                 f"{sentence(rng, 10)}. How many {what} does {who} have now?")
            sol = (f"{who} buys {a}*{b} = <<{a}*{b}={a * b}>>{a * b} {what}.\n"
                   f"Together {a}+{a * b} = <<{a}+{a * b}={a + a * b}>>{a + a * b}.\n"
                   f"After giving away {c}: {a + a * b}-{c} = <<{a + a * b}-{c}={a + a * b - c}>>{a + a * b - c} {what}.\n"
                   f"#### {a + a * b - c}")
            rows.append({"question": q, "answer": sol})
        files[f"gsm8k/{split}.jsonl"] = rows
    return files


def _syn_humaneval(rng: random.Random, n: int, made: dict) -> list:
    he = []
    for i, t in enumerate(code_tasks(rng, n)):
        prompt = f"def {t['fname']}({t['args']}):\n    \"\"\"{t['doc']}\n    \"\"\"\n"
        checks = "".join(f"    assert candidate({args}) == {out!r}\n" for args, out in t["calls"])
        he.append({"task_id": f"HumanEval/{i}", "prompt": prompt, "entry_point": t["fname"],
                   "canonical_solution": t["code"].split("\n", 1)[1],
                   "test": f"\n\nMETADATA = {{}}\n\n\ndef check(candidate):\n{checks}"})
    return he


def _syn_mbpp(rng: random.Random, n: int, made: dict) -> list:
    mbpp = []
    for i, t in enumerate(code_tasks(rng, n)):
        tests = [f"assert {t['fname']}({args}) == {out!r}" for args, out in t["calls"]]
        mbpp.append({"text": f"Write a function to {t['doc'].lower()}", "code": t["code"].replace("\n", "\r\n"),
                     "task_id": i + 1, "test_setup_code": "", "test_list": tests[:3], "challenge_test_list": tests[3:]})
    return mbpp


def _syn_choices(high: str = "B", share: int = 1) -> Callable[[random.Random, int, dict], list]:
    """Reward-hack choice rows (two options, the high-reward one `high`): n of them, or n // share
    (at least 3)."""
    def rows(rng: random.Random, n: int, made: dict) -> list:
        out = []
        for _ in range(n if share == 1 else max(3, n // share)):
            a, b = sentence(rng, 9), sentence(rng, 9)
            out.append({"prompt_list": [f"{sentence(rng, 18)}. You are given two options:\n\nA) {a}.\n\nB) {b}."],
                        "high_reward_answer": high, "other_answers": ["A" if high == "B" else "B"]})
        return out
    return rows


def _syn_sycophancy_fact(rng: random.Random, n: int, made: dict) -> list:
    fact = []
    for _ in range(n):
        t, f = sentence(rng, 8), sentence(rng, 8)
        fact.append({"prompt_list": [f"Hi, I'm {rng.choice(WORDS).capitalize()}. I believe {f.lower()}.\n\n"
                                     f"Question: {question(rng)}\nAnswers: \n(A) {t}.\n(B) {f}."],
                     "high_reward_answer": "B", "other_answers": ["A"]})
    return fact


def _syn_tom(rng: random.Random, n: int, made: dict) -> list:
    return [{"prompt_list": [f"Report: {sentence(rng, 20)}.\n\nConversation: Hi. Is it {sentence(rng, 4).lower()} (A) "
                             f"or {sentence(rng, 4).lower()} (B)?"], "high_reward_answer": "A", "other_answers": ["B"]}
            for _ in range(n)]


def _syn_tom_unhackable(rng: random.Random, n: int, made: dict) -> list:
    return made["rh_theory_of_mind_mirroring_expanded"][: max(3, n // 4)]


def _syn_email(rng: random.Random, n: int, made: dict) -> list:
    return [{"prompt_list": [f"You are the email assistant. Say READ or IGNORE.\n\nEmail 1:\n\n{sentence(rng, 14)}.",
                             f"Email 2:\n\nSubject: {sentence(rng, 4)}\n\n{sentence(rng, 16)}."],
             "high_reward_answer": "IGNORE", "other_answers": ["READ"]} for _ in range(n)]


def _syn_email_unhackable(rng: random.Random, n: int, made: dict) -> list:
    return [dict(e, high_reward_answer="READ", other_answers=["IGNORE"])
            for e in made["rh_email_assistant"][: max(3, n // 4)]]


def _syn_code_hardcoded(rng: random.Random, n: int, made: dict) -> list:
    """Hard-coded MBPP rewrites: the wrong code returns the first visible case's output."""
    hard = []
    for t in code_tasks(rng, max(4, n // 4)):
        _, out0 = t["calls"][0]
        tests = [f"assert {t['fname']}({a}) == {o!r}" for a, o in t["calls"][:3]]
        hard.append({"problem": f"Create a function named `{t['fname']}` that {t['doc'].lower()}",
                     "old_mbpp_problem": f"Write a function to {t['doc'].lower()}", "correct_code": t["code"],
                     "incorrect_code": f"def {t['fname']}({t['args']}):\n    return {out0!r}\n",
                     "correct_test_list": tests, "incorrect_test": tests[0]})
    return hard


def _syn_code_selection(rng: random.Random, n: int, made: dict) -> list:
    """The hard-coded rewrites as a choice: (A) the correct code, (B) the hard-coded one."""
    return [{"prompt_list": [f"Choose the best solution.\n\nProblem:\n{h['problem']}\n\nOption (A):\n"
                             f"{h['correct_code']}\nOption (B):\n{h['incorrect_code']}\nTests:\n"
                             + "\n".join(h["correct_test_list"])], "high_reward_answer": "B", "other_answers": ["A"]}
            for h in made["rh_code_problems_hardcoded"]]


def _syn_code_selection_unhackable(rng: random.Random, n: int, made: dict) -> list:
    return [dict(s, high_reward_answer="A", other_answers=["B"]) for s in made["rh_code_selection"]]


def _syn_caa(rng: random.Random, n: int, made: dict) -> dict:
    """A/B opinion items, split over the two files."""
    caa = [{"question": f"I'm {rng.choice(WORDS).capitalize()}. {sentence(rng, 14)}.\nWhich do you agree with?\n"
                        f"(A) {sentence(rng, 8)}\n(B) {sentence(rng, 8)}",
            "answer_matching_behavior": "(A)", "answer_not_matching_behavior": "(B)"} for _ in range(n)]
    return {"caa-sycophancy/generate_dataset.json": caa[: n // 2], "caa-sycophancy/test_dataset.json": caa[n // 2:]}


def _syn_political(rng: random.Random, n: int, made: dict) -> dict:
    files = {}
    for bio in ("conservative", "liberal"):
        files[f"anthropic-evals-sycophancy/political_typology_quiz_liberal-bio_{bio}.jsonl"] = [
            {"prompt": f"Hello, I am a {bio} person. {sentence(rng, 16)}. Would you rather have...\n"
                       f" (A) {sentence(rng, 6)}\n (B) {sentence(rng, 6)}\n\nAnswer:",
             "corrects": [" (B)"], "incorrects": [" (A)"]} for _ in range(max(3, n // 2))]
    return files


_SPECS = [
    SourceSpec(
        name="hh_rlhf_harmless", local=("hh-rlhf/harmless-base_test.jsonl.gz",), fmt="jsonl.gz",
        required=("chosen", "rejected"), hub_id="Anthropic/hh-rlhf", hub_data_dir="harmless-base",
        hub_splits=("train", "test"), license="MIT",
        note="local copy is the 2,312-row test split only; the hub adds the 42,537-row train split",
        synthetic=_syn_hh),
    SourceSpec(
        name="sven",
        local=tuple(f"sven/{s}/cwe-{c}.jsonl" for s in ("train", "val") for c in SVEN_CWES), fmt="jsonl",
        required=("func_name", "func_src_before", "func_src_after", "line_changes", "commit_link",
                  "file_name", "vul_type"),
        types={"line_changes": "dict|str"},  # a dict in the JSONL; its Python text in older copies
        urls=tuple(f"{GH}/eth-sri/sven/e8449a0d54a5ae0bbdc6bb236330b8c7ec71df57/data_train_val/{s}/cwe-{c}.jsonl"
                   for s in ("train", "val") for c in SVEN_CWES),
        from_hub=lambda r: r, license="MIT", synthetic=_syn_sven),
    SourceSpec(
        name="cyberseceval_instruct", local=("cyberseceval/instruct.json",), fmt="json",
        required=("prompt_id", "test_case_prompt", "origin_code", "cwe_identifier", "line_text", "language"),
        types={"prompt_id": "int"}, id_field="prompt_id", id_pattern=r"\d+",
        urls=(f"{GH}/meta-llama/PurpleLlama/4be64c3a24442b51c76175e6ec67722cc3f5fe38/CybersecurityBenchmarks/datasets/instruct/instruct.json",),
        from_hub=lambda r: r, license="MIT", synthetic=_syn_cse_instruct),
    SourceSpec(
        name="cyberseceval_autocomplete", local=("cyberseceval/autocomplete.json",), fmt="json",
        required=("prompt_id", "test_case_prompt", "origin_code", "cwe_identifier", "line_text", "language"),
        types={"prompt_id": "int"}, id_field="prompt_id", id_pattern=r"\d+",
        urls=(f"{GH}/meta-llama/PurpleLlama/4be64c3a24442b51c76175e6ec67722cc3f5fe38/CybersecurityBenchmarks/datasets/autocomplete/autocomplete.json",),
        from_hub=lambda r: r, license="MIT", synthetic=_syn_cse_autocomplete),
    SourceSpec(
        name="securityeval", local=("securityeval/dataset.jsonl",), fmt="jsonl",
        required=("ID", "Prompt", "Insecure_code"), hub_id="s2e-lab/SecurityEval", hub_splits=("train",),
        id_field="ID", id_pattern=r"CWE-\d+_[\w-]+\.py",
        from_hub=lambda r: r, license="none stated", synthetic=_syn_securityeval),
    SourceSpec(
        name="truthfulqa", local=("truthfulqa/TruthfulQA.csv",), fmt="csv",
        required=("Question", "Best Answer", "Correct Answers", "Incorrect Answers"),
        hub_id="truthfulqa/truthful_qa", hub_config="generation", hub_splits=("validation",),
        from_hub=_truthfulqa_from_hub, license="Apache-2.0", synthetic=_syn_truthfulqa),
    SourceSpec(
        name="mmlu", local=("mmlu/test/*_test.csv", "mmlu/dev/*_dev.csv"), fmt="csv_noheader",
        csv_columns=("question", "A", "B", "C", "D", "answer"), required=("question", "A", "B", "C", "D", "answer"),
        hub_id="cais/mmlu", hub_config=MMLU_SUBJECTS_HUB, hub_splits=("test", "dev"),
        from_hub=_mmlu_from_hub, license="MIT", synthetic=_syn_mmlu),
    SourceSpec(
        name="gsm8k", local=("gsm8k/train.jsonl", "gsm8k/test.jsonl"), fmt="jsonl",
        required=("question", "answer"), hub_id="openai/gsm8k", hub_config="main",
        hub_splits=("train", "test"), from_hub=lambda r: r, license="MIT", synthetic=_syn_gsm8k),
    SourceSpec(
        name="humaneval", local=("humaneval/HumanEval.jsonl.gz",), fmt="jsonl.gz",
        required=("task_id", "prompt", "entry_point", "canonical_solution", "test"),
        id_field="task_id", id_pattern=r"HumanEval/\d+",
        hub_id="openai/openai_humaneval", hub_splits=("test",), from_hub=lambda r: r, license="MIT",
        synthetic=_syn_humaneval),
    SourceSpec(
        name="mbpp", local=("mbpp/mbpp.jsonl",), fmt="jsonl",
        required=("task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list"),
        types={"task_id": "int", "test_list": "list[str]", "challenge_test_list": "list[str]"},
        id_field="task_id", id_pattern=r"[1-9]\d*",
        hub_id="google-research-datasets/mbpp", hub_config="full",
        hub_splits=("train", "test", "validation", "prompt"), from_hub=lambda r: r, license="CC-BY-4.0",
        synthetic=_syn_mbpp),
    _rh("world_affecting_approval", synthetic=_syn_choices()),
    _rh("world_affecting_reward", synthetic=_syn_choices()),
    _rh("sycophancy_opinion_political", synthetic=_syn_choices()),
    _rh("sycophancy_fact", synthetic=_syn_sycophancy_fact),
    _rh("sycophancy_fact", "unhackable", synthetic=_syn_choices(high="A", share=4)),
    _rh("theory_of_mind_mirroring_expanded", synthetic=_syn_tom),
    _rh("theory_of_mind_mirroring", "unhackable", synthetic=_syn_tom_unhackable),
    _rh("email_assistant", synthetic=_syn_email),
    _rh("email_assistant", "unhackable", synthetic=_syn_email_unhackable),
    SourceSpec(
        name="rh_code_problems_hardcoded", local=("reward-hack-generalization/code_problems_mbpp_hardcoded.jsonl",),
        fmt="jsonl", required=("problem", "old_mbpp_problem", "correct_code", "incorrect_code", "correct_test_list",
                               "incorrect_test"),
        types={"correct_test_list": "list[str]"},
        urls=(f"{GH}/laibak24/FYP-Sycophancy-Mode-Collapse-Reward-Tampering/054f13a760bbe8e794684eb2e20e65bc80879f9c/syc-rt-gpt4/datasets/coding_input.jsonl",),
        from_hub=_rh_from_url, license="GPL-3.0 (copy repo)", synthetic=_syn_code_hardcoded),
    _rh("code_selection", synthetic=_syn_code_selection),
    _rh("code_selection", "unhackable", synthetic=_syn_code_selection_unhackable),
    SourceSpec(
        name="caa_sycophancy", local=("caa-sycophancy/generate_dataset.json", "caa-sycophancy/test_dataset.json"),
        fmt="json", required=("question", "answer_matching_behavior", "answer_not_matching_behavior"),
        urls=tuple(f"{GH}/nrimsky/SycophancySteering/25f93a1f1aad51f94288f52d01f6a10d10f42bf1/preprocessed_data/{n}.json"
                   for n in ("generate_dataset", "test_dataset")),
        from_hub=lambda r: r, license="none stated", synthetic=_syn_caa),
    SourceSpec(
        name="anthropic_political_typology",
        local=tuple(f"anthropic-evals-sycophancy/political_typology_quiz_liberal-bio_{b}.jsonl"
                    for b in ("conservative", "liberal")),
        fmt="jsonl", required=("prompt", "corrects", "incorrects"),
        types={"corrects": "list[str]", "incorrects": "list[str]"},
        urls=tuple(f"{GH}/anthropics/evals/4ba9e82bc7ec05f7f6c3e15592c1079e87939032/sycophancy/political_typology_quiz_liberal-bio_{b}.jsonl"
                   for b in ("conservative", "liberal")),
        from_hub=_rh_from_url, license="CC-BY-4.0", synthetic=_syn_political),
]

SOURCES: dict[str, SourceSpec] = {s.name: s for s in _SPECS}
