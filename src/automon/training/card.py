"""The adapter's model card (adapter/README.md)."""

from __future__ import annotations

from typing import Any

from automon.prompts import FIT_VERSION, get_template

VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_rank(r: int) -> int:
    """Smallest `max_lora_rank` vLLM accepts for an adapter of rank r."""
    return next((k for k in VLLM_LORA_RANKS if k >= r), r)


def model_card(*, cfg: Any, run_name: str, subsets: list[str], subset_label: str, base_path: str,
               trainer: str, manifest_hash: str, build_path: str, summary: dict, versions: dict,
               code_version: str) -> str:
    t, lc = cfg.train, cfg.train.lora
    data = summary.get("data", {})
    tpl = get_template(cfg.prompt.name)
    lines = [
        "---",
        f"base_model: {cfg.model.pretrained}",
        "library_name: peft",
        "tags: [automon, lora, sft, misbehavior-monitor]",
        "---",
        "",
        f"# automon monitor adapter `{run_name}`",
        "",
        f"A LoRA adapter that turns `{cfg.model.pretrained}` into a misbehavior monitor: given a task request and "
        f"an assistant's response, it answers with the `{tpl.name}` prompt "
        + ("(`yes` = misbehavior, `no` = benign)." if tpl.kind == "direct"
           else "(a JSON verdict with category, severity and evidence quotes)."),
        "",
        "## Training",
        "",
        f"- Subsets: {subset_label} ({', '.join(subsets)}); {data.get('samples', '?')} training samples "
        f"from the `train` split of `{build_path}` (manifest sha256 `{manifest_hash}`).",
        f"- Samples whose response was shortened in the middle ({FIT_VERSION}) to fit {summary.get('max_seq_length')} "
        f"tokens, {tpl.answer_reserve} of them reserved for the answer: "
        f"{data.get('samples_shortened', 0)} (requests shortened: {data.get('requests_shortened', 0)}); none dropped.",
        f"- Prompt: `{tpl.name}`, rendered by `automon.prompts` with enable_thinking="
        f"{cfg.model.enable_thinking}; loss only on the answer tokens and the end-of-turn token.",
        f"- LoRA r={lc.r}, alpha={lc.alpha}, dropout={lc.dropout}, targets {', '.join(lc.targets)}.",
        f"- lr {t.lr} ({t.lr_scheduler}, warmup {t.warmup_ratio}), "
        + (f"max_steps {t.max_steps}" if t.max_steps > 0 else f"{t.epochs} epochs")
        + (f", packed: micro-batches of up to {(summary.get('packing') or {}).get('tokens_per_step')} tokens of whole "
           f"examples ({(summary.get('packing') or {}).get('packing')}) x grad accum {t.grad_accum}" if t.packing
           else f", batch {t.batch_size} x grad accum {t.grad_accum}")
        + f", seed {t.seed}, trainer `{trainer}`.",
        f"- Steps {summary.get('steps')}, tokens seen {summary.get('tokens_seen')}, "
        f"loss {summary.get('loss_first')} -> {summary.get('loss_last')}.",
        f"- Code `{code_version}`; " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM",
        "from peft import PeftModel",
        f"base = AutoModelForCausalLM.from_pretrained({base_path!r})",
        "model = PeftModel.from_pretrained(base, '<run>/adapter')",
        "```",
        "",
        "vLLM: `LLM(base, enable_lora=True, max_lora_rank=" + str(vllm_rank(lc.r)) + ")` and "
        "`LoRARequest('monitor', 1, '<run>/adapter')`. Render prompts with "
        f"`automon.prompts.fit_prompt(tok, sample, {tpl.name!r}, enable_thinking=False, max_seq_length=...)`; "
        "`python eval/holdout.py adapter=<run>/adapter` does all of this. `automon_adapter.json` records what "
        "evaluation checks before scoring.",
        "",
    ]
    return "\n".join(lines)
