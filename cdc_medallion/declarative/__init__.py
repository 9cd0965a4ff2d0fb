"""The declarative facade: Lakeflow/DLT names that build immutable definitions for a registry."""
