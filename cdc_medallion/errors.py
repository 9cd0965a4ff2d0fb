"""Exceptions with stable codes, so users and tests can tell failures apart without parsing text."""

from __future__ import annotations


class CdcMedallionError(Exception):
    """Base class: every error we raise on purpose carries a stable code."""

    code = "CDC_MEDALLION_ERROR"

    def __str__(self) -> str:
        return f"[{self.code}] {super().__str__()}"


class ConfigError(CdcMedallionError):
    """A configuration file is wrong; the message names the file, the key and the reason."""

    code = "INVALID_CONFIG"


class IdentifierError(CdcMedallionError):
    """A table or column name is unsafe to use in SQL or as a path."""

    code = "INVALID_IDENTIFIER"


class GraphError(CdcMedallionError):
    """The dataflow graph is inconsistent (unknown dataset, duplicate name, cycle)."""

    code = "INVALID_GRAPH"


class ExpectationFailed(CdcMedallionError):
    """An `expect_or_fail` rule failed: the flow's update is aborted with nothing committed."""

    code = "EXPECTATION_VIOLATION"


class SchemaMismatch(CdcMedallionError):
    """A batch does not match the schema of the table it is about to be committed to."""

    code = "SCHEMA_MISMATCH"


class ConcurrentRunError(CdcMedallionError):
    """Another run holds the storage lock."""

    code = "CONCURRENT_RUN"


class FlowFailed(CdcMedallionError):
    """A flow's streaming query failed; the message names the flow and the first line of why."""

    code = "FLOW_FAILED"


#: How often a query that failed for a reason outside its data (`is_transient`) is started
#: again from its checkpoint before its flows fail (Databricks retries failed flows likewise),
#: after a pause that doubles each time (1, 2, 4, 8, 16 s), so that a load peak can pass.
TRANSIENT_RETRIES = 5
#: Failures of the machine, not of a message: Spark waits a fixed 10 s for a Python process it
#: forks without its daemon (a streaming Python data source's planner, our file landing's) to
#: connect back, which a loaded host can miss.
TRANSIENT_FAILURES = ("Python worker failed to connect back", "waiting for the Python worker to connect back")


def is_transient(error: BaseException) -> bool:
    """Whether `error` is one that trying again can clear."""
    return any(text in str(error) for text in TRANSIENT_FAILURES)


def first_line(error: BaseException) -> str:
    """The line of an error that says what went wrong: Spark's own description when it has one
    (a Java exception's message, not Py4J's "An error occurred while calling ...")."""
    text = str(getattr(error, "desc", None) or error).strip()
    lines = [line.strip().removeprefix(": ").strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("An error occurred while calling")] or lines
    return lines[0][:500] if lines else type(error).__name__
