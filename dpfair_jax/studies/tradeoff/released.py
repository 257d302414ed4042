"""The released models of the public tradeoff study: each search's winner, kept on the host.

The compiled programs output every run's trained parameters (leaves ``[R, L, ...]``); only the
winner of each search (the best noisy validation score, the run its row reports) leaves
:func:`_block_models`, as a :class:`~dpfair_jax.studies.tradeoff.tables.SelectedModel` with the
row's spend. Privacy: the winner is covered by the selection's spend; a losing run's model is
covered only while it stays hidden, so none is returned or written.
"""

from __future__ import annotations

import jax
import numpy as np
import pandas as pd

from dpfair_jax.studies.tradeoff.tables import SelectedModel


def _row_keys(table: pd.DataFrame) -> list[tuple]:
    cols = table[["method", "epsilon", "lam", "replicate"]].itertuples(index=False, name=None)
    return [(str(m), float(e), float(l), int(r)) for m, e, l, r in cols]


def _block_models(st, mine: list[int], per_rep: list, searches: list[dict], out: dict, params,
                  rows: list[dict], spends: dict) -> dict:
    """Each search's winner as a :class:`SelectedModel` keyed ``(method, epsilon, lam, replicate)``
    (the same winner as :func:`_block_rows`: the best noisy validation score; ``rows`` in ``mine``'s
    order). Only winners leave this function: a losing run's model is covered only while hidden."""
    where = {key: pos for r, lst in enumerate(per_rep) for pos, key in enumerate(lst)}
    models = {}
    for i, row in zip(mine, rows):
        sr = searches[i]
        r, m, e = sr["replicate"], sr["method"], st.eps[sr["eps_i"]]
        pos = [where[(i, j)] for j in range(len(sr["cands"]))]
        best = int(np.argmax(-out["score_errors"][r, pos]))
        if int(sr["cands"][best]) != int(row["candidate"]):  # the row and the model are one run
            raise RuntimeError(f"internal: the model and row of {m} (replicate {r}) are different runs.")
        p = pos[best]
        theta = jax.tree_util.tree_map(lambda a: np.array(a[r, p]), params)  # a copy: the block is freed
        key = (m, float(e), float(sr["lam"]), int(r))
        models[key] = SelectedModel(method=m, epsilon=float(e), lam=float(sr["lam"]), replicate=int(r),
                                    params=theta, spend=spends[(m, e)],
                                    hparams=dict(st.grids[m][int(row["candidate"])]), metrics=dict(row))
    return models
