"""The API reference (docs/python.md) builds from the docstrings with pdoc without a warning, and every
cross-reference a docstring makes (``:func:`name```, ``:class:``, ``:meth:``, ``:mod:``, ...) names something."""

import pkgutil
import pydoc
import re
import warnings
from pathlib import Path

import pdoc
import pdoc.doc
import pytest
from pdoc.render_helpers import qualname_candidates

import gpstudy

PDOC = Path(pdoc.__file__).parent
ROLE = re.compile(r":(?:py:)?(?:mod|func|data|const|class|meth|attr|exc|obj):`~?([^`]+)`")  # as pdoc reads them


def test_the_reference_builds_without_a_warning(tmp_path):
    pdoc.render.configure(docformat="google")  # docs/python.md's command: pdoc --docformat google -o api gpstudy
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc("gpstudy", output_directory=tmp_path)
    assert [f"{w.message}" for w in caught if Path(w.filename).is_relative_to(PDOC)] == []
    assert (tmp_path / "index.html").is_file() and (tmp_path / "gpstudy" / "notebook.html").is_file()


@pytest.fixture(scope="module")
def modules() -> dict[str, pdoc.doc.Module]:
    """Every module of the package, as pdoc documents it."""
    names = ["gpstudy", *(module.name for module in pkgutil.walk_packages(gpstudy.__path__, "gpstudy."))]
    return {name: pdoc.doc.Module.from_name(name) for name in names}


def own_docstring(doc: pdoc.doc.Doc) -> str:
    """The docstring ``doc`` wrote itself (not one inherited from a base class, e.g. torch's)."""
    if isinstance(doc, pdoc.doc.Variable):
        return doc.docstring
    if isinstance(doc, (pdoc.doc.Module, pdoc.doc.Class)):
        return vars(doc.obj).get("__doc__") or ""
    return getattr(doc.obj, "__doc__", None) or ""


def references(module: pdoc.doc.Module) -> list[tuple[pdoc.doc.Doc, str, str]]:
    """(documented object, the class its name resolves in or "", target) of each reference in the docstrings
    written in ``module``."""
    found, docs = [], [module]
    while docs:
        doc = docs.pop()
        if isinstance(doc, (pdoc.doc.Module, pdoc.doc.Class)):
            docs.extend(member for member in doc.own_members if member.taken_from[0] == module.modulename)
        namespace = doc.qualname if isinstance(doc, pdoc.doc.Class) else doc.qualname.rpartition(".")[0]
        found += [
            (doc, "" if isinstance(doc, pdoc.doc.Module) else namespace, target)
            for target in ROLE.findall(own_docstring(doc))
        ]
    return found


def test_every_cross_reference_names_something(modules):
    """Resolved as pdoc links it: a name of the docstring's module or class, a module, or a full dotted path."""
    unresolved = []
    for module in modules.values():
        for doc, namespace, target in references(module):
            name = target.removesuffix("()")
            if not (
                any(module.get(qualname) for qualname in qualname_candidates(name, namespace))
                or name in modules
                or pydoc.locate(name) is not None
            ):
                unresolved.append(f"{doc.fullname}: {target}")
    assert len(modules) > 50 and unresolved == []
