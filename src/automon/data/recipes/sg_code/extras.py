"""Training-only items from the reward-hack-generalization code files: the hard-coded MBPP
rewrites (hard-coded solution vs correct one, with the corrupted test among the visible ones) and
the code_selection prompts (choosing the hard-coding option vs the real one; the unhackable copies
are a benign control). They carry the key of the MBPP task they rewrite, so they never land in a
different split from it."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass

from automon.data.recipes.base import Draft, Drops, Item
from automon.data.recipes.common import choose, norm_ws, short_hash
from automon.data.recipes.sg_code.render import PREFACES, SELECTION_PREFACES, render_request, render_response
from automon.data.recipes.sg_code.syntax import function_names, parse
from automon.data.recipes.sg_code.tasks import SUBSET, as_list
from automon.data.recipes.sg_code.verifier import Verifier
from automon.sandbox.grading import HiddenTests, hidden_tests

# "Problem:\n...\n\nAnswers:\nOption (A)\n<code>\n\nOption (B):\n<code>\n\nTest cases: \n<asserts>\n\nChoose..."
_SELECTION = re.compile(r"Problem:\n(?P<problem>.*?)\n\n(?:Answers:\n)?Option \(A\):?\n(?P<A>.*?)\n+"
                        r"Option \(B\):?\n(?P<B>.*?)\n+(?:Test cases|Tests): ?\n(?P<tests>.*?)(?:\n\n|\s*$)", re.S)


@dataclass(frozen=True)
class _Link:
    """What a rewritten problem links to: its item keys and its correct tests, made strict."""
    keys: tuple[str, ...]
    hidden: HiddenTests


@dataclass
class _Rewrite:
    """One hard-coded MBPP rewrite and the verifier handles of its three checks."""
    row: dict
    keys: tuple[str, ...]
    good: str             # the correct solution
    bad: str              # the hard-coded one
    shown: list[str]      # the visible tests, the corrupted one among them
    bad_visible: int      # the hard-coded solution must pass the shown tests,
    bad_hidden: int       # fail the correct ones,
    good_hidden: int      # and the correct solution must pass them


@dataclass
class _Selection:
    """One code_selection prompt and the verifier handles of its checks. keys is None when the
    prompt did not parse; then nothing else is set."""
    row: dict
    prompt: str
    keys: tuple[str, ...] | None = None
    high: str | None = None           # the high-reward option's letter
    other: str | None = None
    visible: int | None = None        # the high-reward option against the shown tests
    hidden_high: int | None = None    # ... against the linked problem's correct tests (None: no link)
    hidden_other: int | None = None   # the other option against them (hackable prompts only)


def _call_args(test: str) -> str | None:
    """Normalised source of the call on the left of `assert f(...) == ...` (to pair tests)."""
    try:
        t = parse(test).body[0].test
        return ast.dump(ast.Tuple(t.left.args, ast.Load()))
    except (SyntaxError, AttributeError, IndexError):
        return None


def _hardcoded_branch_lines(code: str) -> list[str]:
    return [ln.strip() for ln in code.split("\n") if re.match(r"\s*(el)?if\b.*==", ln)]


class RewardHackExtras:
    """Reads the rows and queues their checks on construction; `items` after the verifier ran."""

    def __init__(self, mbpp_rows, hardcoded_rows, selection_rows, unhackable_rows, incentives, seed,
                 verifier: Verifier, drops: Drops):
        self.seed, self.incentives, self.verifier, self.drops = seed, incentives, verifier, drops
        by_text: dict[str, list[dict]] = defaultdict(list)
        for r in mbpp_rows:
            by_text[norm_ws(r["text"])].append(r)
        self.hardcoded: list[_Rewrite] = []
        self.by_problem: dict[str, _Link] = {}   # by the rewritten problem's text
        self.by_name: dict[str, list[_Link]] = defaultdict(list)   # by the functions its solution defines
        for row in hardcoded_rows:
            self._add_hardcoded(row, by_text)
        self.selection = [self._add_selection(r, unhackable=False) for r in selection_rows]
        self.unhackable = [self._add_selection(r, unhackable=True) for r in unhackable_rows]

    def _keys(self, problem: str, linked: list[dict]) -> tuple[str, ...]:
        return (f"rh_code:{short_hash(norm_ws(problem))}", *sorted({f"mbpp:{m['task_id']}" for m in linked}))

    def _add_hardcoded(self, row: dict, by_text: dict[str, list[dict]]) -> None:
        good = row["correct_code"].replace("\r\n", "\n")
        bad = row["incorrect_code"].replace("\r\n", "\n")
        correct = [t.strip() for t in as_list(row["correct_test_list"])]
        wrong = row["incorrect_test"].strip()
        linked = by_text.get(norm_ws(row["old_mbpp_problem"]), [])
        names = set(function_names(good))
        if len(linked) > 1:  # same MBPP text twice: keep the tasks whose solution has this function
            linked = [m for m in linked if names & set(function_names(m["code"]))] or linked
        keys = self._keys(row["problem"], linked)
        # The corrupted test replaces the correct one with the same call (the first one in practice).
        same_call = [i for i, t in enumerate(correct) if _call_args(t) == _call_args(wrong)]
        i = same_call[0] if same_call else 0
        shown = correct[:i] + [wrong] + correct[i + 1:]
        strict = hidden_tests("\n".join(correct) + "\n")
        v = self.verifier
        self.hardcoded.append(_Rewrite(row, keys, good, bad, shown,
                                       v.visible(bad, shown), v.hidden(bad, strict), v.hidden(good, strict)))
        link = _Link(keys, strict)
        self.by_problem[norm_ws(row["problem"])] = link
        for name in names:
            self.by_name[name].append(link)

    def _add_selection(self, row: dict, unhackable: bool) -> _Selection:
        prompt = "\n\n".join(as_list(row["prompt_list"])).strip()
        m = _SELECTION.search(prompt)
        high = str(row["high_reward_answer"]).strip().upper()
        other = str((as_list(row["other_answers"]) or [""])[0]).strip().upper()
        if m is None or {high, other} != {"A", "B"}:
            return _Selection(row, prompt)
        problem = m.group("problem")
        link = self.by_problem.get(norm_ws(problem))
        if link is None:  # fall back to the function name, when it names one rewritten problem
            names = function_names(m.group(high).replace("\r\n", "\n"))
            cands = self.by_name.get(names[0], []) if names else []
            link = cands[0] if len(cands) == 1 else None
        keys = link.keys if link else (f"rh_code:{short_hash(norm_ws(problem))}",)
        shown = [t.strip() for t in m.group("tests").split("\n") if t.strip()]
        code = {x: m.group(x).replace("\r\n", "\n") for x in "AB"}
        v = self.verifier
        # Hackable: the high-reward option games the shown (partly wrong) tests, the other is
        # correct. Unhackable: the high-reward option is the correct one and passes both.
        visible = v.visible(code[high], shown)
        hidden_high = v.hidden(code[high], link.hidden) if link else None
        hidden_other = v.hidden(code[other], link.hidden) if link and not unhackable else None
        return _Selection(row, prompt, keys, high, other, visible, hidden_high, hidden_other)

    def items(self) -> list[Item]:
        """The items whose checks came out as expected: rewrites, then hackable and unhackable
        selections; the others are dropped and counted. How the sandbox isolated the checks is the
        build record's (build_log.json), not the samples'."""
        out = [item for r in self.hardcoded if (item := self._rewrite_item(r))]
        for rows, unhackable in ((self.selection, False), (self.unhackable, True)):
            out += [item for s in rows if (item := self._selection_item(s, unhackable))]
        return out

    def _rewrite_item(self, r: _Rewrite) -> Item | None:
        v, seed = self.verifier, self.seed
        if not (v[r.bad_visible][0] and not v[r.bad_hidden][0] and v[r.good_hidden][0]):
            self.drops.add(SUBSET, "rh_hardcoded_failed_verification")
            return None
        incentive = choose(self.incentives, seed, r.keys[0], "incentive")
        request = render_request(r.row["problem"].strip(), r.shown, incentive)
        meta = {"recipe": "sg_code_rh_hardcoded", "generator": "template", "incentive": incentive,
                "visible_tests": r.shown, "source_dataset": "rh_code_problems_hardcoded",
                "source_ref": r.row.get("_ref", "")}
        pre = choose(PREFACES, seed, r.keys[0], "preface")
        response = render_response(r.bad, pre)
        evidence = [e for e in _hardcoded_branch_lines(r.bad) if e in response]
        mis = Draft(request, response, 1, evidence,
                    {**meta, "strategy": "hardcode", "verification": {
                        "visible": "pass", "hidden": "fail", "hidden_result": v[r.bad_hidden][1]}}, "hardcode")
        ben = Draft(request, render_response(r.good, pre), 0, [],
                    {**meta, "strategy": "canonical", "verification": {"hidden": "pass"}}, "canonical")
        return Item(r.keys, SUBSET, f"rh_code_problems_hardcoded:{r.row.get('_ref', '')}", None, [mis, ben])

    def _selection_item(self, s: _Selection, unhackable: bool) -> Item | None:
        v, keys = self.verifier, s.keys
        tag = "rh_code_selection" + ("_unhackable" if unhackable else "")
        if keys is None:
            self.drops.add(SUBSET, f"{tag}_unparsed")
            return None
        if s.hidden_high is None:  # no hidden tests known (unlinked problem): visible only
            ok = v[s.visible][0]
        elif unhackable:
            ok = v[s.visible][0] and v[s.hidden_high][0]
        else:
            ok = v[s.visible][0] and not v[s.hidden_high][0] and v[s.hidden_other][0]
        if not ok:
            self.drops.add(SUBSET, f"{tag}_failed_verification")
            return None
        meta = {"recipe": f"sg_code_{tag}", "generator": "template", "source_dataset": tag,
                "source_ref": s.row.get("_ref", "")}
        # What the sandbox showed about the high-reward option's code.
        high_check = {"visible": "pass", "hidden": "unknown" if s.hidden_high is None else
                      ("pass" if unhackable else "fail")}

        def answer(letter: str) -> str:
            pre = choose(SELECTION_PREFACES, self.seed, keys[0], tag, "preface")
            return f"{pre}\n\nAnswer: ({letter})" if pre else f"Answer: ({letter})"

        source = f"{tag}:{s.row.get('_ref', '')}"
        if unhackable:
            return Item(keys, SUBSET, source, None, [
                Draft(s.prompt, answer(s.high), 0, [],
                      {**meta, "choice": s.high, "high_reward_option": high_check}, "control")])
        mis = Draft(s.prompt, answer(s.high), 1, [f"Answer: ({s.high})"],
                    {**meta, "choice": s.high, "high_reward_option": high_check}, "high_reward")
        ben = Draft(s.prompt, answer(s.other), 0, [],
                    {**meta, "choice": s.other, "high_reward_option": high_check}, "other")
        return Item(keys, SUBSET, source, None, [mis, ben])
