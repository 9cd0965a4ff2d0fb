"""Recording stand-ins for Databricks' `pyspark.pipelines` and `dlt`, as strict as the runtime.

What Lakeflow runs is not available off Databricks, so the facade is tested against these doubles.
They are only worth something if they refuse what Databricks refuses; each rule below names where
it comes from:

- [STUBS] the official `databricks-dlt` 0.3.0 package on PyPI (`dlt/api.py`, `dlt/helpers.py`):
  signatures, and that every decorator returns a NEW object (`helpers.__outer` returns a fresh
  `_dlt_get_dataset`), "the function that will be passed to the next decorator". So what a
  decorator declares reaches the dataset only through the object it returns: an expectation
  decorator whose result is thrown away declares nothing. `tests/test_databricks_standins.py`
  checks that the `dlt` stand-in's signatures equal the stubs'.
- [PY-REF] the Databricks pipeline Python reference (`pyspark.pipelines`: table,
  materialized_view, temporary_view, create_streaming_table, append_flow, create_auto_cdc_flow).
- [EXPECT-REF] its "Expectations" page: expectation decorators come after (below) the
  `@table` / `@materialized_view` / `@temporary_view` decorator and before the function; a
  constraint's description (name) is unique per dataset; `expect_all*` take a dict.
- [CDC-REF] the `create_auto_cdc_flow` / `apply_changes` reference and the SQL `AUTO CDC INTO`
  reference: `APPLY AS TRUNCATE WHEN` (`apply_as_truncates`) is supported for SCD type 1 only;
  `column_list` and `except_column_list` exclude each other, as do the two `track_history_*`
  lists, which are for SCD type 2.

Python itself refuses unknown keywords: each function has the parameters its reference
documents, nothing else. Checked against the current references (learn.microsoft.com
/azure/databricks/ldp/developer/ldp-python-ref-*): `table` and `materialized_view` (which adds
`refresh_policy`) take `private`; so does `create_streaming_table` (its syntax ends
`row_filter = "row-filter-clause", private = False`; older copies of the page lack it);
`temporary_view` takes `name` and `comment` only; `create_auto_cdc_flow` lists
`system_sequence_by`, `ignore_null_updates_column_list`, `ignore_null_updates_except_column_list`
and `columns_to_update` besides the older ones. The stand-ins record every accepted call in a
`Recorder`.

`wrapped(module)` gives the same stand-in with every function a `(*args, **kwargs)` wrapper, as a
runtime module may hand out: signature introspection then tells nothing, and the facade must not
depend on it. `tests/databricks_graph_run.py` runs a recorded graph on real Spark.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column
from pyspark.sql.types import StructType

Declared = tuple[str, str, Any]  # (decorator, name, constraint)


@dataclass
class Recorded:
    """One call of a dataset function, flow function or create_streaming_table."""

    api: str  # the API function called: table, materialized_view, temporary_view, view, ...
    name: str
    options: dict[str, Any]
    query: Callable[..., Any] | None = None
    expectations: list[Declared] = field(default_factory=list)


class Recorder:
    def __init__(self) -> None:
        self.datasets: dict[str, Recorded] = {}
        self.flows: dict[str, Recorded] = {}


@dataclass(frozen=True)
class Expected:
    """What an expectation decorator returns: a new object, the query and every rule so far.

    [STUBS] the decorated function is not changed; only this object carries the rules."""

    query: Callable[..., Any]
    expectations: tuple[Declared, ...]


@dataclass(frozen=True)
class Defined:
    """What a dataset or flow decorator returns ([STUBS]: `_dlt_get_dataset`): a handle, not the query."""

    api: str
    name: str


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise TypeError(message)


def _str_dict(value: Any, what: str, values: tuple[type, ...] = (str,)) -> None:
    # [PY-REF] spark_conf, table_properties: dict of str to str; expect_all*: dict of name to str or Column.
    _require(
        value is None
        or (isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, values) for k, v in value.items())),
        f"{what} must be a dict of str to {' or '.join(t.__name__ for t in values)}, got {value!r}",
    )


def _str_list(value: Any, what: str, columns: bool = False) -> None:
    # [PY-REF] partition_cols, cluster_by: list of str; [CDC-REF] the column lists: str or Column.
    kinds = (str, Column) if columns else (str,)
    _require(
        value is None or (isinstance(value, list) and all(isinstance(v, kinds) for v in value)),
        f"{what} must be a list of {' or '.join(t.__name__ for t in kinds)}, got {value!r}",
    )


def _check_common(options: dict[str, Any]) -> None:
    # [PY-REF] types of the options every dataset function shares.
    _require(options.get("name") is None or isinstance(options["name"], str), "name must be str")
    _require(options.get("comment") is None or isinstance(options["comment"], str), "comment must be str")
    for key in ("spark_conf", "table_properties"):
        _str_dict(options.get(key), key)
    for key in ("partition_cols", "cluster_by"):
        _str_list(options.get(key), key)
    schema = options.get("schema")
    _require(
        schema is None or isinstance(schema, StructType | str), f"schema must be StructType or str, got {schema!r}"
    )
    for key in ("private", "temporary", "cluster_by_auto", "once"):
        _require(isinstance(options.get(key, False), bool), f"{key} must be bool, got {options.get(key)!r}")


def _query_function(func: Any, what: str) -> None:
    # [STUBS] table(): "The first positional argument passed to @table must be callable";
    # [PY-REF] a query function takes no arguments and returns a DataFrame.
    _require(callable(func), f"{what}: the decorated object must be a function, got {func!r}")
    required = [
        p
        for p in inspect.signature(func).parameters.values()
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    _require(not required, f"{what}: a query function takes no arguments, got {required}")


def _unwrap(obj: Any, what: str) -> tuple[Callable[..., Any], tuple[Declared, ...]]:
    """The query and the rules an object brings to a dataset decorator."""
    # [EXPECT-REF] / [STUBS]: a dataset decorator receives the query function or what the
    # expectation decorators below it returned; never another dataset's handle.
    if isinstance(obj, Defined):
        raise TypeError(f"{what}: applied to {obj.api} {obj.name!r}, which is already defined")
    if isinstance(obj, Expected):
        return obj.query, obj.expectations
    _query_function(obj, what)
    return obj, ()


def _dataset(recorder: Recorder, api: str, query_function: Any, options: dict[str, Any]) -> Any:
    _check_common(options)

    def register(obj: Any) -> Defined:
        func, expectations = _unwrap(obj, f"@{api}")
        name = options.get("name") or func.__name__
        # [PY-REF] a dataset name is unique in a pipeline.
        _require(name not in recorder.datasets, f"dataset {name!r} is defined twice")
        recorded = Recorded(api, name, {k: v for k, v in options.items() if k != "name"}, func, list(expectations))
        recorder.datasets[name] = recorded
        return Defined(api, name)

    return register(query_function) if query_function is not None else register


def _expectation(kind: str) -> Callable[..., Any]:
    def expectation(name: str, inv: str | Column) -> Callable[[Any], Expected]:
        # [STUBS] expect(name: str, inv: Union[str, Column])
        _require(isinstance(name, str) and name, f"{kind}: name must be a non-empty str")
        _require(isinstance(inv, str | Column), f"{kind}: constraint must be str or Column, got {inv!r}")

        def decorate(obj: Any) -> Expected:
            # [EXPECT-REF] below the dataset decorator: above it, it gets the dataset's handle.
            _require(
                not isinstance(obj, Defined),
                f"{kind}({name!r}) is above the dataset decorator of {getattr(obj, 'name', '?')!r}",
            )
            query, earlier = (obj.query, obj.expectations) if isinstance(obj, Expected) else (obj, ())
            if not isinstance(obj, Expected):
                _query_function(obj, f"{kind}({name!r})")
            # [EXPECT-REF] a constraint's description is unique for each dataset.
            _require(all(n != name for _, n, _ in earlier), f"expectation {name!r} is declared twice")
            return Expected(query, ((kind, name, inv), *earlier))  # [STUBS] a new object

        return decorate

    expectation.__name__ = kind
    return expectation


def _expectation_dicts(kind: str) -> Callable[..., Any]:
    single = {"expect_all": "expect", "expect_all_or_drop": "expect_or_drop", "expect_all_or_fail": "expect_or_fail"}

    def expectations(expectations: dict[str, str | Column]) -> Callable[[Any], Expected]:
        # [STUBS] expect_all(expectations: Dict[str, Union[str, Column]])
        _require(isinstance(expectations, dict), f"{kind} takes a dict, got {expectations!r}")
        _str_dict(expectations, kind, (str, Column))

        def decorate(obj: Any) -> Expected:
            for name, constraint in reversed(list(expectations.items())):
                obj = _expectation(single[kind])(name, constraint)(obj)
            return obj

        return decorate

    expectations.__name__ = kind
    return expectations


def _streaming_table(recorder: Recorder, options: dict[str, Any]) -> None:
    _check_common(options)
    # [STUBS] create_streaming_table(name: str, ...); [PY-REF] a dataset name is unique in a pipeline.
    _require(isinstance(options["name"], str), "create_streaming_table: name must be str")
    name = options.pop("name")
    _require(name not in recorder.datasets, f"dataset {name!r} is defined twice")
    for key in ("expect_all", "expect_all_or_drop", "expect_all_or_fail"):
        _str_dict(options.get(key), key, (str, Column))
    recorded = Recorded("create_streaming_table", name, options)
    for key, kind in (
        ("expect_all", "expect"),
        ("expect_all_or_drop", "expect_or_drop"),
        ("expect_all_or_fail", "expect_or_fail"),
    ):
        recorded.expectations += [(kind, n, c) for n, c in (options.get(key) or {}).items()]
    names = [n for _, n, _ in recorded.expectations]
    _require(len(names) == len(set(names)), f"an expectation of {name!r} is declared twice")  # [EXPECT-REF]
    recorder.datasets[name] = recorded


def _append_flow(recorder: Recorder, options: dict[str, Any]) -> Callable[[Any], Defined]:
    _check_common(options)
    # [STUBS] append_flow: "target: The name of the dataset this flow writes to. Must be specified."
    _require(isinstance(options.get("target"), str), "append_flow: target must be str")

    def register(obj: Any) -> Defined:
        # [EXPECT-REF] expectations go on datasets, not on flows.
        _require(not isinstance(obj, Expected), "@append_flow: expectations belong to the target dataset")
        func, _ = _unwrap(obj, "@append_flow")
        name = options.get("name") or func.__name__
        # [PY-REF] a flow name is unique in a pipeline.
        _require(name not in recorder.flows, f"flow {name!r} is defined twice")
        recorder.flows[name] = Recorded("append_flow", name, {k: v for k, v in options.items() if k != "name"}, func)
        return Defined("append_flow", name)

    return register


def _auto_cdc(recorder: Recorder, api: str, options: dict[str, Any], name_key: str) -> None:
    keys = options["keys"]
    # [CDC-REF] keys: a list of str or Column, at least one.
    _require(
        isinstance(keys, list) and keys and all(isinstance(k, str | Column) for k in keys), "keys: a non-empty list"
    )
    # [STUBS] / [CDC-REF] parameter types: target, source str; sequence_by str or Column (struct()).
    for key in ("target", "source"):
        _require(isinstance(options[key], str), f"{key} must be str")
    _require(isinstance(options["sequence_by"], str | Column), "sequence_by must be str or Column")
    for key in ("apply_as_deletes", "apply_as_truncates"):
        _require(options[key] is None or isinstance(options[key], str | Column), f"{key} must be str or Column")
    for key in ("column_list", "except_column_list", "track_history_column_list", "track_history_except_column_list"):
        _str_list(options[key], key, columns=True)
    _require(not (options["column_list"] and options["except_column_list"]), "column_list and except_column_list")
    _require(
        not (options["track_history_column_list"] and options["track_history_except_column_list"]),
        "track_history_column_list and track_history_except_column_list",
    )
    scd = options["stored_as_scd_type"]
    # [STUBS] stored_as_scd_type: Union[str, int], "1 for SCD Type 1 and 2 for SCD Type 2".
    _require(scd in (1, 2, "1", "2") and not isinstance(scd, bool), f"stored_as_scd_type must be 1 or 2, got {scd!r}")
    if str(scd) == "1":
        _require(
            not options["track_history_column_list"] and not options["track_history_except_column_list"],
            "track_history_* is for SCD type 2",
        )
    else:
        # [CDC-REF] APPLY AS TRUNCATE WHEN: SCD type 1 only.
        _require(options["apply_as_truncates"] is None, "apply_as_truncates is supported for SCD type 1 only")
    # [STUBS] ignore_null_updates: Optional[bool]; once: bool; flow_name / name: Optional[str].
    _require(
        isinstance(options["ignore_null_updates"] or False, bool),
        f"ignore_null_updates must be bool, got {options['ignore_null_updates']!r}",
    )
    _require(isinstance(options["once"], bool), f"once must be bool, got {options['once']!r}")
    for key in ("ignore_null_updates_column_list", "ignore_null_updates_except_column_list"):
        _str_list(options.get(key), key, columns=True)
    # [STUBS] columns_to_update: Optional[Union[str, Column]]
    _require(
        options.get("columns_to_update") is None or isinstance(options["columns_to_update"], str | Column),
        f"columns_to_update must be str or Column, got {options.get('columns_to_update')!r}",
    )
    name = options.pop(name_key) or options["target"]
    _require(name is None or isinstance(name, str), f"{name_key} must be str")
    _require(name not in recorder.flows, f"flow {name!r} is defined twice")  # [PY-REF] unique flow names
    recorder.flows[name] = Recorded(api, name, options)


def _expectation_functions(module: types.ModuleType) -> None:
    for kind in ("expect", "expect_or_drop", "expect_or_fail"):
        setattr(module, kind, _expectation(kind))
    for kind in ("expect_all", "expect_all_or_drop", "expect_all_or_fail"):
        setattr(module, kind, _expectation_dicts(kind))


def pipelines_standin(recorder: Recorder) -> types.ModuleType:
    """Databricks' `pyspark.pipelines`, with the signatures of [PY-REF] (keyword-only options)."""
    module = types.ModuleType("pyspark.pipelines")

    def table(
        query_function=None,
        *,
        name=None,
        comment=None,
        spark_conf=None,
        table_properties=None,
        path=None,
        partition_cols=None,
        cluster_by_auto=False,
        cluster_by=None,
        schema=None,
        row_filter=None,
        private=False,
    ):
        return _dataset(recorder, "table", query_function, {k: v for k, v in locals().items() if k != "query_function"})

    def materialized_view(
        query_function=None,
        *,
        name=None,
        comment=None,
        spark_conf=None,
        table_properties=None,
        path=None,
        partition_cols=None,
        cluster_by_auto=False,
        cluster_by=None,
        schema=None,
        refresh_policy=None,
        row_filter=None,
        private=False,
    ):
        options = {k: v for k, v in locals().items() if k != "query_function"}
        return _dataset(recorder, "materialized_view", query_function, options)

    def temporary_view(query_function=None, *, name=None, comment=None):
        # [PY-REF] temporary_view takes name and comment only (no spark_conf, unlike Apache Spark's).
        options = {k: v for k, v in locals().items() if k != "query_function"}
        return _dataset(recorder, "temporary_view", query_function, options)

    def create_streaming_table(
        name,
        *,
        comment=None,
        spark_conf=None,
        table_properties=None,
        path=None,
        partition_cols=None,
        cluster_by_auto=False,
        cluster_by=None,
        schema=None,
        expect_all=None,
        expect_all_or_drop=None,
        expect_all_or_fail=None,
        row_filter=None,
        private=False,
    ):
        _streaming_table(recorder, dict(locals()))

    def append_flow(*, target, name=None, once=False, spark_conf=None, comment=None):
        return _append_flow(recorder, dict(locals()))

    def create_auto_cdc_flow(
        target,
        source,
        keys,
        sequence_by,
        system_sequence_by=None,
        ignore_null_updates=False,
        ignore_null_updates_column_list=None,
        ignore_null_updates_except_column_list=None,
        columns_to_update=None,
        apply_as_deletes=None,
        apply_as_truncates=None,
        column_list=None,
        except_column_list=None,
        stored_as_scd_type="1",
        track_history_column_list=None,
        track_history_except_column_list=None,
        name=None,
        once=False,
    ):
        _auto_cdc(recorder, "create_auto_cdc_flow", dict(locals()), "name")

    for function in (table, materialized_view, temporary_view, create_streaming_table, append_flow):
        setattr(module, function.__name__, function)
    module.create_auto_cdc_flow = create_auto_cdc_flow
    _expectation_functions(module)
    return module


