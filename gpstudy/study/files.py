"""Config files read and merged in order, as Snakemake merges ``--configfile`` over ``config.yaml``,
recording which file set each value and on which line (``gpstudy settings`` prints it beside the value);
``--config`` entries (dotted keys, YAML values) read without Snakemake."""

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpstudy.study.schema import ConfigError
from gpstudy.study.validate import OVERSIZED, oversized, validate_config

DEFAULT_CONFIG = Path(__file__).parents[1] / "config.yaml"  # every default: gpstudy/config.yaml, in a checkout a
# link to the checkout's config.yaml (what the Snakefile's `configfile:` reads), in a wheel a copy of it
KeyPath = tuple[str, ...]  # a config key path, e.g. ("dataset_options", "mnist", "likelihood")
CONFIG_ENTRY_KEY = re.compile(r"[A-Za-z_][\w-]*\w")  # a --config key Snakemake accepts: an identifier, hyphens inside


@dataclass
class Sources:
    """Where the values of a merged config were set: key path -> the source (a file as :func:`source_name`
    names it, or the overrides') whose merge set it last; per file, the line of each key path it writes (a key
    reached through a YAML anchor ``<<: *name``: the line of the anchor's key)."""

    set_by: dict[KeyPath, str] = field(default_factory=dict)
    lines: dict[str, dict[KeyPath, int]] = field(default_factory=dict)

    def of(self, path: KeyPath) -> str:
        """The sources of the value at ``path`` as ``file:line``, `` + ``-joined in merge order: the one
        that set ``path`` or the mapping holding it, and any that changed a key inside it."""
        above = next((self.set_by[path[:n]] for n in range(len(path), 0, -1) if path[:n] in self.set_by), None)
        below = [
            source for known, source in self.set_by.items() if len(known) > len(path) and known[: len(path)] == path
        ]
        sources = dict.fromkeys([*([above] if above else []), *below])
        return " + ".join(
            f"{source}:{self.lines[source][path]}" if path in self.lines.get(source, {}) else source
            for source in sources
        )


