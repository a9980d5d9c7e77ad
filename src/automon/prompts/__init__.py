"""The ONE prompt renderer and fit-to-length shared by training and evaluation.

A prompt has one name, its registry key (`direct_v1`, `evidence_v1`; automon.prompts.templates).
Both stages render a sample with `fit_prompts(...)`: `prompt_text(...)` of `monitor_messages(...)`,
shortened to `max_seq_length - answer_reserve` tokens the same way. Training supervises exactly
`answer_text(...) + <end of turn>`; evaluation reads the answer after the same prompt. Never build a
monitor prompt anywhere else: a test compares both stages token for token.
"""

from automon.prompts.fit import (  # noqa: F401
    FIT_VERSION,
    FittedPrompt,
    PromptFitError,
    fit_prompt,
    fit_prompts,
    prompt_budget,
)
from automon.prompts.render import (  # noqa: F401
    PROMPT_NAMES,
    MonitorVerdict,
    answer_text,
    get_template,
    monitor_messages,
    parse_answer,
    prompt_text,
    shorten_middle,
)
