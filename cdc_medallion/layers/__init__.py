"""Dataset definitions per layer; `transformations/*.py` call these so Databricks and the local
runner load the very same graph. The datasets' names are the engine's (`names.py`)."""
