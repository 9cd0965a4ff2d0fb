"""A rule's constraint as both engines evaluate it.

A constraint is SQL a person writes in `expectations/*.yml` or in code: it may span lines and
hold `--` and `/* */` comments. Both engines evaluate the same text, made here:
`COALESCE((`, a line break, the constraint as written, a line break, `), FALSE)`.

- On lines of its own: a `--` comment ends with its line, so it cannot eat the closing
  parentheses (wrapped on one line, a comment turned every such rule into a ParseException on
  Databricks while the local runner accepted it).
- NULL-safe: a constraint that evaluates to NULL fails, as an unknown is not a pass. Natively a
  NULL result passes on Databricks, so the wrapper is what makes the two engines count alike.

The local runner (`runner/expectations.mark`) and the Databricks registry (the native
expectation decorators and `expect_all*`) both call `null_safe`; nothing else wraps a constraint.
"""

from __future__ import annotations


def null_safe(constraint: str) -> str:
    """The constraint as every engine evaluates it: NULL fails, comments end at their line."""
    return f"COALESCE((\n{constraint}\n), FALSE)"
