"""Full float32 arithmetic for everything between the data and the noise.

On NVIDIA GPUs since Ampere, JAX's default precision for float32 matrix products and convolutions
is TF32 on the tensor cores: each operand is rounded to 10 mantissa bits (relative error up to
2^-11 ~ 4.9e-4). In a DP computation that breaks the sensitivity the accounting assumes: a
ghost-norm clipped sum ``sum_i c_i g_i`` computed as a TF32 matrix product adds example ``i``'s
contribution with each coordinate perturbed by up to ~5e-4 relative, while ``c_i`` was chosen
from an exactly computed norm, so one example's contribution can exceed the clip norm ``C`` by
up to ~1e-3 relative (on an H200, ghost-norm and vmap clipped sums differed by up to 1e-2
relative in single coordinates). Float32 rounding (2^-24) is what every DP library accepts; TF32
is 8,000 times coarser.

:func:`full_precision` runs a function with ``jax.default_matmul_precision("highest")`` while it
is traced, so every matrix product and convolution it binds (dense layers, ghost-norm Gram
products, the clipped-sum contractions ``c @ x``, one-hot group sums) is computed in full float32
on every backend; explicit ``precision=`` arguments are kept. On CPU this changes nothing (XLA:CPU
always computes float32 products in float32). The kit decorates every public function that maps
private data to a quantity that is then noised or released (the privacy primitives and each
algorithm's ``fit``/``train``); model code outside those functions (evaluation, a user's own
non-private training) keeps JAX's default. The cost on a GPU is measured in
``benchmarks/dpsgd_step.py`` (docs/performance.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax

__all__ = ["PRIVACY_MATMUL_PRECISION", "full_precision"]

PRIVACY_MATMUL_PRECISION = "highest"

F = TypeVar("F", bound=Callable[..., Any])


def full_precision(fn: F) -> F:
    """Decorate ``fn`` so that it is traced (and so compiled) with full float32 matrix products."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with jax.default_matmul_precision(PRIVACY_MATMUL_PRECISION):
            return fn(*args, **kwargs)

    wrapper.__full_precision__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]