def dlt_standin(recorder: Recorder) -> types.ModuleType:
    """The older `dlt` module, with the signatures of [STUBS] (checked by a test)."""
    module = types.ModuleType("dlt")

    def table(
        query_function=None,
        name=None,
        comment=None,
        spark_conf=None,
        table_properties=None,
        partition_cols=None,
        path=None,
        schema=None,
        temporary=False,
        cluster_by=None,
        row_filter=None,
    ):
        return _dataset(recorder, "table", query_function, {k: v for k, v in locals().items() if k != "query_function"})

    def view(query_function=None, name=None, comment=None, spark_conf=None):
        return _dataset(recorder, "view", query_function, {k: v for k, v in locals().items() if k != "query_function"})

    def create_streaming_table(
        name,
        comment=None,
        spark_conf=None,
        table_properties=None,
        partition_cols=None,
        path=None,
        schema=None,
        expect_all=None,
        expect_all_or_drop=None,
        expect_all_or_fail=None,
        cluster_by=None,
        row_filter=None,
    ):
        _streaming_table(recorder, dict(locals()))

    def append_flow(name=None, target=None, comment=None, spark_conf=None, once=False):
        return _append_flow(recorder, dict(locals()))

    def apply_changes(
        target,
        source,
        keys,
        sequence_by,
        where=None,
        ignore_null_updates=None,
        apply_as_deletes=None,
        apply_as_truncates=None,
        column_list=None,
        except_column_list=None,
        stored_as_scd_type="1",
        track_history_column_list=None,
        track_history_except_column_list=None,
        flow_name=None,
        once=False,
        ignore_null_updates_column_list=None,
        ignore_null_updates_except_column_list=None,
        columns_to_update=None,
    ):
        _auto_cdc(recorder, "apply_changes", dict(locals()), "flow_name")

    for function in (table, view, create_streaming_table, append_flow, apply_changes):
        setattr(module, function.__name__, function)
    _expectation_functions(module)
    return module


def wrapped(module: types.ModuleType) -> types.ModuleType:
    """The stand-in with every function a `(*args, **kwargs)` wrapper, named as the original:
    `inspect.signature` of each gives `(*args, **kwargs)`, nothing about what it takes."""
    outer = types.ModuleType(module.__name__)
    for name, function in vars(module).items():
        if callable(function) and not name.startswith("_"):
            setattr(outer, name, _wrapper(name, function))
    return outer


def _wrapper(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return function(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    return wrapper


@dataclass(frozen=True)
class Standin:
    """A stand-in as a test installs it: under `module` in sys.modules, made by `make`."""

    module: str
    make: Callable[[Recorder], types.ModuleType]


STANDINS = {
    "pyspark.pipelines": Standin("pyspark.pipelines", pipelines_standin),
    "dlt": Standin("dlt", dlt_standin),
    "pyspark.pipelines-wrapped": Standin("pyspark.pipelines", lambda r: wrapped(pipelines_standin(r))),
    "dlt-wrapped": Standin("dlt", lambda r: wrapped(dlt_standin(r))),
}
