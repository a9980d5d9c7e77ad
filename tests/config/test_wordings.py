"""The wordings schema (automon.config.wordings): every released version loads into it, a misspelt
key in a wordings file fails, and sg_code's template version is a setting of its own."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from support import CONF, build_cfg
from automon.config.wordings import SG_CODE_TEMPLATES, WordingsConfig

VERSIONS = sorted(p.stem for p in (CONF / "wordings").glob("v*.yaml"))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_wordings_version_loads_into_the_schema(version):
    w = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(WordingsConfig),
                                            OmegaConf.load(CONF / "wordings" / f"{version}.yaml")))
    assert w.version == version
    # v1 keeps v1's sg_code templates; v2-v4 use v2's, v5 and later v3's (construct pairs)
    expected = {"v1": "v1", "v5": "v3", "v6": "v3", "v7": "v3", "v8": "v3", "v9": "v3"}.get(version, "v2")
    assert w.sg_code_templates == expected and w.sg_code_templates in SG_CODE_TEMPLATES


def test_a_misspelt_key_in_a_wordings_file_fails_naming_it(tmp_path):
    text = (CONF / "wordings" / "v4.yaml").read_text().replace("sg_code_templates:", "sg_code_template:")
    (tmp_path / "v5.yaml").write_text(text)
    with pytest.raises(ConfigKeyError, match="sg_code_template"):
        OmegaConf.merge(OmegaConf.structured(WordingsConfig), OmegaConf.load(tmp_path / "v5.yaml"))


def test_an_unknown_sg_code_template_version_stops_the_build_before_it_reads_anything():
    from automon.data.check import BuildError, check_config

    check_config(build_cfg(["wordings=v3"]))
    with pytest.raises(BuildError, match=r"wordings.sg_code_templates.*v9"):
        check_config(build_cfg(["wordings.sg_code_templates=v9"]))


def test_v1_passes_the_checks_and_an_empty_phrase_list_still_fails():
    """v1 leaves openers and tails empty (its surface forms, before v2's balanced ones): the check of
    empty phrase lists refused `wordings=v1`, which docs/data.md says still builds."""
    from automon.data.check import BuildError, check_config

    check_config(build_cfg(["wordings=v1"]))
    for key in ("tails", "openers", "syco_qa_cues"):  # one of the pair empty is neither v1 nor v2
        with pytest.raises(BuildError, match=rf"wordings.{key} is empty"):
            check_config(build_cfg([f"wordings.{key}=[]"]))
