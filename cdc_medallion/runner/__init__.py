"""The local runner: executes the declared graph on PySpark with Delta tables."""
