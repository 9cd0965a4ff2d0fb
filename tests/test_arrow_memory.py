"""Arrow's freed memory goes back to the system once the process is big, and only then."""

from __future__ import annotations

import pyarrow as pa

from cdc_medallion.storage import delta_rs

MIB = 2**20


def _freed_arrow_memory() -> int:
    """Allocate about 300 MiB in many Arrow buffers, free them, and return the RSS then."""
    parts = [pa.array(range(i * 100_000, (i + 1) * 100_000)) for i in range(400)]
    assert sum(p.nbytes for p in parts) > 300 * MIB
    del parts
    return delta_rs._resident_bytes()


def test_freed_arrow_memory_is_released_above_the_threshold_and_kept_below(monkeypatch):
    monkeypatch.setattr(delta_rs, "RELEASE_ABOVE_BYTES", 0)
    delta_rs.release_unused_memory()
    base = delta_rs._resident_bytes()

    monkeypatch.setattr(delta_rs, "RELEASE_ABOVE_BYTES", 1 << 60)  # a small process: kept for reuse
    freed = _freed_arrow_memory()
    assert freed - base > 250 * MIB  # Arrow's pool keeps what was freed
    delta_rs.release_unused_memory()
    assert delta_rs._resident_bytes() - base > 250 * MIB

    monkeypatch.setattr(delta_rs, "RELEASE_ABOVE_BYTES", 0)  # a big process: handed back
    delta_rs.release_unused_memory()
    assert delta_rs._resident_bytes() - base < 50 * MIB
