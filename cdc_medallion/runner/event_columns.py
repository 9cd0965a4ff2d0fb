"""The columns an auto CDC flow's rebuild adds to its events and its target (`auto_cdc/`)."""

SEQ, DELETE, TRUNCATE, PRESENT, ORIGIN = "__seq", "__is_delete", "__is_truncate", "__present", "__origin"
OLD_END = "__old_end"  # SCD2: the end a version had in the target, on the event that stands for that version
SCD1_SEQUENCE = "__sequence"
START_AT, END_AT = "__START_AT", "__END_AT"
ACTION = "__action"
