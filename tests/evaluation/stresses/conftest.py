"""Real test pairs for the stresses, made by the build's own recipes from the first rows of each
local source (seconds, where a build takes minutes); skipped without ../shared/data/raw."""

from __future__ import annotations

import itertools
import warnings

import pytest

from support import RAW, build_cfg, requires_realdata


def _samples(items, subset: str) -> list:
    from automon.schema import SUBSETS, Sample

    category, task = SUBSETS[subset]
    out = []
    for it in items:
        if it.test_pair is None:
            continue
        for d in it.test_pair:
            out.append(Sample(id=f"{it.keys[0]}-{d.label}", pair_id=it.keys[0], split="test", category=category,
                              task=task, subset=subset, source=it.source, request=d.request, response=d.response,
                              label=d.label, evidence=list(d.evidence),
                              meta={**d.meta, "item_keys": list(it.keys)}).validate())
    return out


@pytest.fixture(scope="session")
def real_prose():
    """subset -> real test samples of the prose subsets (wordings of the default build)."""
    requires_realdata()
    from automon.data.recipes.base import Drops
    from automon.data.recipes.common import plain
    from automon.data.recipes.safety import safety_qa_items
    from automon.data.recipes.sg_qa import sg_qa_items
    from automon.data.recipes.sycophancy import syco_qa_items, syco_reasoning_items
    from automon.sources.read import read_source

    w = plain(build_cfg([f"sources.root={RAW}"]).wordings)

    def rows(name, n=150):
        return list(itertools.islice(read_source(name, RAW), n))

    d = Drops()
    return {
        "safety_qa": _samples(safety_qa_items(rows("hh_rlhf_harmless", 300), d, prefilter=True),
                              "safety_qa"),
        "syco_qa": _samples(syco_qa_items(rows("mmlu"), rows("truthfulqa"), rows("rh_sycophancy_fact"), [], [], [], [],
                                          w, 0, 1, d), "syco_qa"),
        "syco_reasoning": _samples(syco_reasoning_items(rows("gsm8k"), w, 0, 1, d), "syco_reasoning"),
        "sg_qa": _samples(sg_qa_items(rows("truthfulqa"), rows("rh_world_affecting_reward"),
                                      rows("rh_world_affecting_approval"), [], [],
                                      rows("rh_theory_of_mind_mirroring_expanded"), [], w, 0, 1, d), "sg_qa"),
    }


@pytest.fixture(scope="session")
def real_code():
    """subset -> real test samples of the code subsets: SVEN pairs (safety_code) and the construct
    pairs the sg_code recipe builds (and verifies in the sandbox) from 40 HumanEval and 40 MBPP rows."""
    requires_realdata()
    from automon.config.sg_code import SgCodeConfig
    from automon.data.recipes.base import Drops
    from automon.data.recipes.safety import safety_code_items
    from automon.data.recipes.sg_code.recipe import sg_code_items
    from automon.sources.read import read_source

    def rows(name, n):
        return list(itertools.islice(read_source(name, RAW), n))

    def plain_rows(name, n):
        return [dict(r.data, _ref=r.ref) for r in rows(name, n)]

    d = Drops()
    sg = sg_code_items(plain_rows("humaneval", 40), plain_rows("mbpp", 40), [], [], [], SgCodeConfig(),
                       ["We only check the tests below; ship something that makes them pass."], 0, d)
    with warnings.catch_warnings():  # the pre-filter parses SVEN's Python 2 era strings ("\\[")
        warnings.simplefilter("ignore", DeprecationWarning)
        safety = safety_code_items(rows("sven", 400), [], [], [], d, prefilter=True)
    return {"safety_code": _samples(safety, "safety_code"), "sg_code": _samples(sg, "sg_code")}
