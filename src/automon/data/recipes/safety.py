"""safety_qa (HH-RLHF rejected vs chosen) and safety_code (SVEN vulnerable vs fixed; CyberSecEval
and SecurityEval insecure code for training only)."""

from __future__ import annotations

import ast
import re
from typing import Iterable

from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import short_hash, text_key
from automon.sources import Row

_TURN = re.compile(r"\n\n(Human|Assistant): ")


def _turns(transcript: str) -> list[tuple[str, str]]:
    parts = _TURN.split("\n\n" + transcript.lstrip("\n"))
    # parts = ["", role, text, role, text, ...]
    return [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]


def _render(turns: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"{role}: {text}" for role, text in turns)


def safety_qa_items(rows: Iterable[Row], drops: Drops, shared_opening: bool = False) -> list[Item]:
    """HH-RLHF harmless pairs: the rejected final turn (misbehavior) and the chosen one. With
    `shared_opening` (wordings.shared_source_keys) conversations that open with the same human turn
    are one source item (one split)."""
    items = []
    for row in rows:
        chosen, rejected = _turns(row.data["chosen"]), _turns(row.data["rejected"])
        if not chosen or not rejected or chosen[-1][0] != "Assistant" or rejected[-1][0] != "Assistant":
            drops.add("safety_qa", "no_final_assistant_turn")
            continue
        if chosen[:-1] != rejected[:-1]:
            drops.add("safety_qa", "chosen_rejected_prefix_differs")
            continue
        good, bad = chosen[-1][1], rejected[-1][1]
        if not good or not bad:
            drops.add("safety_qa", "empty_final_turn")
            continue
        if good == bad:
            drops.add("safety_qa", "chosen_equals_rejected")
            continue
        request = _render(chosen[:-1])
        meta = {"recipe": "hh_rlhf_pair", "generator": "template", "source_dataset": "hh-rlhf/harmless-base",
                "turns": len(chosen)}
        mis = Draft(request, bad, 1, [], {**meta, "hh_side": "rejected"}, "rejected")
        ben = Draft(request, good, 0, [], {**meta, "hh_side": "chosen"}, "chosen")
        keys = (text_key("hh", request),)
        if shared_opening and chosen[0][0] == "Human":
            keys += (text_key("hh_opening", chosen[0][1]),)
        items.append(Item(keys, "safety_qa", f"hh-rlhf:{row.ref}", (mis, ben), [mis, ben]))
    return items


def _literal(v):
    return ast.literal_eval(v) if isinstance(v, str) else v


def _deleted_lines(row: Row, before: str) -> list[str]:
    try:
        changes = _literal(row.data["line_changes"])
    except (ValueError, SyntaxError):
        return []
    out = []
    for ch in changes.get("deleted", []):
        line = ch.get("line", "").rstrip("\n").strip()
        if line and line in before and line not in out:
            out.append(line)
    return out


_LANG = {".py": "Python", ".c": "C", ".cc": "C++", ".cpp": "C++", ".h": "C", ".js": "JavaScript",
         ".go": "Go", ".rb": "Ruby", ".java": "Java", ".php": "PHP"}


def safety_code_items(sven: Iterable[Row], cse_instruct: Iterable[Row], cse_autocomplete: Iterable[Row],
                      securityeval: Iterable[Row], drops: Drops) -> list[Item]:
    items = []
    for row in sven:
        d = row.data
        before, after = d["func_src_before"].rstrip(), d["func_src_after"].rstrip()
        if before == after:
            drops.add("safety_code", "sven_before_equals_after")
            continue
        ext = "." + d["file_name"].rsplit(".", 1)[-1] if "." in d["file_name"] else ""
        lang = _LANG.get(ext, "the project's language")
        request = (f"Implement the function `{d['func_name']}` in `{d['file_name']}` ({lang}). "
                   "Return the complete function.")
        evidence = _deleted_lines(row, before)
        meta = {"recipe": "sven_pair", "generator": "template", "source_dataset": "sven", "cwe": d["vul_type"],
                "commit": d["commit_link"]}
        mis = Draft(request, before, 1, evidence, {**meta, "side": "vulnerable"}, "vulnerable")
        ben = Draft(request, after, 0, [], {**meta, "side": "fixed"}, "fixed")
        key = f"sven:{short_hash(d['commit_link'], d['file_name'], d['func_name'])}"
        items.append(Item((key, text_key("code", before)), "safety_code", f"sven:{row.ref}", (mis, ben), [mis, ben]))

    # CyberSecEval: the same case (prompt_id) in two framings -> one item, two training variants.
    cases: dict[str, list[Draft]] = {}
    refs: dict[str, str] = {}
    for framing, rows in (("instruct", cse_instruct), ("autocomplete", cse_autocomplete)):
        for row in rows:
            d = row.data
            code = d["origin_code"].rstrip()
            line = d["line_text"].strip()
            evidence = [line] if line and line in code else []
            meta = {"recipe": "cyberseceval_insecure", "generator": "template", "source_dataset": "cyberseceval",
                    "cwe": d["cwe_identifier"], "language": d["language"], "framing": framing}
            key = f"cyberseceval:{d['prompt_id']}"
            cases.setdefault(key, []).append(Draft(d["test_case_prompt"].strip(), code, 1, evidence, meta, framing))
            refs.setdefault(key, row.ref)
    for key in sorted(cases, key=lambda k: int(k.split(":")[1]) if k.split(":")[1].isdigit() else k):
        items.append(Item((key,), "safety_code", f"cyberseceval:{refs[key]}", None, cases[key]))

    for row in securityeval:
        d = row.data
        request = "Complete the following code:\n\n" + d["Prompt"].rstrip()
        meta = {"recipe": "securityeval_insecure", "generator": "template", "source_dataset": "securityeval",
                "cwe": d["ID"].split("_")[0]}
        items.append(Item((f"securityeval:{d['ID']}",), "safety_code", f"securityeval:{row.ref}", None,
                          [Draft(request, d["Insecure_code"].rstrip(), 1, [], meta, "insecure")]))
    return items


# ---------------------------------------------------------------- the recipes (SubsetSpec.recipe)
# Each takes the build's RecipeContext (automon.data.context) and hands the item builders above the
# rows of the sources its spec declares; the builders take explicit rows, so tests need no build.

def safety_qa_recipe(ctx) -> list[Item]:
    return safety_qa_items(ctx.rows("hh_rlhf_harmless"), ctx.drops, ctx.cfg.wordings.shared_source_keys)


def safety_code_recipe(ctx) -> list[Item]:
    return safety_code_items(ctx.rows("sven"), ctx.rows("cyberseceval_instruct"),
                             ctx.rows("cyberseceval_autocomplete"), ctx.rows("securityeval"), ctx.drops)
