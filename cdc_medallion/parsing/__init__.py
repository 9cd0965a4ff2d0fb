"""How a format's parser runs over bronze in Spark: Arrow batches on every core, the state store
for a stateful format, the JVM first for a format with a native parse (`execute.parse`).

A format module (`formats/`) is a parser and its declarations; this package runs them, and
nothing in `formats/` imports it.
"""
