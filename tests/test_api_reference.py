"""The API reference (docs/python.md) builds from the docstrings with pdoc without a warning, with the docstrings'
maths as TeX for MathJax, and every cross-reference a docstring makes (``:func:`name```, ``:class:``, ``:meth:``,
``:mod:``, ...) names something."""

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


DOCSTRING = re.compile(r'<div class="docstring">(.*?)</div>', re.S)  # a rendered docstring on a pdoc page
MATHJAX = '<script id="MathJax-script" async src="https://cdn.jsdelivr.net/npm/mathjax@3/'  # pdoc 16's --math


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, list[str]]:
    """The reference built as docs/python.md's command builds it, and the warnings pdoc emitted."""
    folder = tmp_path_factory.mktemp("api")
    pdoc.render.configure(docformat="google", math=True)  # pdoc --docformat google --math -o api gpstudy
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pdoc.pdoc("gpstudy", output_directory=folder)
    finally:
        pdoc.render.configure()  # pdoc's defaults again, for any later build in this process
    return folder, [f"{w.message}" for w in caught if Path(w.filename).is_relative_to(PDOC)]


def test_the_reference_builds_without_a_warning(reference):
    folder, caught = reference
    assert caught == []
    assert (folder / "index.html").is_file() and (folder / "gpstudy" / "notebook.html").is_file()


def test_the_docstrings_maths_reach_the_pages_as_tex_for_mathjax(reference):
    """A ``:math:`` role becomes ``\\( ... \\)`` and a ``.. math::`` block ``$$ ... $$``, on a page that loads
    MathJax (from a CDN: pdoc ships no copy); no page keeps a role unconverted."""
    folder, _ = reference
    palette = (folder / "gpstudy" / "report" / "palette.html").read_text()
    assert MATHJAX in palette
    assert r"\( L^* \)" in palette  # inline: the docstring's :math:`L^*`
    assert r"<p>$$L^*(M) = L_{\text{light}}" in palette  # the display equation
    assert r"\( \mu(x) \pm 2 \sigma_y(x) \)" in (folder / "gpstudy" / "notebook.html").read_text()
    docstrings = {page.name: DOCSTRING.findall(page.read_text()) for page in folder.rglob("*.html")}
    assert sum(map(len, docstrings.values())) > 500  # the pages' rendered docstrings (not their source views)
    assert [name for name, texts in docstrings.items() if any(":math:`" in text for text in texts)] == []


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
