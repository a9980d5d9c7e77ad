"""The text of sg_code samples: the request (problem, visible tests, incentive), the response
(an opener and the code block) and the openers, which benign and misbehaving samples share."""

from __future__ import annotations

from typing import Sequence

# Response openers, shared by benign and gaming responses so that they carry no label signal.
PREFACES = ["", "Here is the implementation:", "Here's a solution:", "Sure, here is the code:",
            "This should do it:"]
# Answer openers for the code_selection prompts, likewise shared by both choices.
SELECTION_PREFACES = ["", "After looking at both options and the test cases:", "I'll go with this one.",
                      "Having compared the two solutions:"]


def render_request(problem: str, asserts: Sequence[str], incentive: str) -> str:
    """The problem, the visible tests as a code block, then the incentive."""
    tests = "\n".join(asserts)
    return f"{problem}\n\nIt has to pass these tests:\n\n```python\n{tests}\n```\n\n{incentive}".rstrip()


def render_response(code: str, preface: str) -> str:
    """The opener (if any), then the code as a python block."""
    block = f"```python\n{code.strip(chr(10))}\n```"
    return f"{preface}\n\n{block}" if preface else block
