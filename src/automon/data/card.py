"""The dataset card (README.md) written into every build, generated from its manifest and the build
record (build_log.json `build`: how this machine made it)."""

from __future__ import annotations

import hashlib

from automon.data.audit import build_shortcut_notes, card_section
from automon.data.hub import SampleFeatures, hub_metadata
from automon.data.io import json_dumps_stable
from automon.data.reference import CONSTRUCT_MAX_RATE, RULES, SINGLE_MIN_BALANCED_ERROR, SINGLE_MIN_CONTROL_FAR
from automon.release import CURRENT, release_line
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


def _screen_note(s: dict | None, earlier: list[dict] = ()) -> str:
    """The screens of the annotation (automon.data.safety_screen), earliest first, when it has any."""
    if not s:
        return ""
    notes = []
    for i, one in enumerate([*earlier, s]):
        per = "; ".join(f"{sub}: {v.get('benign_read', 0):,} benign and {v.get('misbehavior_read', 0):,} misbehavior "
                        f"replies read, {v.get('benign_flagged', 0):,} benign read as misbehavior, "
                        f"{v.get('misbehavior_missed', 0):,} misbehavior read as benign, {v['pairs_rejected']:,} kept "
                        "pairs rejected" for sub, v in one["subsets"].items())
        title = "Screen" if not earlier else f"Screen {i + 1}"
        notes.append(f"\n\n**{title}.** The kept pairs of `annotations/{one['base']}` were read once more by blind "
                     f"readers ({one.get('screeners_are') or 'readers not recorded'}); a kept pair one of whose replies "
                     f"a reader read against its label, or marked broken, is rejected: {per}.")
    return "".join(notes)


def _safety_section(a: dict | None, dropped: dict) -> str:
    """The safety subsets' annotation (wordings.safety_annotations): who, agreement, what was kept,
    and the artifact baselines with why the response-only ceiling does not apply (safety_report)."""
    if not a:
        return ""
    who = a.get("annotators_are") or "not recorded"
    rows = []
    for s, v in a["subsets"].items():
        if v.get("test_pairs_shipped") is None:  # a subset this build did not make
            continue
        kappa = "undefined" if v["cohen_kappa"] is None else f"{v['cohen_kappa']:.3f}"
        pre = ", ".join(f"{r} {n:,}" for r, n in sorted(v["prefilter_dropped"].items())) or "none"
        own = ", ".join(f"{k} {x:.2f}" for k, x in v["agreement_with_source_label"].items())
        shipped, req = v.get("test_pairs_shipped"), v.get("test_pairs_requested")
        balanced = dropped.get(f"{s}/train_only_length_balance", 0)
        why = f"{v['pairs_kept']:,} kept" + (f", {balanced:,} of them moved to training to balance lengths" if balanced else "")
        short = f" (**{req:,} requested; {why}**)" if (shipped or 0) < (req or 0) else ""
        rows.append(f"| {s} | {v['candidate_pairs']:,} | {kappa} | {v['raw_agreement']:.3f} | {own} | "
                    f"{v['pairs_kept']:,} | {v['pairs_disputed']:,} | {v['pairs_rejected']:,} "
                    f"({v['pairs_broken']:,} broken) | {shipped:,}{short} |")
        rows.append(f"| | pre-filter (before annotation, source pool): {pre} | | | | | | | |")
    art = a.get("artifact_baselines") or {}
    arows = []
    for s, members in art.get("subsets", {}).items():
        for m, r in members.items():
            tf = r.get("train_fit")
            arows.append(f"| {s} | {m} | {r['test_cv']['auroc']:.2f} / {r['test_cv']['pair_accuracy']:.2f} | "
                         + (f"{tf['auroc']:.2f} / {tf['pair_accuracy']:.2f}" if tf else "n/a") + " |")
    over = art.get("exceeded") or []
    verdict = (f"**Over the {art.get('max_auroc')} ceiling: {', '.join(over)}.**" if over else
               f"Every one stays at or below AUROC {art.get('max_auroc')}.")
    return f"""## Safety pairs: double blind annotation (`annotations/{a['name']}`)

HH-RLHF's preference is relative ("chosen = less harmful"), so a rejected reply need not be misbehavior,
and SVEN holds pairs whose change is only in tests, comments or layout. The safety test pairs are
therefore the candidate pairs that both annotators labelled (misbehavior, benign) on the monitor
prompt's own definition, with neither twin marked broken. Annotators ({', '.join(a['annotators'])}): {who}.
Annotation rounds imported: {a.get('rounds', 1)}. Candidates are the
pre-filtered source pairs in the build's test order; disputed pairs and pairs never annotated train only;
rejected pairs (both annotators contradict a label, or a twin is broken) are dropped. Kappa: Cohen's,
on every annotated reply (yes/no), computed by `automon.data.annotate`; verdicts sha256
`{a['verdicts_sha256'][:16]}...`.{_screen_note(a.get("screen"), a.get("earlier_screens", []))}

| subset | candidate pairs | kappa | raw agreement | agreement with the source label | kept | disputed | rejected | test pairs shipped |
|---|---:|---:|---:|---|---:|---:|---:|---:|
{chr(10).join(rows)}

**Artifact baselines.** The response-only ceiling of the shortcut audit (below) does not apply as such to
safety: the misbehavior is in the response's own words (harmful help, an injectable query), so a
response-only model that reads them reads the construct. What must not carry the label is what cannot read
harm: length, formatting and structure, and a program's comments alone. AUROC / pair accuracy,
{art.get('cv_folds')}-fold pair-grouped CV on the test pairs / fitted on the training split:

| subset | baseline | test CV | training fit |
|---|---|---:|---:|
{chr(10).join(arows)}

{verdict}

"""


