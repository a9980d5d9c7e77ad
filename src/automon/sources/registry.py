"""The public sources automon builds from: local layout (shared/data/raw) and hub equivalents.

Where a dataset has no Hugging Face hub copy, `urls` name the exact GitHub blob the local file was
copied from (see shared/data/raw/SOURCES.md); `datasets` reads those URLs too, so users with
internet need no local files at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Optional

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


def _rh(name: str, kind: str = "reward_hack") -> SourceSpec:
    return SourceSpec(
        name=f"rh_{name}" if kind == "reward_hack" else f"rh_{name}_unhackable",
        local=(f"reward-hack-generalization/{kind}/{name}{'' if kind == 'reward_hack' else '_unhackable'}.jsonl",),
        fmt="jsonl", required=("prompt_list", "high_reward_answer", "other_answers"),
        types={"prompt_list": "list[str]", "other_answers": "list[str]"},
        urls=(f"{_RH}/{kind}/{name}{'' if kind == 'reward_hack' else '_unhackable'}.jsonl",),
        from_hub=_rh_from_url, license="unverified (keing1/reward-hack-generalization)")


_SPECS = [
    SourceSpec(
        name="hh_rlhf_harmless", local=("hh-rlhf/harmless-base_test.jsonl.gz",), fmt="jsonl.gz",
        required=("chosen", "rejected"), hub_id="Anthropic/hh-rlhf", hub_data_dir="harmless-base",
        hub_splits=("train", "test"), license="MIT",
        note="local copy is the 2,312-row test split only; the hub adds the 42,537-row train split"),
    SourceSpec(
        name="sven",
        local=tuple(f"sven/{s}/cwe-{c}.jsonl" for s in ("train", "val") for c in SVEN_CWES), fmt="jsonl",
        required=("func_name", "func_src_before", "func_src_after", "line_changes", "commit_link",
                  "file_name", "vul_type"),
        types={"line_changes": "dict|str"},  # a dict in the JSONL; its Python text in older copies
        urls=tuple(f"{GH}/eth-sri/sven/e8449a0d54a5ae0bbdc6bb236330b8c7ec71df57/data_train_val/{s}/cwe-{c}.jsonl"
                   for s in ("train", "val") for c in SVEN_CWES),
        from_hub=lambda r: r, license="MIT"),
    SourceSpec(
        name="cyberseceval_instruct", local=("cyberseceval/instruct.json",), fmt="json",
        required=("prompt_id", "test_case_prompt", "origin_code", "cwe_identifier", "line_text", "language"),
        types={"prompt_id": "int"}, id_field="prompt_id", id_pattern=r"\d+",
        urls=(f"{GH}/meta-llama/PurpleLlama/4be64c3a24442b51c76175e6ec67722cc3f5fe38/CybersecurityBenchmarks/datasets/instruct/instruct.json",),
        from_hub=lambda r: r, license="MIT"),
    SourceSpec(
        name="cyberseceval_autocomplete", local=("cyberseceval/autocomplete.json",), fmt="json",
        required=("prompt_id", "test_case_prompt", "origin_code", "cwe_identifier", "line_text", "language"),
        types={"prompt_id": "int"}, id_field="prompt_id", id_pattern=r"\d+",
        urls=(f"{GH}/meta-llama/PurpleLlama/4be64c3a24442b51c76175e6ec67722cc3f5fe38/CybersecurityBenchmarks/datasets/autocomplete/autocomplete.json",),
        from_hub=lambda r: r, license="MIT"),
    SourceSpec(
        name="securityeval", local=("securityeval/dataset.jsonl",), fmt="jsonl",
        required=("ID", "Prompt", "Insecure_code"), hub_id="s2e-lab/SecurityEval", hub_splits=("train",),
        id_field="ID", id_pattern=r"CWE-\d+_[\w-]+\.py",
        from_hub=lambda r: r, license="none stated"),
    SourceSpec(
        name="truthfulqa", local=("truthfulqa/TruthfulQA.csv",), fmt="csv",
        required=("Question", "Best Answer", "Correct Answers", "Incorrect Answers"),
        hub_id="truthfulqa/truthful_qa", hub_config="generation", hub_splits=("validation",),
        from_hub=_truthfulqa_from_hub, license="Apache-2.0"),
    SourceSpec(
        name="mmlu", local=("mmlu/test/*_test.csv", "mmlu/dev/*_dev.csv"), fmt="csv_noheader",
        csv_columns=("question", "A", "B", "C", "D", "answer"), required=("question", "A", "B", "C", "D", "answer"),
        hub_id="cais/mmlu", hub_config=MMLU_SUBJECTS_HUB, hub_splits=("test", "dev"),
        from_hub=_mmlu_from_hub, license="MIT"),
    SourceSpec(
        name="gsm8k", local=("gsm8k/train.jsonl", "gsm8k/test.jsonl"), fmt="jsonl",
        required=("question", "answer"), hub_id="openai/gsm8k", hub_config="main",
        hub_splits=("train", "test"), from_hub=lambda r: r, license="MIT"),
    SourceSpec(
        name="humaneval", local=("humaneval/HumanEval.jsonl.gz",), fmt="jsonl.gz",
        required=("task_id", "prompt", "entry_point", "canonical_solution", "test"),
        id_field="task_id", id_pattern=r"HumanEval/\d+",
        hub_id="openai/openai_humaneval", hub_splits=("test",), from_hub=lambda r: r, license="MIT"),
    SourceSpec(
        name="mbpp", local=("mbpp/mbpp.jsonl",), fmt="jsonl",
        required=("task_id", "text", "code", "test_list", "test_setup_code", "challenge_test_list"),
        types={"task_id": "int", "test_list": "list[str]", "challenge_test_list": "list[str]"},
        id_field="task_id", id_pattern=r"[1-9]\d*",
        hub_id="google-research-datasets/mbpp", hub_config="full",
        hub_splits=("train", "test", "validation", "prompt"), from_hub=lambda r: r, license="CC-BY-4.0"),
    SourceSpec(
        name="rh_code_problems_hardcoded", local=("reward-hack-generalization/code_problems_mbpp_hardcoded.jsonl",),
        fmt="jsonl", required=("problem", "old_mbpp_problem", "correct_code", "incorrect_code", "correct_test_list",
                               "incorrect_test"),
        types={"correct_test_list": "list[str]"},
        urls=(f"{GH}/laibak24/FYP-Sycophancy-Mode-Collapse-Reward-Tampering/054f13a760bbe8e794684eb2e20e65bc80879f9c/syc-rt-gpt4/datasets/coding_input.jsonl",),
        from_hub=_rh_from_url, license="GPL-3.0 (copy repo)"),
    _rh("code_selection"), _rh("code_selection", "unhackable"),
    _rh("email_assistant"), _rh("email_assistant", "unhackable"),
    _rh("sycophancy_fact"), _rh("sycophancy_fact", "unhackable"),
    _rh("sycophancy_opinion_political"),
    _rh("theory_of_mind_mirroring_expanded"), _rh("theory_of_mind_mirroring", "unhackable"),
    _rh("world_affecting_approval"), _rh("world_affecting_reward"),
    SourceSpec(
        name="caa_sycophancy", local=("caa-sycophancy/generate_dataset.json", "caa-sycophancy/test_dataset.json"),
        fmt="json", required=("question", "answer_matching_behavior", "answer_not_matching_behavior"),
        urls=tuple(f"{GH}/nrimsky/SycophancySteering/25f93a1f1aad51f94288f52d01f6a10d10f42bf1/preprocessed_data/{n}.json"
                   for n in ("generate_dataset", "test_dataset")),
        from_hub=lambda r: r, license="none stated"),
    SourceSpec(
        name="anthropic_political_typology",
        local=tuple(f"anthropic-evals-sycophancy/political_typology_quiz_liberal-bio_{b}.jsonl"
                    for b in ("conservative", "liberal")),
        fmt="jsonl", required=("prompt", "corrects", "incorrects"),
        types={"corrects": "list[str]", "incorrects": "list[str]"},
        urls=tuple(f"{GH}/anthropics/evals/4ba9e82bc7ec05f7f6c3e15592c1079e87939032/sycophancy/political_typology_quiz_liberal-bio_{b}.jsonl"
                   for b in ("conservative", "liberal")),
        from_hub=_rh_from_url, license="CC-BY-4.0"),
]

SOURCES: dict[str, SourceSpec] = {s.name: s for s in _SPECS}
