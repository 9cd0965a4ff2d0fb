"""cdc-medallion: a declarative, DLT-style medallion pipeline for change-data-capture messages.

Bronze lands raw messages byte-exact, silver parses every vendor format into one change model
under expectations, gold applies the changes as SCD1 snapshots and SCD2 histories.
"""

__version__ = "0.1.0"
