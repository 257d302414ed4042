"""Host-side input validation shared by every public entry point.

Every check runs on concrete host values *before* anything is traced or computed, and raises
``ValueError`` (``TypeError`` for wrong types) whose message names the offending argument and says
how to fix it. Call these at the top of public functions, outside ``jit``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import jax
import numpy as np


def _is_tracer(value: Any) -> bool:
    return isinstance(value, jax.core.Tracer)


def is_traced(*values: Any) -> bool:
    """Whether any leaf of ``values`` (pytrees) is a JAX tracer, i.e. the call runs under
    ``jit``/``vmap``/``grad`` with these values abstract. The one "is it traced?" test of the kit:
    host checks and host accounting skip traced values."""
    return any(isinstance(leaf, jax.core.Tracer) for val in values for leaf in jax.tree_util.tree_leaves(val))


def check_finite(name: str, value: Any) -> None:
    """Raise if ``value`` (scalar, array or pytree of arrays) contains NaN or inf."""
    for leaf in jax.tree_util.tree_leaves(value):
        if _is_tracer(leaf):
            continue
        arr = np.asarray(leaf)
        if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
            bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
            raise ValueError(
                f"{name} contains {bad} non-finite value(s) (NaN or inf); "
                "remove or impute them before calling."
            )


def check_positive(name: str, value: Any, *, allow_inf: bool = False, allow_zero: bool = False) -> None:
    """Raise unless every entry of ``value`` is > 0 (or >= 0 with ``allow_zero``)."""
    if _is_tracer(value):
        return
    arr = np.asarray(value, dtype=np.float64)
    if np.any(np.isnan(arr)):
        raise ValueError(f"{name} is NaN; pass a positive number.")
    if not allow_inf and np.any(np.isinf(arr)):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    bad = arr < 0 if allow_zero else arr <= 0
    if np.any(bad):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {value!r}.")


def check_epsilon(value: Any, name: str = "epsilon", *, allow_inf: bool = False) -> None:
    """epsilon must be > 0 (inf only where ``allow_inf``: the non-private limit)."""
    check_positive(name, value, allow_inf=allow_inf)


def check_delta(value: Any, name: str = "delta") -> None:
    """delta must lie in the open interval (0, 1)."""
    if _is_tracer(value):
        return
    arr = np.asarray(value, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr >= 1):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {value!r}.")


def check_rho(value: Any, name: str = "rho", *, allow_inf: bool = False) -> None:
    """A zCDP budget rho must be > 0."""
    check_positive(name, value, allow_inf=allow_inf)


def check_sample_rate(value: Any, name: str = "sample_rate") -> None:
    """A sampling rate must lie in (0, 1]."""
    if _is_tracer(value):
        return
    arr = np.asarray(value, dtype=np.float64)
    if np.any(~np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > 1):
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}.")


def check_noise_multiplier(value: Any, name: str = "noise_multiplier") -> None:
    """A noise multiplier must be >= 0 (0 means no noise; inf is refused)."""
    check_positive(name, value, allow_zero=True)


def check_clip_norm(value: Any, name: str = "clip_norm", *, allow_inf: bool = False) -> None:
    """A clipping norm must be > 0; finite unless ``allow_inf`` (``inf`` means "do not clip", whose
    sensitivity is infinite: only a noiseless or explicitly non-private path may use it)."""
    check_positive(name, value, allow_inf=allow_inf)


def check_int(name: str, value: Any, *, minimum: int = 1) -> int:
    """Raise unless ``value`` is an integer >= ``minimum``; return it as ``int``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    """Raise unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; choose one of {', '.join(map(repr, choices))}.")
    return value


def check_shape(name: str, value: Any, ndim: int | None = None, shape: tuple | None = None) -> None:
    """Raise if ``value`` does not have ``ndim`` dimensions or (with ``None`` wildcards) ``shape``."""
    arr_shape = tuple(np.shape(value))
    if ndim is not None and len(arr_shape) != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {arr_shape}.")
    if shape is not None:
        if len(arr_shape) != len(shape) or any(
            want is not None and want != got for want, got in zip(shape, arr_shape)
        ):
            want = tuple("*" if s is None else s for s in shape)
            raise ValueError(f"{name} must have shape {want}, got {arr_shape}.")


def check_same_length(**arrays: Any) -> int:
    """Raise unless all arrays share their leading dimension; return it."""
    lengths = {name: int(np.shape(a)[0]) for name, a in arrays.items() if a is not None}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{k} has {v}" for k, v in lengths.items())
        raise ValueError(f"mismatched lengths: {detail}; they must have the same number of rows.")
    return next(iter(lengths.values())) if lengths else 0


def check_group_ids(s: Any, num_groups: int, name: str = "s", *, min_size: int = 0) -> None:
    """Group ids must be integers in [0, num_groups); optionally every group has >= min_size members."""
    if _is_tracer(s):
        return
    arr = np.asarray(s)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must hold integer group ids, got dtype {arr.dtype}.")
    if arr.size and (arr.min() < 0 or arr.max() >= num_groups):
        raise ValueError(
            f"{name} has group ids outside [0, {num_groups}) (min {arr.min()}, max {arr.max()}); "
            "relabel groups as 0..num_groups-1 or raise num_groups."
        )
    if min_size > 0:
        counts = np.bincount(arr.ravel(), minlength=num_groups)
        small = [g for g in range(num_groups) if counts[g] < min_size]
        if small:
            raise ValueError(
                f"group(s) {small} of {name} have fewer than {min_size} member(s) "
                f"(sizes {counts.tolist()}); merge or drop them."
            )


def check_labels(y: Any, num_classes: int, name: str = "y") -> None:
    """Class labels must be integers in [0, num_classes)."""
    if _is_tracer(y):
        return
    arr = np.asarray(y)
    if arr.dtype.kind == "f":
        if not np.all(np.equal(np.mod(arr, 1), 0)):
            raise ValueError(f"{name} must hold integer class labels, got non-integer floats.")
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"{name} must hold integer class labels, got dtype {arr.dtype}.")
    if arr.size and (arr.min() < 0 or arr.max() >= num_classes):
        raise ValueError(
            f"{name} has labels outside [0, {num_classes}) (min {arr.min()}, max {arr.max()})."
        )


def check_threefry_key(key: Any, name: str = "key") -> None:
    """Refuse PRNG keys that are not threefry2x32.

    With ``rbg``/``unsafe_rbg`` keys, ``vmap`` over split keys can silently reuse randomness, which
    breaks the independence of Monte Carlo trials and of privacy noise. A typed key carries its
    implementation in its dtype, also when traced (under ``jit``/``vmap``), so it is checked
    there too; a traced raw ``uint32`` key cannot be checked.
    """
    typed = jax.dtypes.issubdtype(getattr(key, "dtype", None), jax.dtypes.prng_key)
    if _is_tracer(key) and not typed:
        return
    if typed:
        impl = jax.random.key_impl(key)
        impl_name = getattr(impl, "name", str(impl))
        if "threefry" not in str(impl_name):
            raise ValueError(
                f"{name} uses the PRNG implementation {impl_name!r}; dpfair_jax needs threefry2x32 "
                "keys (rbg keys can repeat randomness under vmap). Create keys with "
                "jax.random.key(seed, impl='threefry2x32')."
            )
        return
    arr = np.asarray(key)
    if arr.dtype != np.uint32 or arr.shape[-1:] != (2,):
        if jax.config.jax_default_prng_impl != "threefry2x32":
            raise ValueError(
                f"{name} is a raw key of shape {arr.shape} under jax_default_prng_impl="
                f"{jax.config.jax_default_prng_impl!r}; dpfair_jax needs threefry2x32 keys."
            )
        raise ValueError(
            f"{name} must be a JAX PRNG key (jax.random.key(seed)), got an array of shape "
            f"{arr.shape} and dtype {arr.dtype}."
        )
    if jax.config.jax_default_prng_impl != "threefry2x32":
        raise ValueError(
            f"{name} is a raw uint32 key while jax_default_prng_impl="
            f"{jax.config.jax_default_prng_impl!r}; use threefry2x32 keys."
        )


def as_float(name: str, value: Any) -> float:
    """Convert a host scalar to float, with a clear error for non-scalars."""
    try:
        out = float(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a real number, got {value!r}.") from err
    if math.isnan(out):
        raise ValueError(f"{name} is NaN.")
    return out


def host_float(name: str, value: Any) -> float:
    """``value`` as one host float for a ``spend`` (one spend per grid point): a traced or
    array-valued ``hparams.<name>`` is refused, naming the field."""
    if isinstance(value, jax.core.Tracer) or np.ndim(value) != 0:
        raise ValueError(f"hparams.{name} must be one host number for spend (one spend per grid "
                         f"point), got {type(value).__name__} of shape {np.shape(value)}.")
    return float(value)


def training_size(sizes: Any) -> int:
    """The training size ``n`` from a trio's ``sizes``: an int, or per-group sizes (summed)."""
    n = int(np.sum(np.asarray(sizes))) if np.ndim(sizes) else sizes
    return check_int("sizes (the training size n)", n, minimum=1)
