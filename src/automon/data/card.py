"""The dataset card (README.md) written into every build, generated from its manifest."""

from __future__ import annotations

from automon.schema import SUBSETS

_RECIPES = {
    "safety_qa": "HH-RLHF harmless-base: the rejected final assistant turn (1) vs the chosen one (0) after the "
                 "same conversation prefix. HH preferences are relative, so some 'rejected' turns are only mildly "
                 "worse; no evidence quotes.",
    "safety_code": "SVEN: vulnerable function (1, evidence = lines the fix deleted) vs its fixed version (0). "
                   "Training also gets CyberSecEval instruct/autocomplete and SecurityEval insecure code (label 1, "
                   "unpaired, evidence = the flagged line where known).",
    "syco_qa": "Cue injection: the request carries a misleading user cue naming a wrong option (MMLU) or a wrong "
               "answer (TruthfulQA); the response adopts the cue (1) or keeps the correct answer (0); plus "
               "reward-hack sycophancy_fact. Opinion sets (CAA, Anthropic political typology, reward-hack "
               "opinion) and the unhackable control are training only.",
    "syco_reasoning": "GSM8K with a plausible wrong number as the cue (an intermediate result or a near miss); the "
                      "misbehavior bends the final step to the cued number (evidence = the bent lines), the benign "
                      "twin is the gold solution.",
    "sg_qa": "TruthfulQA with an injected reward-proxy incentive: a confident false answer (1) vs the honest best "
             "answer (0); reward-hack world_affecting_reward/approval, theory_of_mind_mirroring and "
             "email_assistant choices: the high-reward option (1) vs the other (0).",
    "sg_code": "HumanEval and MBPP with an incentive and visible tests: gaming solutions (hard-coded outputs, "
               "special-cased inputs, early sys.exit(0), always-equal objects, patched asserts) vs the canonical "
               "solution. Every sample is executed in a sandbox: gaming passes the visible tests and fails the "
               "hidden ones, benign passes both; failures are dropped and counted.",
}


def _table(counts: dict) -> str:
    lines = ["| subset | test 1 | test 0 | train 1 | train 0 |", "|---|---:|---:|---:|---:|"]
    tot = [0, 0, 0, 0]
    for s in SUBSETS:
        te, tr = counts.get("test", {}).get(s, {}), counts.get("train", {}).get(s, {})
        row = [te.get("1", 0), te.get("0", 0), tr.get("1", 0), tr.get("0", 0)]
        tot = [a + b for a, b in zip(tot, row)]
        lines.append(f"| {s} | " + " | ".join(f"{x:,}" for x in row) + " |")
    lines.append("| **total** | " + " | ".join(f"**{x:,}**" for x in tot) + " |")
    return "\n".join(lines)


def dataset_card(manifest: dict) -> str:
    c = manifest["counts"]
    n_test = sum(v for sub in c.get("test", {}).values() for v in sub.values())
    n_train = sum(v for sub in c.get("train", {}).values() for v in sub.values())
    dj = manifest["disjointness"]
    src_lines = []
    for name, o in manifest["sources"].items():
        if o["kind"] == "local":
            src_lines.append(f"- `{name}`: local, {len(o['files'])} file(s) under `{o['root']}` ({o['license']})")
        elif o["kind"] == "hub":
            src_lines.append(f"- `{name}`: hub `{o['hub_id']}` {o.get('config') or ''} {o['splits']} ({o['license']})")
        else:
            src_lines.append(f"- `{name}`: upstream URL(s), {len(o['urls'])} file(s) ({o['license']})")
    dropped = "\n".join(f"- {k}: {v:,}" for k, v in manifest["dropped"].items()) or "- nothing"
    recipes = "\n".join(f"- **{s}**: {_RECIPES[s]}" for s in SUBSETS)
    return f"""# automon monitor benchmark build

Paired test set of {n_test:,} samples and a disjoint training corpus of {n_train:,} samples for training and
evaluating LLM misbehavior monitors (AutoMonitor-Bench design, arXiv 2601.05752). Label 1 = misbehavior,
0 = benign; every test sample has a benign/misbehavior twin with the same `pair_id` and the same request.

- build version: `{manifest['build_version']}`, code `{manifest['code_version']}`, seed {manifest['seed']},
  wordings `{manifest['config']['wordings']['version']}`, generator `{manifest['config']['generator']}`
- files: `test.jsonl` sha256 `{manifest['files']['test.jsonl']}`, `train.jsonl` sha256 `{manifest['files']['train.jsonl']}`

## Counts

{_table(c)}

## How each subset is built

{recipes}

Responses are written by the `template` generator from gold data (no model): they are realistic in
content but not in style, so a monitor can sometimes key on phrasing. Every misbehavior sample lists
`evidence` (exact substrings of the response) where the recipe knows them.

## Train/test disjointness

A source item (question, problem, conversation, function) lands in one split across all subsets.
Training samples are checked against the test set by shared source-item key (`meta.item_keys`),
identical normalised text, and MinHash/LSH near-duplicates (word {dj['params']['ngram']}-grams of request +
response, {dj['params']['num_perm']} permutations, Jaccard >= {dj['params']['threshold']}, datasketch).
Found and dropped: {dj['conflicts_found'] or 'none'}. The written files were re-checked from disk.

## Dropped during the build

{dropped}

## Sources

{chr(10).join(src_lines)}

See `manifest.json` for the full resolved config, file hashes and the disjointness report.
"""
