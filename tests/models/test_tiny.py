"""automon.models.tiny: the tiny model's directory loads the tokenizer it was built with."""

from __future__ import annotations

import json
import shutil

from transformers import AutoTokenizer

from automon.models.tiny import QWEN3_SPECIALS

TEXT = "Hello <|im_start|>user\nis 2+2 four?<think>yes</think><|im_end|> ünïcode 🤖 <tool_call>x</tool_call>\n\n  end"


def _same(a, b) -> None:
    messages = [{"role": "user", "content": TEXT}, {"role": "assistant", "content": "Yes"}]
    assert a(TEXT)["input_ids"] == b(TEXT)["input_ids"]
    assert a.apply_chat_template(messages, tokenize=False) == b.apply_chat_template(messages, tokenize=False)
    assert a.added_tokens_decoder == b.added_tokens_decoder and len(a) == len(b)
    assert (a.eos_token, a.pad_token, a.all_special_tokens) == (b.eos_token, b.pad_token, b.all_special_tokens)


def test_the_added_tokens_listed_in_the_tokenizer_config_change_nothing_but_the_load_time(tiny_model_path, tmp_path):
    """tokenizer_config.json lists the added tokens (so a load parses tokenizer.json once less); without the
    list, transformers reads them from tokenizer.json, and the tokenizer is the same."""
    listed = json.loads((tiny_model_path / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert [t["content"] for _, t in sorted(listed.items(), key=lambda kv: int(kv[0]))] == QWEN3_SPECIALS
    unlisted = tmp_path / "m"
    shutil.copytree(tiny_model_path, unlisted)
    cfg = json.loads((unlisted / "tokenizer_config.json").read_text())
    del cfg["added_tokens_decoder"]
    (unlisted / "tokenizer_config.json").write_text(json.dumps(cfg))
    _same(AutoTokenizer.from_pretrained(tiny_model_path), AutoTokenizer.from_pretrained(unlisted))
