"""The ``Dataset`` pytree every algorithm reads.

A dataset is features ``x: f32[n, d]``, labels or targets ``y`` (int class labels or float
targets), integer group ids ``s: int32[n]`` with a static ``num_groups``, an optional ``mask``
(1 for real rows, 0 for padding) and metadata. The arrays are pytree children (so a dataset can be
passed through ``jit``/``vmap``, e.g. a synthetic dataset generated per trial); ``num_groups``,
``num_classes`` and the metadata are static auxiliary data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpfair_jax import _validation as v


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Static metadata: names of features, groups and labels, and where the data came from."""

    feature_names: tuple[str, ...] = ()
    group_names: tuple[str, ...] = ()
    label_names: tuple[str, ...] = ()
    task: str = "classification"  # "classification" or "regression"
    source: str = ""


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Dataset:
    """Features ``x [n, d]``, labels/targets ``y [n]``, group ids ``s [n]``, optional ``mask [n]``.

    ``num_groups`` is static; ``num_classes`` is the number of label classes (0 for regression).
    """

    x: Any
    y: Any
    s: Any
    num_groups: int
    num_classes: int = 2
    mask: Any = None
    info: DatasetInfo = dataclasses.field(default_factory=DatasetInfo)

    # -- pytree protocol -------------------------------------------------------------------
    def tree_flatten(self):
        return (self.x, self.y, self.s, self.mask), (self.num_groups, self.num_classes, self.info)

    @classmethod
    def tree_unflatten(cls, aux, children):
        x, y, s, mask = children
        num_groups, num_classes, info = aux
        return cls(x=x, y=y, s=s, num_groups=num_groups, num_classes=num_classes, mask=mask, info=info)

    # -- conveniences ----------------------------------------------------------------------
    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def d(self) -> int:
        return int(self.x.shape[1])

    @property
    def is_regression(self) -> bool:
        return self.num_classes == 0

    def weights(self) -> jax.Array:
        """Row weights: the mask as float, or ones."""
        if self.mask is None:
            return jnp.ones(self.x.shape[0], dtype=jnp.result_type(self.x))
        return jnp.asarray(self.mask, dtype=jnp.result_type(self.x))

    def group_sizes(self) -> np.ndarray:
        """Host-side count of (unmasked) rows per group."""
        w = np.ones(len(self.s)) if self.mask is None else np.asarray(self.mask, dtype=float)
        return np.bincount(np.asarray(self.s), weights=w, minlength=self.num_groups)

    def take(self, idx) -> "Dataset":
        """Rows ``idx`` (host or device index array)."""
        mask = None if self.mask is None else self.mask[idx]
        return dataclasses.replace(self, x=self.x[idx], y=self.y[idx], s=self.s[idx], mask=mask)

    def replace(self, **changes) -> "Dataset":
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        """One line: sizes, groups (with their sizes when concrete), classes, task and source."""
        try:
            n, d = (int(k) for k in self.x.shape[-2:])
        except (AttributeError, TypeError, ValueError):
            return f"Dataset(x={type(self.x).__name__}, num_groups={self.num_groups})"
        groups = f"{self.num_groups}"
        if not isinstance(self.s, jax.core.Tracer) and np.ndim(self.s) == 1:
            try:
                sizes = self.group_sizes().astype(int)
                names = self.info.group_names if len(self.info.group_names) == self.num_groups else None
                parts = [f"{nm}={sz}" for nm, sz in zip(names, sizes)] if names else [str(z) for z in sizes]
                groups += " [" + ", ".join(parts[:6]) + (", ..." if len(parts) > 6 else "") + "]"
            except (TypeError, ValueError):  # abstract values
                pass
        task = "regression" if self.is_regression else f"{self.num_classes} classes"
        src = f", source={self.info.source!r}" if self.info.source else ""
        masked = ", masked" if self.mask is not None else ""
        return f"Dataset(n={n}, d={d}, groups={groups}, {task}{masked}{src})"

    def validate(self, *, min_group_size: int = 1) -> "Dataset":
        """Host-side checks: shapes, finiteness, label and group ranges, non-empty groups."""
        v.check_shape("x", self.x, ndim=2)
        n = v.check_same_length(x=self.x, y=self.y, s=self.s, mask=self.mask)
        if n == 0:
            raise ValueError("dataset is empty (n = 0).")
        v.check_shape("y", self.y, ndim=1)
        v.check_shape("s", self.s, ndim=1)
        v.check_finite("x", self.x)
        v.check_finite("y", self.y)
        v.check_int("num_groups", self.num_groups, minimum=1)
        if self.num_classes:
            v.check_labels(self.y, self.num_classes, "y")
        v.check_group_ids(self.s, self.num_groups, "s")
        if min_group_size > 0:
            sizes = self.group_sizes()
            small = [g for g in range(self.num_groups) if sizes[g] < min_group_size]
            if small:
                raise ValueError(
                    f"group(s) {small} have fewer than {min_group_size} row(s) "
                    f"(sizes {sizes.astype(int).tolist()}); merge or drop them, or lower num_groups."
                )
        return self


def make_dataset(
    x,
    y,
    s,
    *,
    num_groups: int | None = None,
    num_classes: int | None = None,
    mask=None,
    info: DatasetInfo | None = None,
    validate: bool = True,
    min_group_size: int = 1,
) -> Dataset:
    """Build a validated ``Dataset`` from array-likes (float32 features, int32 groups).

    ``num_groups`` defaults to ``max(s) + 1``; ``num_classes`` defaults to ``max(y) + 1`` for
    integer ``y`` and 0 (regression) for float ``y``. When ``x`` is a pandas DataFrame its column
    names become ``info.feature_names`` (unless ``info`` names them); for a DataFrame with target and
    group columns, use :func:`dataset_from_frame`.
    """
    frame_names: tuple[str, ...] = ()
    if hasattr(x, "columns") and hasattr(x, "to_numpy"):
        frame_names = tuple(str(c) for c in x.columns)
        if info is not None and not info.feature_names:
            info = dataclasses.replace(info, feature_names=frame_names)
        x = x.to_numpy()
    x = np.asarray(x)
    y = np.asarray(y)
    s = np.asarray(s)
    if s.dtype.kind not in "iu":
        if s.dtype.kind == "f" and np.all(np.mod(s, 1) == 0):
            s = s.astype(np.int32)
        else:
            raise ValueError(f"s must hold integer group ids, got dtype {s.dtype}.")
    if num_groups is None:
        num_groups = int(s.max()) + 1 if s.size else 1
    if num_classes is None:
        num_classes = int(y.max()) + 1 if (y.dtype.kind in "iub" and y.size) else 0
    y_out = y.astype(np.int32) if num_classes else y.astype(np.float32)
    ds = Dataset(
        x=jnp.asarray(x, dtype=jnp.float32),
        y=jnp.asarray(y_out),
        s=jnp.asarray(s, dtype=jnp.int32),
        num_groups=int(num_groups),
        num_classes=int(num_classes),
        mask=None if mask is None else jnp.asarray(mask, dtype=jnp.float32),
        info=info or DatasetInfo(feature_names=frame_names,
                                 task="classification" if num_classes else "regression"),
    )
    if validate:
        # Validate on the host copies (cheap, and before anything is traced).
        Dataset(x=x, y=y, s=s, num_groups=int(num_groups), num_classes=int(num_classes),
                mask=mask).validate(min_group_size=min_group_size)
    return ds
