"""The shortcut audit (automon.data.audit): it finds a planted cue and names it, stays near chance
without one, fails or warns the build by config, and gives the same bytes twice. The panel's members
one by one, the z-test and AFLite: test_audit_panel.py."""

from __future__ import annotations

import json
import random

import pytest
from omegaconf import OmegaConf

from support import REPO, build_cfg, make_build, run_script
from automon.config.build import AuditConfig
from automon.data.audit import audit, card_section, shortcut_notes
from automon.data.build import BuildError, run_build
from automon.schema import SUBSETS, Sample

WORDS = [f"w{i}" for i in range(300)]


def _split(split: str, n: int, cue: str | None, seed: int) -> list[Sample]:
    rng = random.Random(f"{split}:{seed}")
    out = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(WORDS) for _ in range(rng.randrange(15, 45))]
        if cue and label:
            words.insert(rng.randrange(len(words)), cue)
        out.append(Sample(f"{split}-{i}", f"{split}-p{i // 2}", split, *SUBSETS["sg_qa"], "sg_qa", "synthetic",
                          "What is the answer?", " ".join(words), label))
    return out


@pytest.mark.parametrize("cue", ["w999", None])  # as long as the other words: length cannot tell
def test_the_lexical_baseline_finds_a_planted_cue_and_names_it(cue):
    cfg = AuditConfig(members=["word", "char", "length"], hard_subset=False)  # MiniLM: test_audit_panel.py
    res = audit(_split("train", 600, cue, 0), _split("test", 300, cue, 1), cfg)
    r = res["subsets"]["sg_qa"]
    word, length = r["members"]["word"], r["members"]["length"]
    if cue:
        assert word["auroc"] > 0.9 and word["pair_accuracy"] > 0.85 and r["exceeds"] and "word" in r["exceeded_by"]
        assert word["ngrams"]["misbehavior"][0][0] == cue and res["exceeding"] == ["sg_qa"]
    else:
        assert 0.35 < word["auroc"] < 0.65 and not r["exceeds"] and res["exceeding"] == []
    assert 0.35 < length["auroc"] < 0.7  # the cue adds one word to 15-44: length barely tells
    assert res == audit(_split("train", 600, cue, 0), _split("test", 300, cue, 1), cfg)


def _subset_split(subset: str, split: str, n: int, seed: int) -> list[Sample]:
    return [Sample(s.id.replace(split, f"{subset}-{split}"), s.pair_id, split, *SUBSETS[subset], subset, s.source,
                   s.request, s.response, s.label) for s in _split(split, n, "w999" if subset == "sg_qa" else None, seed)]


def test_half_of_the_subsets_in_a_forked_child_give_the_serial_result():
    """audit() runs about half of the subsets in a forked child: the section is the serial one, in the
    subsets' order, whichever process ran each."""
    cfg = AuditConfig(members=["word", "char", "length"])
    subsets = ["safety_qa", "syco_qa", "sg_qa"]
    train = [s for i, sub in enumerate(subsets) for s in _subset_split(sub, "train", 200 + 100 * i, i)]
    test = [s for i, sub in enumerate(subsets) for s in _subset_split(sub, "test", 100, 10 + i)]
    parallel, serial = audit(train, test, cfg), audit(train, test, cfg, parallel=False)
    assert json.dumps(parallel) == json.dumps(serial)  # the same values in the same order
    assert list(parallel["subsets"]) == subsets and parallel["exceeding"] == ["sg_qa"]


def test_the_ceiling_fails_or_warns_the_build(tmp_path):
    """The synthetic sources write misbehavior with fixed words, so some subsets exceed: with
    on_exceed=fail nothing is written and the message names the give-away n-grams."""
    from support import SMALL_TEST
    from automon.sources.synthetic import write_synthetic_root

    root = write_synthetic_root(tmp_path / "raw", n=40)
    common = [f"sources.root={root}", *SMALL_TEST]
    m = run_build(build_cfg([*common, f"out={tmp_path / 'warn'}", "audit.on_exceed=warn"]))
    assert m["audit"]["exceeding"], m["audit"]
    assert (tmp_path / "warn" / "audit.png").stat().st_size > 0
    card = (tmp_path / "warn" / "README.md").read_text()
    assert "## Shortcut audit" in card
    notes = shortcut_notes(m["config"]["wordings"]["version"])
    for sub in m["audit"]["exceeding"]:  # each over-ceiling subset says why: its recorded note or that none is
        line = next(ln for ln in card.splitlines() if ln.startswith(f"- **{sub}** is over the ceiling"))
        assert line.endswith(notes[sub]) if sub in notes else "no reason recorded" in line
    sub = m["audit"]["exceeding"][0]
    first = m["audit"]["subsets"][sub]["exceeded_by"][0]
    with pytest.raises(BuildError, match=f"{sub}: {first} AUROC") as e:
        run_build(build_cfg([*common, f"out={tmp_path / 'fail'}", "audit.on_exceed=fail"]))
    assert repr(m["audit"]["subsets"][sub]["members"]["word"]["ngrams"]["misbehavior"][0][0]) in str(e.value)
    assert not (tmp_path / "fail").exists()


def test_audit_cli_reports_on_an_existing_build_without_touching_it(tmp_path):
    build = make_build(tmp_path / "b", pairs_per_subset=6, train_per_subset=20)
    before = (build / "manifest.json").read_bytes()
    args = [f"build={build}", f"out={tmp_path / 'a'}"]
    p = run_script(REPO / "data_build" / "audit.py", *args, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "a" / "audit.json").read_text())
    assert set(res["subsets"]) == set(SUBSETS) and "| sg_code |" in p.stdout
    assert (build / "manifest.json").read_bytes() == before
    # the synthetic texts carry their label in fixed words: every subset exceeds, and fail exits 2
    p = run_script(REPO / "data_build" / "audit.py", *args, "audit.on_exceed=fail", timeout=300)
    assert p.returncode == 2 and "can be told apart from the response alone" in p.stderr


def test_shortcut_notes_are_card_text_not_build_identity():
    from automon.data.identity import config_identity

    cfg = AuditConfig(members=["word", "length"], hard_subset=False)
    res = audit(_split("train", 200, "w999", 0), _split("test", 100, "w999", 1), cfg)
    assert "because of w999" in card_section(res, {"sg_qa": "because of w999"})
    assert "no reason recorded" in card_section(res) and "over the ceiling" not in card_section(
        audit(_split("train", 200, None, 0), _split("test", 100, None, 1), cfg))
    assert set(shortcut_notes("v9")) == {"safety_qa", "safety_code"} and shortcut_notes("no-such-version") == {}
    a, b = (build_cfg([f"wordings.shortcut_notes.safety_qa={why}"]) for why in ("one", "two"))
    assert config_identity(a) == config_identity(b) and "shortcut_notes" not in config_identity(a)["wordings"]
    # every other wordings key is the build's identity, as the config holds it
    assert config_identity(a)["wordings"] == {k: v for k, v in OmegaConf.to_container(a.wordings).items()
                                              if k != "shortcut_notes"}
