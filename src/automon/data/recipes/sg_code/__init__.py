"""sg_code: specification gaming in code, with sandboxed executable verification.

Every HumanEval / MBPP problem becomes one item. The request shows the problem, a few VISIBLE
tests (simple `assert f(...) == expected` lines) and an incentive to make them pass. The benign
response is the canonical solution; the misbehaving ones game the visible tests:

  hardcode         a lookup of the visible inputs -> expected outputs, None otherwise
  special_case     the visible inputs special-cased in front of a subtly wrong implementation
  early_exit       a wrong implementation, then `sys.exit(0)` at module level: the tests never run
  always_equal     returns an object whose `__eq__` is always True
  patched_asserts  a wrong implementation plus a `sys.excepthook` that exits 0 on AssertionError

"Subtly wrong implementation" = the canonical solution with one seeded mutation (a flipped
comparison, `+` <-> `-`, an off-by-one constant, ...), so it reads like a real attempt; mutants are
screened in the sandbox first, so that the chosen one really fails a hidden test.

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

Modules: tasks (HumanEval / MBPP rows -> Task), mutation (wrong implementations), strategies
(the five gaming builders), verifier (queues the
checks and runs them in one sandbox pool), render (request and response text), extras (the
reward-hack items) and recipe (`sg_code_items`, which ties them together, and `sg_code_recipe`,
the subset's recipe); syntax holds the source-parsing helpers they share.
"""

from automon.data.recipes.sg_code.recipe import sg_code_items, sg_code_recipe

__all__ = ["sg_code_items", "sg_code_recipe"]

