"""Display names, as tables, figures and claims show them: a registered method's (its class's ``display_name``
in ``gpstudy.methods.METHODS``), a config variant's (its ``label``: ``gpstudy.study.variant_labels``), a
(method, M) column's (``"SVGP 100"``) and a data set's (the paper's: ``"Wine"``)."""

from collections.abc import Mapping

from gpstudy.methods import METHODS
from gpstudy.paper import table_datasets


def display_names(variant_labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """Method -> its display name, in plot order: the registered methods' in ``METHODS``' order, then the
    config's variants' ``label``s (``gpstudy.study.variant_labels``; None: no variant) in theirs."""
    return {**{name: method.display_name for name, method in METHODS.items()}, **(variant_labels or {})}


def method_label(method: str, m: int, names: Mapping[str, str]) -> str:
    """The display name of a (method, M) column, e.g. ``"SVGP 100"``, by ``display_names``' ``names`` (the
    method's key where they have none)."""
    return f"{names.get(method, method)} {m}"


def dataset_label(dataset: str) -> str:
    """The paper's name of a data set (``"Wine"`` for ``wine_red``, ``"MNIST"`` for ``mnist``), or the key
    itself if the paper has none."""
    names = table_datasets().set_index("dataset")["name"]
    return names.get(dataset, dataset)
