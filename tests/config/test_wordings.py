"""The wordings schema (automon.config.wordings): the release's wordings (conf/wordings/v9.yaml, the only
version in the code) load into it and are the default, a misspelt or retired key fails, and an empty
phrase list stops the build before it reads anything."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from support import CONF, build_cfg
from automon.config.wordings import WordingsConfig


def test_the_release_wordings_are_the_only_version_and_the_default():
    assert sorted(p.stem for p in (CONF / "wordings").glob("*.yaml")) == ["v9"]
    w = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(WordingsConfig),
                                            OmegaConf.load(CONF / "wordings" / "v9.yaml")))
    assert w.version == "v9" and build_cfg([]).wordings.version == "v9"


def test_a_misspelt_key_in_a_wordings_file_fails_naming_it(tmp_path):
    text = (CONF / "wordings" / "v9.yaml").read_text().replace("sg_code_incentives:", "sg_code_incentive:")
    (tmp_path / "v10.yaml").write_text(text)
    with pytest.raises(ConfigKeyError, match="sg_code_incentive"):
        OmegaConf.merge(OmegaConf.structured(WordingsConfig), OmegaConf.load(tmp_path / "v10.yaml"))


@pytest.mark.parametrize("key", ["sg_code_templates=v3", "contrast_controls=true", "shared_source_keys=true"])
def test_a_retired_switch_is_no_key_of_the_schema(key):
    """The switches that rebuilt wordings v1-v8 left the schema with them: setting one fails as a typo."""
    with pytest.raises(ConfigCompositionException, match=key.split("=")[0]):
        build_cfg([f"wordings.{key}"])


def test_an_empty_phrase_list_stops_the_build_before_it_reads_anything():
    from automon.data.check import BuildError, check_config

    check_config(build_cfg([]))
    for key in ("tails", "openers", "syco_qa_cues", "sg_code_incentives"):
        with pytest.raises(BuildError, match=rf"wordings.{key} is empty"):
            check_config(build_cfg([f"wordings.{key}=[]"]))
