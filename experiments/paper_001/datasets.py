"""Paper 001's named data sets with its group attributes and preprocessing: ``load_dataset(name, ...)``.

The one way to load a real data set is :func:`dpfair_jax.data.load`; this wrapper (paper 001's
choices, used by its study only) calls it with the paper's groups and normalization.
``"synthetic"`` is paper 001's two-group classification (``synthetic.two_group_classification``,
two groups with different norms and margins, split in half); a tabular loader name
(``"adult"``, ``"credit"``, ``"german"``, ``"parkinsons"``) is read with the group attribute the
papers use (:data:`GROUPS`: Adult ``race_binary``, the others ``sex``; Parkinsons from ``path`` or
``$DPFAIR_PARKINSONS_CSV``). Features are standardized with the training split's moments
(``normalization="standard"``) or per group (``"group"``, paper 001's Corollary 2).

Privacy: the standardization moments are computed from the (private) training split without noise;
a study that trains privately on these rows should state it (``RunContext.record_privacy(...,
not_covered=...)``). Nothing here draws privacy noise or spends budget.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from dpfair_jax.data import preprocessing as P
from dpfair_jax.data import synthetic as S
from dpfair_jax.data import tabular

__all__ = ["GROUPS", "load_dataset"]

#: The group attribute of each tabular data set (paper 001's choices).
GROUPS: dict[str, str] = {"adult": "race_binary", "credit": "sex", "german": "sex", "parkinsons": "sex"}


def load_dataset(name: str, *, seed: int = 0, max_rows: int | None = None, synthetic: dict | None = None,
                 path: str | None = None, normalization: str = "standard"):
    """``((train, test), "")`` or ``(None, reason)`` when the data are not available.

    ``normalization``: ``"standard"`` (z-score with the training split's moments) or ``"group"``
    (per-group standardization, paper 001 Cor. 2). ``synthetic`` overrides the generator's
    settings (``n`` rows per split, ``ratio``, ``d``, ``norms``, ``margins``, ``label_noise``);
    ``max_rows`` subsamples the training split; ``path`` locates the Parkinsons CSV.
    """
    if normalization not in ("standard", "group"):
        raise ValueError(f"normalization must be 'standard' or 'group', got {normalization!r}.")
    if name == "synthetic":
        cfg = dict(n=2000, ratio=0.5, d=8, norms=[1.0, 3.0], margins=[1.5, 0.4], label_noise=0.05)
        cfg.update(synthetic or {})
        n = int(cfg.pop("n"))
        full = S.two_group_classification(jax.random.key(seed), 2 * n, **cfg).data
        idx = np.random.default_rng(seed).permutation(full.n)
        train, test = full.take(idx[:n]), full.take(idx[n:])
        train, test = P.standardize(train, test) if normalization == "standard" else (train, test)
    else:
        if name == "parkinsons":
            path = path or tabular.default_parkinsons_path()
            if not path or not os.path.exists(path):
                return None, f"Parkinsons CSV not given (config path= or ${tabular.PARKINSONS_ENV}); skipped."
        try:
            train, test = tabular.load(name, groups=GROUPS.get(name), seed=seed, path=path,
                                       standardize=False if normalization == "group" else "all")
        except (ImportError, FileNotFoundError) as err:
            return None, f"{name} not available ({err}); skipped."
    if max_rows is not None and train.n > max_rows:
        idx = np.sort(np.random.default_rng(seed + 1).permutation(train.n)[:max_rows])
        train = train.take(idx)
    if normalization == "group":
        train, test = P.group_standardize(train, test)
    return (train, test), ""