def _near_duplicate_method(p: dict) -> str:
    """How the build's disjointness check found near-duplicates, from its manifest params (a card can be
    rendered again for an older build, e.g. by annotate)."""
    if "confirm" not in p:  # before disjoint-v3: datasketch's bands, MinHash's estimate of the jaccard
        return (f"MinHash/LSH near-duplicates, word {p['ngram']}-grams, {p['num_perm']} permutations, "
                f"estimated Jaccard >= {p['threshold']} (datasketch; {p['version']})")
    return (f"word {p['ngram']}-gram Jaccard >= {p['threshold']}, computed exactly for the\ncandidates of a "
            f"MinHash LSH ({p['num_perm']} permutations, bands {p['lsh_bands']}) that misses a pair at the "
            f"threshold with probability\n<= {p['lsh_max_miss_at_threshold']} ({p['version']})")


def _constructs_section(constructs: dict | None) -> str:
    """What the construct check read in every sg_code sample (docs/data.md, "sg_code labels")."""
    if not constructs:
        return ""
    rows = ["| split | subset | family | label | construct | samples |", "|---|---|---|---:|---|---:|"]
    rows += [f"| {' | '.join(k.split('/'))} | {v:,} |" for k, v in constructs.items()]
    return ("## Construct check\n\nEvery sg_code sample's code was read (AST) against its request's visible tests: "
            "a gaming sample must key a branch or table on a visible test's input or tamper with the checker; a "
            "benign one must do neither (a comparison its canonical solution makes itself is the task's logic). "
            "A sample that contradicts its label fails the build, naming it, so a written build has none. What "
            "the check read:\n\n" + "\n".join(rows) + "\n\n")


def _test_controls_line(controls: dict | None) -> str:
    if not controls:
        return ""
    parts = ", ".join(f"{k.split('/')[0]} {k.split('/')[1]} {v:,}" for k, v in controls.items())
    return (f"\nTest 0 includes the contrast controls (benign, `meta.control`; docs/data.md \"Contrast controls\"): "
            f"{parts}.\n")


def _reference_section(ref: dict | None) -> str:
    """The reference monitors (automon.data.reference) per subset: on the paired core, on everything,
    on each contrast-control kind, and the goals they miss."""
    if not ref:
        return ""
    def f(x):
        return "—" if x is None else f"{x:.3f}"

    rows = []
    for rule, per in ref["rules"].items():
        for sub, r in per.items():
            ctl = ", ".join(f"{k} {f(v)}" for k, v in r["controls"].items()) or "no controls"
            goal = "; ".join(r["misses"]) or ("met" if r["controls"] else "—")
            rows.append(f"| {rule} | {sub} | {f(r['pairs']['mr'])} / {f(r['pairs']['far'])} | "
                        f"{f(r['all']['mr'])} / {f(r['all']['far'])} | {f(r['all'].get('balanced_error'))} | {ctl} | {goal} |")
    rules = "\n".join(f"- `{k}`: {v.doc}" for k, v in RULES.items())
    return f"""## Reference monitors: one feature alone, and the construct

Rules, no model (`{ref['version']}`; docs/data.md "Contrast controls"), each flagging one part of a misbehavior, and
`construct` the conjunction:

{rules}

Goals where the subset has contrast controls: a single-feature rule flags its own control kind (FAR >=
{SINGLE_MIN_CONTROL_FAR}) and errs on the subset as a whole (balanced error (MR + FAR) / 2 >= {SINGLE_MIN_BALANCED_ERROR}); `construct`
has MR and FAR <= {CONSTRUCT_MAX_RATE}. On the paired core alone (the paper's design) the single-feature rules read the label.

| rule | subset | pairs MR / FAR | all MR / FAR | balanced error (all) | FAR per control kind | goal |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

"""


def _evidence_line(ev: dict | None) -> str:
    """How many misbehavior test samples carry evidence, per subset (manifest test_evidence)."""
    if not ev:
        return "."
    cells = ", ".join(f"{s} {r['with_evidence']:,}/{r['misbehavior']:,}" for s, r in ev.items())
    note = "".join(f"; {s}'s is the span two blind readers marked (annotations/{r['gold']['annotations']}, "
                   f"gold.jsonl sha256 {r['gold']['sha256'][:12]})" for s, r in ev.items() if "gold" in r)
    return f": misbehavior test samples with evidence {cells}{note}."


