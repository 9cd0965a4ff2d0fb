"""Loading `transformations/` into a dataflow graph and checking it is consistent."""

from __future__ import annotations

import runpy
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from cdc_medallion.config import PipelineConf, using_conf
from cdc_medallion.declarative.definitions import AnyFlow, AutoCdcFlow, Dataset, DatasetKind
from cdc_medallion.declarative.registry import InMemoryRegistry, registration
from cdc_medallion.errors import GraphError
from cdc_medallion.layers import bronze, gold, silver


@dataclass(frozen=True)
class Graph:
    datasets: dict[str, Dataset]
    flows: dict[str, AnyFlow]

    @cached_property
    def _auto_cdc_by_source(self) -> dict[str, list[AutoCdcFlow]]:
        by_source: dict[str, list[AutoCdcFlow]] = {}
        for flow in self.flows.values():
            if isinstance(flow, AutoCdcFlow):
                by_source.setdefault(flow.source, []).append(flow)
        return by_source

    def auto_cdc_flows(self, dataset: str) -> list[AutoCdcFlow]:
        """The auto CDC flows reading `dataset` (gold's SCD1 and SCD2 flows read one view)."""
        return self._auto_cdc_by_source.get(dataset, [])

    def auto_cdc_readers(self, dataset: str) -> int:
        return len(self.auto_cdc_flows(dataset))

    def flows_into(self, target: str) -> list[AnyFlow]:
        return [f for f in self.flows.values() if f.target == target]

    def dataset(self, name: str) -> Dataset:
        try:
            return self.datasets[name]
        except KeyError:
            raise GraphError(f"unknown dataset {name!r} (defined: {', '.join(sorted(self.datasets))})") from None


def transformation_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise GraphError(f"transformations folder {folder} does not exist")
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def load_graph(conf: PipelineConf) -> Graph:
    """Run every transformation file with a fresh registry and `conf` active."""
    registry = InMemoryRegistry()
    with using_conf(conf), registration(registry):
        if conf.transformations is None:  # ad-hoc runs: the packaged layer definitions
            bronze.define(conf)
            silver.define(conf)
            gold.define(conf)
        else:
            for file in transformation_files(conf.transformations):
                runpy.run_path(str(file), run_name=f"cdc_medallion_transformations.{file.stem}")
    graph = Graph(datasets=dict(registry.datasets), flows=dict(registry.flows))
    validate(graph)
    return graph


def validate(graph: Graph) -> None:
    for flow in graph.flows.values():
        target = graph.datasets.get(flow.target)
        if target is None:
            raise GraphError(f"flow {flow.name!r} writes to undefined dataset {flow.target!r}")
        if target.kind is not DatasetKind.STREAMING_TABLE:
            raise GraphError(f"flow {flow.name!r} targets {flow.target!r}, which is a {target.kind.value}")
        if isinstance(flow, AutoCdcFlow) and flow.source not in graph.datasets:
            raise GraphError(f"auto CDC flow {flow.name!r} reads undefined dataset {flow.source!r}")
    for dataset in graph.datasets.values():
        if dataset.kind is DatasetKind.STREAMING_TABLE and not graph.flows_into(dataset.name):
            raise GraphError(f"streaming table {dataset.name!r} has no flow writing to it")
