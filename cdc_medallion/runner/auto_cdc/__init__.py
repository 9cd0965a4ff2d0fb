"""`create_auto_cdc_flow` semantics on Delta tables: SCD type 1 and 2, out-of-order safe.

The package, module by module: `feed` turns a batch into events and keeps its tombstones;
`applier` rebuilds the touched keys from the target and the tombstones; `scd1` and `scd2`
turn the rebuilt events into the rows each type stores; `target` writes them in one MERGE.

One micro-batch of a flow's change feed at a time (the flow's `foreachBatch`). For the keys a
batch touches, the target's existing rows are turned back into events, merged with the new
events, and each key's state is rebuilt in sequence order; the changed rows go into the target
in one MERGE. A late event therefore lands at its place in the history, and a late update never
resurrects a deleted row: deletes leave a tombstone in the flow's state table, truncates a
table-wide marker (DLT keeps tombstones the same way). SCD1 skips the rebuild when nothing needs
it (no truncate ever, no partial image in the batch): each key's last event then decides alone,
and the MERGE compares sequences with the stored row (`scd1.write_latest`).

Rules (as in DLT): a new SCD2 version starts when a tracked column changes or the key comes
back after a delete; changes to untracked columns update the current version in place; a
delete closes the open version at the delete's sequence. Columns absent from a partial image
keep their previous value. Crash safety: `applier`.
"""
