"""Where definitions go: an abstract registry, an in-memory one, and the active one in a context var."""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from cdc_medallion.declarative.definitions import AnyFlow, Dataset, Expectation, Flow
from cdc_medallion.errors import GraphError


class GraphElementRegistry(abc.ABC):
    """Receives datasets, flows and late-attached expectations."""

    @abc.abstractmethod
    def register_dataset(self, dataset: Dataset) -> None: ...

    @abc.abstractmethod
    def register_flow(self, flow: AnyFlow) -> None: ...

    @abc.abstractmethod
    def add_expectations(self, dataset_name: str, expectations: tuple[Expectation, ...]) -> None: ...

    def register_query_table(self, dataset: Dataset, flow: Flow) -> None:
        """A streaming table defined by its query (`@table`): the dataset and its implicit flow.

        Registries that hand definitions to another API (Databricks) receive both at once."""
        self.register_dataset(dataset)
        self.register_flow(flow)


class InMemoryRegistry(GraphElementRegistry):
    """Collects the graph; the local runner and the tests read it back."""

    def __init__(self) -> None:
        self.datasets: dict[str, Dataset] = {}
        self.flows: dict[str, AnyFlow] = {}

    def register_dataset(self, dataset: Dataset) -> None:
        if dataset.name in self.datasets:
            raise GraphError(f"dataset {dataset.name!r} is defined twice")
        self.datasets[dataset.name] = dataset

    def register_flow(self, flow: AnyFlow) -> None:
        if flow.name in self.flows:
            raise GraphError(f"flow {flow.name!r} is defined twice")
        self.flows[flow.name] = flow

    def add_expectations(self, dataset_name: str, expectations: tuple[Expectation, ...]) -> None:
        dataset = self.datasets[dataset_name]
        self.datasets[dataset_name] = dataclasses.replace(dataset, expectations=dataset.expectations + expectations)


_active: ContextVar[GraphElementRegistry | None] = ContextVar("cdc_medallion_registry", default=None)


def registered() -> GraphElementRegistry | None:
    """The registry `registration` set in this context (local runner, tests), if any;
    `api.active_registry` falls back to Databricks' when none is."""
    return _active.get()


@contextmanager
def registration(registry: GraphElementRegistry) -> Iterator[GraphElementRegistry]:
    token = _active.set(registry)
    try:
        yield registry
    finally:
        _active.reset(token)
