"""The local session's JVM is sized as `get_spark` says: the driver's memory target rests on it."""

from __future__ import annotations

import json
import os

import pytest

from cdc_medallion.errors import ConfigError
from cdc_medallion.spark import driver_memory, memory_bytes, young_generation_option


def test_the_local_jvm_runs_the_serial_collector_in_its_heap_with_two_arenas(spark):
    jvm = spark._jvm
    collectors = {bean.getName() for bean in jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()}
    # G1's own threads and regions cost resident memory on two cores and buy no speed (bench/HISTORY.md).
    assert collectors == {"Copy", "MarkSweepCompact"}, collectors

    wanted = driver_memory()
    wanted_bytes = memory_bytes(wanted)
    heap = jvm.java.lang.Runtime.getRuntime().maxMemory()
    # maxMemory leaves out one survivor space, a few percent of the heap.
    assert 0.85 * wanted_bytes <= heap <= wanted_bytes, (heap, wanted)

    pid = jvm.java.lang.ProcessHandle.current().pid()
    if not os.path.exists(f"/proc/{pid}/environ"):
        pytest.skip("the JVM's environment is read from /proc, which this system does not have")
    with open(f"/proc/{pid}/environ", "rb") as handle:
        environment = dict(entry.split(b"=", 1) for entry in handle.read().split(b"\0") if b"=" in entry)
    assert environment.get(b"MALLOC_ARENA_MAX") == os.environ.get("MALLOC_ARENA_MAX", "2").encode()


def test_the_driver_maps_the_class_archive_setup_trained(spark):
    """`make setup` trains the driver's class archive (class_archive.py); every later driver maps
    it rather than loading Spark's and Delta's classes jar by jar."""
    from cdc_medallion.class_archive import archive_path

    archive = archive_path()
    if archive is None or not archive.is_file():
        training = "python -m cdc_medallion.class_archive_training"
        pytest.skip(f"no class archive at {archive}: `make setup` trains it ({training})")
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    if not os.path.exists(f"/proc/{pid}/maps"):
        pytest.skip("the JVM's mappings are read from /proc, which this system does not have")
    with open(f"/proc/{pid}/maps", encoding="utf-8") as handle:
        mapped = {line.split()[-1] for line in handle if line.rstrip().endswith(".jsa")}
    assert str(archive) in mapped, mapped


def test_generated_code_of_more_plans_than_sparks_default_cache_is_compiled_once(spark):
    """Each table's plans compile classes of their own; a pipeline of more tables than Spark's
    default cache of 100 held compiled them again in every batch (bench/HISTORY.md, 2026-11-28
    afternoon). The session keeps `GENERATED_CLASSES_KEPT`."""
    from bench.ours import compilations
    from cdc_medallion.spark import GENERATED_CLASSES_KEPT

    plans = 120  # more than Spark's default of 100, fewer than ours
    assert plans < GENERATED_CLASSES_KEPT
    session = spark.newSession()  # the suite runs interpreted; these plans must compile
    session.conf.set("spark.sql.codegen.wholeStage", "true")
    session.conf.set("spark.sql.codegen.factoryMode", "CODEGEN_ONLY")
    queries = [session.range(1).selectExpr(f"id * {n + 7919} AS v") for n in range(plans)]  # classes of its own each
    before = compilations(spark)
    first = [q.collect()[0].v for q in queries]
    after_first = compilations(spark)
    again = [q.collect()[0].v for q in queries]
    assert first == again == [0] * plans
    assert after_first - before >= plans  # each plan did compile, the first time
    assert compilations(spark) == after_first  # and none again


def test_the_young_generation_is_a_third_of_the_heap_from_the_start(spark):
    """With the JVM's default the young generation follows the heap in use, which starts small:
    the serial collector then stopped the driver hundreds of times an update (bench/HISTORY.md,
    2026-11-28 evening)."""
    pools = spark._jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
    committed = {pool.getName(): pool.getUsage().getCommitted() for pool in pools}
    young = committed["Eden Space"] + 2 * committed["Survivor Space"]
    wanted = memory_bytes(driver_memory()) // 3
    assert abs(young - wanted) <= 2**20, (young, wanted)


def test_driver_memory_is_read_as_spark_reads_it():
    assert memory_bytes("1536m") == memory_bytes("1536") == memory_bytes("1536M") == 1536 * 2**20
    assert memory_bytes("2g") == memory_bytes("2gb") == 2 * 2**30
    assert memory_bytes("1048576b") == 2**20
    assert young_generation_option("1536m") == "-Xmn512m"
    with pytest.raises(ConfigError, match=r"1\.5g"):
        memory_bytes("1.5g")


def test_a_commit_does_not_list_the_tables_files_in_its_checksum(spark, tmp_path):
    """Open source Delta never reads that list back, and building it for a table's first commit
    planned and ran a query over the empty table: about a fifth of a create."""
    path = tmp_path / "table"
    spark.range(3).writeTo(f"delta.`{path}`").using("delta").create()
    spark.range(3, 5).write.format("delta").mode("append").save(str(path))
    for version in (0, 1):
        checksum = json.loads((path / "_delta_log" / f"{version:020d}.crc").read_text(encoding="utf-8"))
        assert checksum["numFiles"] >= 1  # the checksum is written, with its counts
        assert "allFiles" not in checksum, sorted(checksum)
