"""The schema of a study configuration (``config.schema.yaml``), completed from the registries: each
method's options are its ``options_schema`` fragment, the protocols and quoted tables those registered, a
user file's name ``gpstudy.paths.FILE_NAME``."""

import copy
import functools
from importlib import resources

import yaml

from gpstudy import paths
from gpstudy.data.registry import PROTOCOLS
from gpstudy.methods import METHODS
from gpstudy.paper import quoted_tables


class ConfigError(ValueError):
    """A configuration that does not fit the schema; the message names the key."""


def training_keys() -> dict[str, dict]:
    """The settings every run has (the schema's ``training`` section), name -> schema."""
    return _raw_schema()["$defs"]["training"]["properties"]


def object_schema(properties: dict[str, dict], required: bool = True) -> dict:
    """The JSON schema of an object of exactly these properties (all of them required, unless not)."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        **({"required": sorted(properties)} if required else {}),
    }


@functools.cache
def _raw_schema() -> dict:
    """``config.schema.yaml`` as written, read once (callers copy before they change it)."""
    return yaml.safe_load(resources.files("gpstudy.study").joinpath("config.schema.yaml").read_text())


def load_schema() -> dict:
    """The JSON schema of a study configuration, each registered method's options filled in."""
    schema = copy.deepcopy(_raw_schema())
    schema["properties"]["split_protocol"]["enum"] = [protocol for protocol in PROTOCOLS if protocol != "given"]
    training = schema["$defs"]["training"]
    schema["properties"]["training"] = {**training, "required": sorted(training["properties"])}
    dataset = schema["properties"]["dataset_options"]["additionalProperties"]["properties"]
    dataset["protocol"]["enum"] = list(PROTOCOLS)
    dataset["source"]["properties"]["file"]["pattern"] = f"^(?:{paths.FILE_NAME.pattern})$"
    schema["properties"]["variants"]["additionalProperties"]["properties"]["method"]["enum"] = sorted(METHODS)
    schema["properties"]["experiments"]["additionalProperties"]["properties"]["quoted"]["enum"] = sorted(
        quoted_tables()
    )
    for name, method in METHODS.items():
        options = method.options_schema
        schema["properties"]["methods"]["properties"][name] = {  # its options, and any training key for it
            **object_schema({**training["properties"], **options}),
            "required": sorted(options),
        }
        dataset["methods"]["properties"][name] = object_schema({**training["properties"], **options}, required=False)
        dataset.update({**training["properties"], **options})  # at the data set's level: for every method that has it
    return schema
