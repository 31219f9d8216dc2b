"""The study's colours, one place for every figure: a hue per method, a shade per M.

A registered method (``gpstudy.methods.METHODS``, in its order) takes the next hue of ``HUES``; a config
variant takes its registered method's hue, less saturated the later it comes among that method's variants.
M sets the lightness (CIE :math:`L^*`) on one log scale, light for few points and dark for many:

.. math::

    L^*(M) = L_{\\text{light}} - (L_{\\text{light}} - L_{\\text{dark}}) \\min\\left(1, \\max\\left(0,
    \\frac{\\log(M / M_{\\text{light}})}{\\log(M_{\\text{dark}} / M_{\\text{light}})}\\right)\\right)

with the lightest and darkest :math:`L^*` in ``LIGHTNESS`` and their :math:`M` in ``M_RANGE``, so a (method, M)
has the same colour in every figure, whatever else the figure shows. Colours are made in
HUSL (a CIELUV hue, saturation and :math:`L^*`), where a hue keeps its look across lightness.
"""

import math
from collections.abc import Mapping

from seaborn.external import husl

from gpstudy.methods import METHODS
from gpstudy.study import run_settings

HUES = (250.0, 40.0, 140.0, 10.0, 300.0, 190.0, 90.0, 340.0)  # HUSL hues in METHODS' order: blue, orange, green,
# red, purple, teal, olive, magenta; a ninth registered method starts again at blue
SATURATION = 90.0  # HUSL saturation of a registered method's colours (of 100)
VARIANT_DESATURATION = 40.0  # the k-th variant of a method: saturation SATURATION - k * VARIANT_DESATURATION
LIGHTNESS = (82.0, 32.0)  # L* of the lightest shade (M <= M_RANGE[0]) and of the darkest (M >= M_RANGE[1])
M_RANGE = (2, 1000)  # the study's fewest and most points (Snelson's M = 2, SVGP's M = 1000): the shades' ends
REFERENCE = (0.0, 0.0, 0.0)  # what is no method of the study: the exact GP's dashed lines, PBP, the data


def color(method: str, m: int, variants: Mapping[str, str] | None = None) -> tuple[float, float, float]:
    """The RGB colour (each in [0, 1]) of ``method`` with ``m`` points.

    Args:
        method: a registered method or one of ``variants``; any other name gets the hue after the registered
            ones'.
        m: inducing or measurement points: the shade (more points, darker).
        variants: config variant -> its registered method (:func:`variant_methods`), in the config's order.
    """
    variants = variants or {}
    base = variants.get(method, method)
    rank = [name for name, of in variants.items() if of == base].index(method) + 1 if method in variants else 0
    light, dark = LIGHTNESS
    share = math.log(m / M_RANGE[0]) / math.log(M_RANGE[1] / M_RANGE[0])
    lightness = light - (light - dark) * min(max(share, 0.0), 1.0)
    hue = HUES[(list(METHODS).index(base) if base in METHODS else len(METHODS)) % len(HUES)]
    red, green, blue = husl.husl_to_rgb(hue, max(SATURATION - rank * VARIANT_DESATURATION, 0.0), lightness)
    return min(max(red, 0.0), 1.0), min(max(green, 0.0), 1.0), min(max(blue, 0.0), 1.0)


def variant_methods(config: Mapping) -> dict[str, str]:
    """Each variant of the study ``config`` (its ``variants``) -> the registered method it runs (as
    :func:`gpstudy.study.run_settings` resolves it), in the config's order."""
    return {name: run_settings(config, None, method=name, M=1).method for name in config.get("variants", {})}
