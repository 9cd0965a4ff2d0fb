"""The working columns of an auto CDC flow's rebuild (`auto_cdc/`), on its events only: never
stored. The columns its targets store are the engine's names (`names.py`)."""

SEQ, DELETE, TRUNCATE, PRESENT, ORIGIN = "__seq", "__is_delete", "__is_truncate", "__present", "__origin"
OLD_END = "__old_end"  # SCD2: the end a version had in the target, on the event that stands for that version
ACTION = "__action"
