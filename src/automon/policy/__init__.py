"""Policy-model generation (generator=policy): a real model answers the benchmark's requests.

Lives beside `automon.data` rather than inside it: the data build, annotation and (later) other
stages use it, and it depends on the judge backends (their `generate` capability), which the
model-free template recipes never import.

- `extract`: answer extractors per task (choice letter, GSM8K final number, TruthfulQA answer lists).
- `counterfactual`: the paper's filter for sycophancy (correct without the cue, wrong with it) and
  the per-source funnel counts.
- `generate`: cached, resumable generation through any judge backend.
- `recipes`: policy items for the build (sycophancy, sg_code labelled by execution).
"""
