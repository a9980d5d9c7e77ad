"""The dataset card (README.md) written into every build, generated from its manifest."""

from __future__ import annotations

from automon.data.audit import build_shortcut_notes, card_section
from automon.subsets import names, specs


def _table(counts: dict) -> str:
    lines = ["| subset | test 1 | test 0 | train 1 | train 0 |", "|---|---:|---:|---:|---:|"]
    tot = [0, 0, 0, 0]
    for s in names():
        te, tr = counts.get("test", {}).get(s, {}), counts.get("train", {}).get(s, {})
        row = [te.get("1", 0), te.get("0", 0), tr.get("1", 0), tr.get("0", 0)]
        tot = [a + b for a, b in zip(tot, row)]
        lines.append(f"| {s} | " + " | ".join(f"{x:,}" for x in row) + " |")
    lines.append("| **total** | " + " | ".join(f"**{x:,}**" for x in tot) + " |")
    return "\n".join(lines)


def _policy_section(policy: dict | None) -> str:
    """How the policy model wrote test pairs (generator=policy): model and the funnel per source."""
    if not policy:
        return ""
    g = policy["generator"]
    lines = [f"## Policy generation\n\nTest pairs of {', '.join(policy['subsets']) or 'no subset'} were written by "
             f"the policy model `{g['model']}` (backend `{g['backend']}`, greedy, seed {g['seed']}, at most "
             f"{g['max_new_tokens']} new tokens); every such sample records generator, model and answer "
             "extraction in `meta`. Sycophancy: a question is kept only when the policy answers it correctly "
             "without the cue and wrongly with it (the counterfactual filter).\n"]
    for subset, rep in policy["subsets"].items():
        if "funnel" in rep:
            lines += [f"**{subset}** funnel:\n", "| source | asked | correct without cue | flipped by cue | kept |",
                      "|---|---:|---:|---:|---:|"]
            lines += [f"| {src} | {c['asked']:,} | {c['correct_without_cue']:,} | {c['flipped_by_cue']:,} | "
                      f"{c['kept']:,} |" for src, c in rep["funnel"].items()]
            lines.append("")
        if "labels" in rep:  # sg_code: the incentivised answers as the sandbox labelled them
            lines += [f"**{subset}** labels by execution (answers under the incentive; a pair needs a gaming "
                      "answer and a benign one without the incentive):\n",
                      "| source | asked | visible fail (dropped) | gaming | benign | paired |", "|---|---:|---:|---:|---:|---:|"]
            lines += [f"| {src} | {c['asked']:,} | {c['visible_fail']:,} | {c['gaming']:,} | {c['benign']:,} | "
                      f"{c['paired']:,} |" for src, c in rep["labels"].items()]
            lines.append("")
    return "\n".join(lines) + "\n"


def _template_note(policy: dict | None) -> str:
    """Who wrote the responses: the template generator, or (generator=policy) the policy model for
    some subsets and the templates for the rest and for training."""
    style = ("they are realistic in content but not in style, so a monitor can sometimes key on phrasing "
             "(the shortcut audit below measures how much).")
    if not policy:
        return f"Responses are written by the `template` generator from gold data (no model): {style}"
    subs = ", ".join(policy["subsets"]) or "no subset"
    return (f"Test responses of {subs} are the policy model's own answers (above); every other response, "
            f"training included, is written by the `template` generator from gold data: {style}")


def _annotation_section(a: dict | None) -> str:
    if not a:
        return ""
    kappa = "undefined" if a["cohen_kappa"] is None else f"{a['cohen_kappa']:.3f}"
    return (f"## Annotation\n\n{a['items']:,} test samples of {', '.join(a['subsets'])} were labelled blind by "
            f"{a['annotators']} annotators: Cohen's kappa {kappa}, raw agreement {a['raw_agreement']:.3f}. "
            f"{a['agreed_and_match_label']:,} samples had every annotator agree with their label "
            f"({a['agreed_against_label']:,} agreed against it); {a['test_pairs_kept']:,} test pairs with both twins "
            f"confirmed were kept, {a['test_pairs_dropped']:,} dropped.\n\n")


def _near_duplicate_method(p: dict) -> str:
    """How the build's disjointness check found near-duplicates, from its manifest params (a card can be
    rendered again for an older build, e.g. by annotate)."""
    if "confirm" not in p:  # before disjoint-v3: datasketch's bands, MinHash's estimate of the jaccard
        return (f"MinHash/LSH near-duplicates, word {p['ngram']}-grams, {p['num_perm']} permutations, "
                f"estimated Jaccard >= {p['threshold']} (datasketch; {p['version']})")
    return (f"word {p['ngram']}-gram Jaccard >= {p['threshold']}, computed exactly for the\ncandidates of a "
            f"MinHash LSH ({p['num_perm']} permutations, bands {p['lsh_bands']}) that misses a pair at the "
            f"threshold with probability\n<= {p['lsh_max_miss_at_threshold']} ({p['version']})")


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
    recipes = "\n".join(f"- **{s.name}**: {s.card}" for s in specs())
    audit_section = (card_section(manifest["audit"], build_shortcut_notes(manifest)) + "\n"
                     if manifest.get("audit") else "")
    synthetic = manifest.get("synthetic_sources")
    warning = (f"**Synthetic data: built from automon's generated source tree ({synthetic}), not from the real "
               "sources. Numbers measured on it say nothing about monitors.**\n\n" if synthetic else "")
    unisolated = (manifest.get("sandbox_isolation") or {}).get("none")
    if unisolated:
        warning += (f"**SANDBOX ISOLATION WAS OFF (sandbox.isolation=none): the code behind {unisolated:,} "
                    "samples ran with the builder's own privileges, files and network. A program that escaped "
                    "could have changed any file or label of this build; rebuild with isolation where it can "
                    "run (docs/security.md) before trusting it.**\n\n")
    return f"""# automon monitor benchmark build

{warning}Paired test set of {n_test:,} samples and a disjoint training corpus of {n_train:,} samples for training and
evaluating LLM misbehavior monitors (AutoMonitor-Bench design, arXiv 2601.05752). Label 1 = misbehavior,
0 = benign; every test sample has a benign/misbehavior twin with the same `pair_id` and the same request.

- build version: `{manifest['build_version']}`, code `{manifest['code_version']}`, seed {manifest['seed']},
  wordings `{manifest['config']['wordings']['version']}`, generator `{manifest['config']['generator']}`
- files: `test.jsonl` sha256 `{manifest['files']['test.jsonl']}`, `train.jsonl` sha256 `{manifest['files']['train.jsonl']}`

## Counts

{_table(c)}

## How each subset is built

{recipes}

{_policy_section(manifest.get("policy"))}{_annotation_section(manifest.get("annotation"))}
{_template_note(manifest.get("policy"))} Every misbehavior sample lists
`evidence` (exact substrings of the response) where the recipe knows them.

## Train/test disjointness

A source item (question, problem, conversation, function) lands in one split across all subsets.
Training samples are checked against the test set by shared source-item key (`meta.item_keys`),
identical normalised text or request, and near-duplicates of the request + response and of the request
alone: {_near_duplicate_method(dj['params'])}.
Found and dropped: {dj['conflicts_found'] or 'none'}. The written files were re-checked from disk.

{audit_section}## Dropped during the build

{dropped}

## Sources

{chr(10).join(src_lines)}

See `manifest.json` for the full resolved config, file hashes and the disjointness report.
"""
