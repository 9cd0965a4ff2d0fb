"""The format and renderer registries: an explicit list of modules each, and a clear error for a
name registered twice or asked for and unknown. Pure Python: no Spark session."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import cdc_medallion.formats as formats
import cdc_medallion.generator.renderers as renderers
from cdc_medallion.formats import FORMAT_MODULES, Format, format_names, get_format, register_format
from cdc_medallion.generator.history import generate_history
from cdc_medallion.generator.renderers import RENDERER_MODULES, RENDERERS, register_renderer, render


def every_module_of(package: ModuleType) -> list[ModuleType]:
    """Every module in the package, listed or not: a module left off the list is found here."""
    names = [info.name for info in pkgutil.iter_modules(package.__path__)]
    return [importlib.import_module(f"{package.__name__}.{name}") for name in names]


def defines_a_format(module: ModuleType) -> bool:
    return any(
        inspect.isclass(value) and issubclass(value, Format) and not inspect.isabstract(value)
        for value in vars(module).values()
        if getattr(value, "__module__", None) == module.__name__
    )


def test_the_format_list_names_exactly_the_modules_that_define_a_format():
    defining = {module.__name__.rpartition(".")[2] for module in every_module_of(formats) if defines_a_format(module)}

    assert sorted(defining) == sorted(FORMAT_MODULES)
    ours = {get_format(name).__module__ for name in format_names() if get_format(name).__module__.startswith("cdc_")}
    assert ours == {f"{formats.__name__}.{module}" for module in FORMAT_MODULES}


def test_a_format_name_registered_twice_is_an_error_and_the_first_stays():
    first = get_format("debezium-json")

    class SecondDebezium(Format):
        name = "debezium-json"

        def parse_message(self, message):  # never called
            return []

    with pytest.raises(ValueError, match="'debezium-json'") as raised:
        register_format(SecondDebezium)
    assert "debezium_json.DebeziumJson" in str(raised.value) and "SecondDebezium" in str(raised.value)
    assert get_format("debezium-json") is first


def test_an_unknown_format_name_is_an_error_naming_the_known_ones():
    with pytest.raises(KeyError) as raised:
        get_format("debezium-jsn")

    message = str(raised.value)
    assert "'debezium-jsn'" in message
    assert all(name in message for name in format_names())


def test_the_renderer_list_names_exactly_the_modules_that_register_a_renderer():
    every_module_of(renderers)  # an unlisted module that registers a renderer shows up in RENDERERS

    registering = {func.__module__ for func in RENDERERS.values()}

    assert registering == {f"{renderers.__name__}.{module}" for module in RENDERER_MODULES}


def test_every_renderer_writes_a_known_format():
    assert set(RENDERERS) <= set(format_names())


def test_a_renderer_registered_twice_is_an_error_naming_both_and_the_first_stays():
    first = RENDERERS["canal-json"]

    def second_canal(history, out):  # never called
        raise AssertionError

    with pytest.raises(ValueError) as raised:
        register_renderer("canal-json")(second_canal)

    message = str(raised.value)
    assert "'canal-json'" in message
    assert f"{first.__module__}.{first.__qualname__}" in message and "second_canal" in message
    assert RENDERERS["canal-json"] is first


def test_an_unknown_renderer_is_an_error_naming_the_known_ones(tmp_path):
    history = generate_history(tables=1, transactions=1, seed=1)

    with pytest.raises(KeyError) as raised:
        render(history, "canal-jsn", tmp_path / "out")

    message = str(raised.value)
    assert "'canal-jsn'" in message
    assert all(name in message for name in RENDERERS)
    assert not (tmp_path / "out").exists()