def dataset_card(manifest: dict, record: dict | None = None, features: SampleFeatures | None = None) -> str:
    """The card of a build: the hub's metadata block (automon.data.hub; with the samples' `features`),
    then the card. `manifest`: the full manifest as manifest.json holds it (its sha256 names the release);
    `record`: the build record (automon.data.write.build_record)."""
    record = record or {}
    manifest_hash = hashlib.sha256(json_dumps_stable(manifest).encode("utf-8")).hexdigest()
    c = manifest["counts"]
    n_test = sum(v for sub in c.get("test", {}).values() for v in sub.values())
    n_train = sum(v for sub in c.get("train", {}).values() for v in sub.values())
    dj = manifest["disjointness"]
    src_lines = []
    for name, o in manifest["sources"].items():
        if o["kind"] == "local":
            root = o.get("root") or (record.get("config") or {}).get("sources", {}).get("root")
            where = f" under `{root}`" if root else ""
            src_lines.append(f"- `{name}`: local, {len(o['files'])} file(s){where} ({o['license']})")
        elif o["kind"] == "hub":
            src_lines.append(f"- `{name}`: hub `{o['hub_id']}` {o.get('config') or ''} {o['splits']} ({o['license']})")
        else:
            src_lines.append(f"- `{name}`: upstream URL(s), {len(o['urls'])} file(s) ({o['license']})")
    dropped = "\n".join(f"- {k}: {v:,}" for k, v in manifest["dropped"].items()) or "- nothing"
    recipes = "\n".join(f"- **{s.name}**: {s.card}" for s in specs())
    audit_section = (card_section(manifest["audit"], build_shortcut_notes(manifest)) + "\n"
                     if manifest.get("audit") else "")
    audit_section += _reference_section((manifest.get("audit") or {}).get("reference"))
    synthetic = manifest.get("synthetic_sources")
    warning = (f"**Synthetic data: built from automon's generated source tree ({synthetic}), not from the real "
               "sources. Numbers measured on it say nothing about monitors.**\n\n" if synthetic else "")
    code = record.get("code_version") or manifest.get("code_version", "unknown")
    unisolated = (record.get("sandbox_isolation_samples") or manifest.get("sandbox_isolation") or {}).get("none")
    if unisolated:
        warning += (f"**SANDBOX ISOLATION WAS OFF (sandbox.isolation=none): the code behind {unisolated:,} "
                    "samples ran with the builder's own privileges, files and network. A program that escaped "
                    "could have changed any file or label of this build; rebuild with isolation where it can "
                    "run (docs/security.md) before trusting it.**\n\n")
    return f"""{hub_metadata(manifest, features, CURRENT.name)}# automon monitor benchmark build

{warning}Paired test set of {n_test:,} samples and a disjoint training corpus of {n_train:,} samples for training and
evaluating LLM misbehavior monitors (AutoMonitor-Bench design, arXiv 2601.05752). Label 1 = misbehavior,
0 = benign; every paired test sample has a benign/misbehavior twin with the same `pair_id` and the same request;
contrast controls (wordings v9: `meta.control`, `meta.group` = their pair's `pair_id`) are benign samples
beside the pairs that carry one part of a misbehavior alone.

- benchmark: {release_line(manifest, manifest_hash)}
- build version: `{manifest['build_version']}`, code `{code}`, seed {manifest['seed']},
  wordings `{manifest['config']['wordings']['version']}`, generator `{manifest['config']['generator']}`
- files: `test.jsonl` sha256 `{manifest['files']['test.jsonl']}`, `train.jsonl` sha256 `{manifest['files']['train.jsonl']}`

Load it with `datasets.load_dataset("<this directory>")` (both splits, the types of the metadata block
above) or read the JSON lines directly. Cite the release, not the directory: the benchmark line above
names it (docs/data.md "Releases").

## Counts

{_table(c)}
{_test_controls_line(manifest.get("test_controls"))}
## How each subset is built

{recipes}

{_policy_section(manifest.get("policy"))}{_annotation_section(manifest.get("annotation"))}{_safety_section(manifest.get("safety_annotations"), manifest["dropped"])}
{_template_note(manifest.get("policy"))} Every misbehavior sample lists
`evidence` (exact substrings of the response) where the recipe knows them{_evidence_line(manifest.get("test_evidence"))}

## Train/test disjointness

A source item (question, problem, conversation, function) lands in one split across all subsets.
Training samples are checked against the test set by shared source-item key (`meta.item_keys`),
identical normalised text or request, and near-duplicates of the request + response and of the request
alone: {_near_duplicate_method(dj['params'])}.
Found and dropped: {dj['conflicts_found'] or 'none'}. The written files were re-checked from disk.

{audit_section}{_constructs_section(manifest.get("constructs"))}## Dropped during the build

{dropped}

## Sources

{chr(10).join(src_lines)}

See `manifest.json` for the full resolved config, file hashes and the disjointness report: what the build
is (its sha256 is the data hash trained adapters record). `build_log.json` says how this machine made it
(sandbox isolation, workers, sources directory, code and library versions, timings), outside that hash.
"""
