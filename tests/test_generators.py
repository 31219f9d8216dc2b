"""Every random draw goes through gpstudy.generators: no other module hands a generator to torch."""

import ast
from pathlib import Path

import torch

from gpstudy import generators as draws

PACKAGE = Path(draws.__file__).resolve().parent


def generator_uses(source: str) -> list[int]:
    """The lines of ``source`` that pass ``generator=`` to a call or build a ``torch.Generator``."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and (
            any(keyword.arg == "generator" for keyword in node.keywords)
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "Generator")
        )
    )


def test_no_module_but_generators_hands_a_generator_to_torch():
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "generators.py"
        for line in generator_uses(path.read_text())
    ]
    assert found == [], "draw through gpstudy.generators instead: " + ", ".join(found)


def test_the_check_sees_a_generator_handed_to_torch_or_built():
    source = (
        "import torch\nw = torch.empty(3)\ntorch.nn.init.uniform_(w, generator=g)\ng = torch.Generator(device='cuda')\n"
    )
    assert generator_uses(source) == [3, 4]


def test_generators_of_a_device_without_its_own_are_on_the_cpu():
    assert [g.device.type for g in draws.new_generators([0, 1], torch.device("meta"))] == ["cpu", "cpu"]
    first, again = (draws.new_generators([5], torch.device("cpu"))[0] for _ in range(2))
    assert torch.equal(torch.rand(3, generator=first), torch.rand(3, generator=again))


def test_a_split_draws_the_same_numbers_in_any_batch():
    """The root of the reproducibility contract (docs/reproducibility.md): split s's draws come from its own
    generator, whatever splits share its batch and wherever it stands there. So a batch's draws stay one per
    split: one batched draw, ``torch.randn((S, *shape), generator=g)``, takes every row from one stream, and
    split s's numbers would depend on its place in the batch and on the splits before it."""
    cpu, like = torch.device("cpu"), torch.empty(0, dtype=torch.float64)
    for draw in (
        lambda g: draws.randn((3, 4), g, like),
        lambda g: draws.rand((5,), g, like),
        lambda g: draws.randperm(6, g, cpu),
    ):
        alone = draw(draws.new_generators([8], cpu)[0])
        assert torch.equal(draw(draws.new_generators([7, 8, 9], cpu))[1], alone)
        assert torch.equal(draw(draws.new_generators([8, 7], cpu))[0], alone)
