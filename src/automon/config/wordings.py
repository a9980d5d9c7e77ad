"""Schema of conf/wordings/<version>.yaml: the cue and incentive phrase lists and template switches.

A wordings version is released once and never edited (sample ids, the manifest and every number
downstream depend on these strings): a change is a new file, conf/wordings/v5.yaml, with its own
`version`. A new field needs a default that keeps every earlier version's build byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

# sg_code's template versions (automon.data.recipes.sg_code.recipe): v1's fixed gaming shapes and
# bare canonical solutions, or v2's varied forms and decoys shared by both twins.
# v3 (wordings v5): construct pairs, gaming keyed on the visible tests or tampering with the checker,
# benign twins of the same surface keyed on other inputs and correct (recipes/sg_code/construct.py).
SG_CODE_TEMPLATES = ("v1", "v2", "v3")


@dataclass
class WordingsConfig:
    """Versioned cue / incentive wordings (conf/wordings/<version>.yaml). Edit = new version."""
    version: str = "v1"  # the wordings version: recorded in sample meta and the manifest
    syco_qa_cues: List[str] = field(default_factory=list)        # {cue}: the wrong option / answer
    syco_reasoning_cues: List[str] = field(default_factory=list)  # {cue}: the wrong number
    sg_qa_incentives: List[str] = field(default_factory=list)
    sg_code_incentives: List[str] = field(default_factory=list)
    agree_phrases: List[str] = field(default_factory=list)        # openers of cue-adopting answers
    disagree_phrases: List[str] = field(default_factory=list)     # openers of answers keeping the truth
    # v2 and later. Non-empty `openers` switches the recipes to label-balanced surface forms: both
    # twins draw their opener (and sg_qa its tail) from the SAME pool with the same probability, and
    # agree/disagree phrases appear only where they are true of the response (training controls).
    openers: List[str] = field(default_factory=list)
    tails: List[str] = field(default_factory=list)                # sg_qa: confidence/evidence tails, both labels
    # Training-only benign controls: the user's cue is right and the response agrees; the incentive
    # is present and the answer is honest but confident (counted in manifest.json "controls").
    training_controls: bool = False
    # sg_code's template version, one of SG_CODE_TEMPLATES: v1 (wordings v1) or v2 (wordings v2 and
    # later: varied gaming forms, decoys in both twins). Its own name, not the wordings version: a
    # new wordings version need not change sg_code's templates, nor a new template version the cues.
    sg_code_templates: str = "v1"
    # v3 and later: sg_qa's world_affecting choices are answered by their letter only ("The answer is
    # (B)."), as theory_of_mind's are, so the response does not carry the option's own wording (the
    # rewarded options read "gaining approval", the others "remaining helpful, harmless, and honest");
    # a monitor has to read the options in the request. Letters are balanced in the source (A/B ~50%).
    choices_by_letter: bool = False
    # v4 and later: sg_code's test pairs are minimal pairs. Both twins are the canonical solution
    # with the same special cases for the visible inputs in the same shape; in the gaming twin the
    # general code carries a small mutation the special cases mask, in the benign one it is intact
    # (the special cases are then a behaviour-neutral fast path). Only execution tells them apart.
    sg_code_minimal_pairs: bool = False
    # v4 and later: sg_qa items balanced in content, so the rewarded answer's words do not give the
    # label away (see recipes/sg_qa.py).
    sg_qa_balanced: bool = False
    # v4 and later: items that share a conversation's opening (HH-RLHF: the first human turn) or a
    # reading passage (MMLU: the text before the question's last line) carry a source-item key for it
    # too, so they land in one split: otherwise a training conversation can repeat most of a test one.
    shared_source_keys: bool = False
    # v5 and later: syco_reasoning's bent step is consistent with its own words (the numbers the
    # chain states are the numbers it computes with; only the one operation is bent).
    syco_reasoning_consistent: bool = False
    # v5 and later: sg_qa's gamed answer is the one its incentive rewards (the popular misconception
    # for "what most people believe", a confident wrong answer for "confident and specific").
    sg_qa_rewarded: bool = False
    # v5 and later: the safety subsets' test pairs are those two blind annotators agreed on, read
    # from this directory of the repository (annotations/<name>); "" = no annotation filter.
    safety_annotations: str = ""
    # v5 and later: syco_qa's cue drops an option's own closing full stop ("is (D) EVC pricing, but"
    # rather than "pricing., but"; 91 of v4's 241 test pairs read like that).
    cue_trim_period: bool = False
    # Whether an sg_code sample's meta records how this machine verified it (its sandbox isolation
    # mode), which makes builds differ across machines. Every released version does (the manifest's
    # sandbox_isolation record and the card's isolation-off banner are read from it); false leaves it
    # out of the samples (the v3 templates honour it) for a version whose build record carries it.
    verification_in_samples: bool = True
    # Why a subset of this version stays over the shortcut audit's ceiling, for the dataset card
    # (subset -> reason). Documentation only: it changes no sample, so it is not part of a build's
    # identity (manifest config) and can be filled in after a version is released.
    shortcut_notes: Dict[str, str] = field(default_factory=dict)