def load_config(*files: str | Path, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config files merged in order (nested keys merged, as Snakemake's ``--configfile`` does), then
    ``overrides`` (as Snakemake merges its ``--config`` entries: a None value sets the key to null), validated.

    Raises:
        ConfigError: a file that does not exist (naming it), or a config the schema refuses.
    """
    return load_traced_config(*files, overrides=overrides)[0]


def load_traced_config(
    *files: str | Path, overrides: dict[str, Any] | None = None, overrides_source: str = "the overrides"
) -> tuple[dict[str, Any], Sources]:
    """:func:`load_config`, and where each value was set (:class:`Sources`; the overrides named
    ``overrides_source``)."""
    config: dict[str, Any] = {}
    sources = Sources()
    for path in files:
        if not Path(path).is_file():
            raise ConfigError(f"config file {path}: no such file")
        text = Path(path).read_text()
        try:
            changes = yaml.safe_load(text) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"config file {path}: not YAML: {error}") from None
        if not isinstance(changes, dict):
            raise ConfigError(f"config file {path}: a {type(changes).__name__}, not a mapping of keys to values")
        if (key := oversized(changes)) is not None:  # before its lines are walked (key_lines)
            raise ConfigError(f"config file {path}: key {key}: {OVERSIZED}")
        source = source_name(path)
        merge(config, changes, sources.set_by, source)
        sources.lines[source] = key_lines(text)
    merge(config, overrides or {}, sources.set_by, overrides_source)
    validate_config(config)
    return config, sources


def parse_config_entries(entries: Iterable[str]) -> dict[str, Any]:
    """``--config`` entries as the gpstudy commands and the workflow read them (Hydra's overrides): ``key=value``
    split at the first ``=``, quotes around the value dropped (as Snakemake drops them); the key a name or a
    dotted path of keys (``training.lr``, ``experiments.uci.methods.svgp``: a nested mapping, merged key by
    key); the value an int, else a float (``1e-3`` too), else YAML read as a config file is read
    (``yaml.safe_load``: ``[50, 100]`` a list, ``{lr: 0.1}`` a mapping of a number, ``null`` None, ``true`` True),
    else the string itself; an empty value None. Entries are merged in order (:func:`merge`: a mapping merged key
    by key into the mapping an earlier entry set). Snakemake's own parser (``snakemake.cli.parse_config``) refuses a
    dotted key and reads a nested scalar as a string; the Snakefile merges this reading of its entries over the
    config Snakemake built (rules/common.smk), so the workflow's config is the commands' (tests/test_cli_config.py).

    Raises:
        ConfigError: an entry that is not ``key=value``, a key that is not an identifier (hyphens allowed inside)
            or a dotted path of keys under one, a value that is an empty YAML document (``#...``, blanks;
            Snakemake fails on it too).
    """
    parsed: dict[str, Any] = {}
    for entry in entries:
        key, separator, text = entry.partition("=")
        if not separator:
            raise ConfigError(
                f"--config: {entry!r}: entries are name=value pairs; a config file goes after --configfile"
            )
        top, *inner = key.split(".")
        if not CONFIG_ENTRY_KEY.fullmatch(top) or not all(inner):
            raise ConfigError(
                f"--config: {entry!r}: the key {key!r} is no identifier (letters, digits, _ and - inside, "
                "a letter or _ first) nor a dotted path of keys under one (training.lr)"
            )
        value = _config_value(entry, text.strip("'\""))
        for name in reversed(inner):
            value = {name: value}
        merge(parsed, {top: value})
    return parsed


def _config_value(entry: str, text: str) -> Any:
    """The value of a ``--config`` entry, as :func:`parse_config_entries` says."""
    if text == "":
        return None
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    try:
        if yaml.compose(text, Loader=yaml.SafeLoader) is None:
            raise ConfigError(f"--config: {entry!r}: the value is empty as YAML; an empty value is written key=")
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def source_name(path: str | Path) -> str:
    """A config file as sources name it: as given, the packaged defaults (:data:`DEFAULT_CONFIG`) as
    ``config.yaml``, and another file given as ``config.yaml`` as ``./config.yaml``."""
    if Path(path) == DEFAULT_CONFIG:
        return DEFAULT_CONFIG.name
    if str(path) == DEFAULT_CONFIG.name and not Path(path).samefile(DEFAULT_CONFIG):
        return f"./{path}"
    return str(path)


def merge(
    config: dict, changes: dict, origins: dict[KeyPath, str] | None = None, source: str = "", at: KeyPath = ()
) -> None:
    """Update ``config`` in place with ``changes``, merging nested mappings key by key; each key path
    assigned (a value, or a mapping that replaces a non-mapping) is recorded in ``origins`` as set by
    ``source``, and whatever was recorded below it is forgotten."""
    for key, value in changes.items():
        path = (*at, key)
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            merge(config[key], value, origins, source, path)
        else:
            config[key] = copy.deepcopy(value)
            if origins is not None:
                for below in [known for known in origins if known[: len(path)] == path]:
                    del origins[below]
                origins[path] = source


def key_lines(text: str) -> dict[KeyPath, int]:
    """The line (1-based) of every key path of a YAML document, its anchors' merges (``<<: *name``)
    resolved as ``yaml.safe_load`` resolves them: a merged key is on its anchor's line."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        lines: dict[KeyPath, int] = {}

        def walk(node: yaml.Node, at: KeyPath) -> None:
            if not isinstance(node, yaml.MappingNode):
                return
            loader.flatten_mapping(node)  # as the constructor does: merged keys first, the node's own win
            for key, value in node.value:
                lines[(*at, key.value)] = key.start_mark.line + 1
                walk(value, (*at, key.value))

        if root is not None:
            walk(root, ())
        return lines
    finally:
        loader.dispose()
