"""Linear algebra every model is made of: Cholesky factors with jitter and deferred checks (``factor``),
symmetric products and Grams by halves (``products``), the parameterizations of positive quantities and
lower factors (``parameterizations``), and factors and triangular solves by blocks off a CPU (``blocked``).

It knows nothing of kernels, likelihoods, methods or networks: ``gpstudy.gaussian`` and the models build on it.
"""

from gpstudy.linalg.factor import (
    CholeskyError,
    FactorChecks,
    active_factor_checks,
    add_diagonal,
    add_jitter,
    add_jitter_,
    cholesky,
    deferred_factor_checks,
    inverse_by_products,
    inverse_from_scale_tril,
    jittered_scale_tril,
    kernel_scale_tril,
    solve_lower,
)
from gpstudy.linalg.parameterizations import inverse_positive, positive, raw_of_scale_tril, raw_scale_tril, scale_tril
from gpstudy.linalg.products import HALVES_FROM, gram, stacked_gram, symmetric_product

__all__ = [
    "HALVES_FROM",
    "CholeskyError",
    "FactorChecks",
    "active_factor_checks",
    "add_diagonal",
    "add_jitter",
    "add_jitter_",
    "cholesky",
    "deferred_factor_checks",
    "gram",
    "inverse_by_products",
    "inverse_from_scale_tril",
    "inverse_positive",
    "jittered_scale_tril",
    "kernel_scale_tril",
    "positive",
    "raw_of_scale_tril",
    "raw_scale_tril",
    "scale_tril",
    "solve_lower",
    "stacked_gram",
    "symmetric_product",
]
