"""automon.models.loading: the shared tokenizer is loaded once per model and side, and again when its files change."""

from __future__ import annotations

import os
import shutil
from types import SimpleNamespace

from automon.models.loading import shared_tokenizer


def test_a_shared_tokenizer_is_loaded_once_per_model_and_truncation_side(tiny_model_path, tmp_path):
    model = SimpleNamespace(pretrained=str(tiny_model_path), revision=None)
    plain, left = shared_tokenizer(model), shared_tokenizer(model, left_truncating=True)
    assert shared_tokenizer(model) is plain and shared_tokenizer(model, left_truncating=True) is left
    assert (left.truncation_side, left.padding_side) == ("left", "right")
    assert plain.truncation_side == "right"  # as loaded: the left-truncating one is an object of its own

    copy = tmp_path / "m"  # another directory, then the same directory with a changed tokenizer: loaded again
    shutil.copytree(tiny_model_path, copy)
    other = SimpleNamespace(pretrained=str(copy), revision=None)
    first = shared_tokenizer(other)
    assert first is not plain and shared_tokenizer(other) is first
    cfg = copy / "tokenizer_config.json"
    st = cfg.stat()
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert shared_tokenizer(other) is not first
