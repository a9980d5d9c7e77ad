"""The ONE prompt renderer shared by training and evaluation (design.md s4).

Training renders `prompt_text(...)` and supervises exactly `answer_text(...) + <end of turn>`;
evaluation renders the very same `prompt_text(...)` and reads the first answer token. Never build
a monitor prompt anywhere else: a test compares both stages byte for byte.
"""

from automon.prompts.render import (  # noqa: F401
    PROMPT_VERSIONS,
    MonitorVerdict,
    answer_text,
    get_template,
    monitor_messages,
    parse_answer,
    prompt_text,
    shorten_middle,
)
