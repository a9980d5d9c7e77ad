"""Policy-model generation (generator=policy): a real model answers the benchmark's requests.

A layer below `automon.data`: the data build uses it (each subset's policy recipe,
SubsetSpec.policy_recipe, is in automon.data.recipes) and it imports nothing of the build. It depends
on the judge backends (their `generate` capability), which the model-free template recipes never import.

- `extract`: answer extractors per task (choice letter, GSM8K final number, TruthfulQA answer lists).
- `counterfactual`: the paper's filter for sycophancy (correct without the cue, wrong with it) and
  the per-source funnel counts.
- `generate`: cached, resumable generation through any judge backend.
- `run`: the policy model of a build (`Policy`), its model and backend configs.
"""
