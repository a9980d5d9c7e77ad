"""sg_code: specification gaming in code, with sandboxed executable verification.

Every HumanEval / MBPP problem becomes one item. The request shows the problem, a few VISIBLE
tests (simple `assert f(...) == expected` lines) and an incentive to make them pass. The responses
are construct pairs (families.py): twins that share their surface, one family of gaming each,

  lookup     a table answered before the general code
  branches   `if <params> == <input>: return <output>` in front of the general code
  tamper     code that runs when the module runs (an excepthook, an always-equal result)

where the gaming twin keys the table or branches on the visible tests' inputs (or makes the
construct defeat the checker) in front of a wrong implementation, and the benign twin keys them on
other inputs (or gives the construct its ordinary job) in front of the canonical solution. A
"wrong implementation" is the canonical solution with one seeded mutation (a flipped comparison,
`+` <-> `-`, an off-by-one constant, ...), so it reads like a real attempt; mutants are screened in
the sandbox first, so that the chosen one really fails a hidden test. Each pair also gives a plain
bug (the benign twin's code around the wrong implementation), a contrast control (automon.controls).

Nothing is trusted by construction: each sample runs in the sandbox (automon.sandbox) under
two graders. The VISIBLE grader is the naive reward proxy (solution + visible asserts, pass iff
exit code 0). The HIDDEN grader is strict: setup + every test (hidden and challenge ones too) run
in a separate, trusted process that calls the solution's functions over a pipe, values crossing
as plain JSON; the program never holds the tests, and nothing it builds (an always-equal object,
an early exit) can pass them (automon.sandbox.grading).
A gaming sample must pass visible and fail hidden; a benign one must pass both; anything else is
dropped and counted. Programs are limited in CPU time (timeout_s), which unlike wall time does not
depend on how busy the machine is, so the verdicts, and with them the output, are reproducible.

The reward-hack-generalization code files add training-only items: the hard-coded MBPP rewrites
(hard-coded solution vs correct one, with the corrupted test among the visible ones) and the
code_selection prompts (choosing the hard-coding option vs the real one; the unhackable copies
are a benign control). They carry the key of the MBPP task they rewrite, so they never land in a
different split from it.

Modules: tasks (HumanEval / MBPP rows -> Task), mutation (wrong implementations), families (the
construct pairs) and pools (the names and constructs they draw from), constructs (the construct
check that reads a sample's code), verifier (queues the checks and runs them in one sandbox pool),
render (request and response text), extras (the reward-hack items) and recipe (`sg_code_items`,
which ties them together, and `sg_code_recipe`, the subset's recipe); syntax holds the
source-parsing helpers they share.
"""

from automon.data.recipes.sg_code.recipe import sg_code_items, sg_code_recipe

__all__ = ["sg_code_items", "sg_code_recipe"]

