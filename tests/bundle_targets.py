"""A bundle target resolved as the Databricks CLI resolves it for `bundle deploy -t <target>`.

Only what this bundle uses, each step after the CLI's own source (github.com/databricks/cli):

1. the target's overrides merged into the root (`bundle/config/root.go`, MergeTargetOverrides):
   `bundle`, `workspace`, `artifacts`, `resources`, `sync`, `permissions`, `presets` merged (maps
   key by key, sequences appended), a target's `variables` replacing defaults, `run_as` and
   `mode` replacing the root's;
2. every variable given a value (`bundle/config/mutator/set_variables.go`): `--var`, else
   `BUNDLE_VAR_<name>`, else its default, else the CLI's error for a required variable;
3. `mode: development` (`resourcemutator/apply_target_mode.go`): the name prefix
   `[dev <short name>] ` unless `presets.name_prefix` sets one; the short name is the user name's
   part before `@`, lower case, every other character than a letter or a digit `_`
   (`libs/iamutil/user.go`, `libs/textutil/textutil.go`);
4. `${var.*}`, `${bundle.*}` and `${workspace.current_user.*}` interpolated;
5. the presets applied (`resourcemutator/apply_presets.go`): pipelines and jobs get the prefix
   as it is, schemas its normalized form (`[dev ada] ` -> `dev_ada_`) unless
   `experimental.skip_name_prefix_for_schema`; volumes none;
6. `${resources.<kind>.<key>.<field>}` resolved from the resources as deployed, i.e. after the
   presets (the deploy engine resolves them against the created resource).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

INTERPOLATION = re.compile(r"\$\{([^}]+)\}")
MERGED_FIELDS = ("bundle", "workspace", "artifacts", "resources", "sync", "permissions", "presets")


class BundleError(Exception):
    """What the CLI reports and stops on."""


def short_name(user_name: str) -> str:
    """`workspace.current_user.short_name` of a user (not a service principal)."""
    return normalize(user_name.split("@", 1)[0])


def normalize(text: str) -> str:
    """textutil.NormalizeString: lower case, runs of anything but letters and digits one `_`."""
    replaced = "".join(c if c.isalpha() or c.isdigit() else "_" for c in text.lower())
    return re.sub(r"_+", "_", replaced).strip("_")


def schema_prefix(prefix: str) -> str:
    """apply_presets.go normalizePrefix: `[dev ada] ` -> `dev_ada_`."""
    prefix = prefix.replace("[", "").strip(" ")
    suffix = "_" if prefix.endswith("]") else ""
    return normalize(prefix) + suffix


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(override, list):
        return base + copy.deepcopy(override)
    return copy.deepcopy(override)


def _variable_values(
    variables: Mapping[str, Any], cli_vars: Mapping[str, str], environ: Mapping[str, str]
) -> dict[str, Any]:
    values = {}
    for name, spec in variables.items():
        if name in cli_vars:
            values[name] = cli_vars[name]
        elif f"BUNDLE_VAR_{name}" in environ:
            values[name] = environ[f"BUNDLE_VAR_{name}"]
        elif isinstance(spec, dict) and "default" in spec and spec["default"] is not None:
            values[name] = spec["default"]
        else:
            raise BundleError(
                f"no value assigned to required variable {name}. Variables are usually assigned in databricks.yml, "
                f'and they can be overridden using "--var", the BUNDLE_VAR_{name} environment variable, or '
                ".databricks/bundle/<target>/variable-overrides.json"
            )
    return values


def _interpolate(node: Any, lookup) -> Any:
    if isinstance(node, dict):
        return {key: _interpolate(value, lookup) for key, value in node.items()}
    if isinstance(node, list):
        return [_interpolate(value, lookup) for value in node]
    if isinstance(node, str):
        whole = INTERPOLATION.fullmatch(node)
        if whole:  # a whole-value reference keeps its value's type
            found = lookup(whole.group(1))
            return node if found is None else found
        return INTERPOLATION.sub(lambda m: str(v) if (v := lookup(m.group(1))) is not None else m.group(0), node)
    return node


def resolve(
    bundle: Mapping[str, Any],
    target: str,
    user_name: str,
    cli_vars: Mapping[str, str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The configuration `bundle deploy -t target` deploys, as a plain dict."""
    root = copy.deepcopy(dict(bundle))
    overrides = root.pop("targets", {}).get(target)
    if overrides is None:
        raise BundleError(f"{target}: no such target")
    for field in MERGED_FIELDS:
        if field in overrides:
            root[field] = _merge(root.get(field, {}), overrides[field])
    for name, value in overrides.get("variables", {}).items():
        spec = root.setdefault("variables", {}).setdefault(name, {})
        spec["default"] = value["default"] if isinstance(value, dict) else value
    if "run_as" in overrides:
        root["run_as"] = copy.deepcopy(overrides["run_as"])
    if "mode" in overrides:
        root["bundle"]["mode"] = overrides["mode"]
    root["bundle"]["target"] = target
    values = _variable_values(root.get("variables", {}), cli_vars or {}, environ or {})

    current_user = {"userName": user_name, "short_name": short_name(user_name)}
    presets = root.setdefault("presets", {})
    if root["bundle"].get("mode") == "development" and not presets.get("name_prefix"):
        presets["name_prefix"] = f"[dev {current_user['short_name']}] "

    def early(reference: str) -> Any:
        scope, _, rest = reference.partition(".")
        if scope == "var":
            return values[rest]
        if scope == "bundle":
            return root["bundle"].get(rest)
        if reference.startswith("workspace.current_user."):
            return current_user[reference.removeprefix("workspace.current_user.")]
        return None  # ${resources.*} and ${workspace.file_path}: known at deploy

    values.update({name: _interpolate(value, early) for name, value in values.items()})  # defaults may refer too
    resolved = _interpolate(root, early)
    prefix = resolved.get("presets", {}).get("name_prefix", "")
    resources = resolved.get("resources", {})
    skip_schema = resolved.get("experimental", {}).get("skip_name_prefix_for_schema", False)
    for kind in ("pipelines", "jobs"):
        for spec in resources.get(kind, {}).values():
            spec["name"] = prefix + spec["name"]
    if not skip_schema:
        for spec in resources.get("schemas", {}).values():
            spec["name"] = schema_prefix(prefix) + spec["name"]

    def late(reference: str) -> Any:
        scope, *path = reference.split(".")
        if scope != "resources" or len(path) != 3:
            return None
        kind, key, field = path
        value = resources.get(kind, {}).get(key, {}).get(field)
        if value is None and field != "id":
            raise BundleError(f"${{{reference}}}: no such resource field")
        return value

    for _ in range(3):  # a resource's field may refer to another's (the volume to the schema)
        resolved = _interpolate(resolved, late)
        resources = resolved.get("resources", {})
    return resolved
