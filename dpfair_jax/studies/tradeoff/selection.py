"""Accounted selection of the public tradeoff study: candidate grids, the search plan (internal) and
the spend of each (method, epsilon)."""

from __future__ import annotations

import math

import jax
import numpy as np

from dpfair_jax.studies.tradeoff.methods import _FIXED, _PROGRAM, EXTRA_METHODS, ORACLE_METHODS, DEFAULT_SEARCH, _field_set


def _grid(method: str, search: dict | None, fixed: dict | None) -> list[dict[str, float]]:
    import itertools

    space = dict(DEFAULT_SEARCH[method] if search is None or method not in search else search[method])
    base = dict(_FIXED[method], **((fixed or {}).get(method, {})))
    fields = _field_set(method)
    unknown = [k for k in list(space) + list(base) if k not in fields]
    if unknown:
        raise ValueError(f"search/fixed for {method!r} name unknown field(s) {unknown}; fields: {list(fields)}.")
    names = sorted(space)
    for k in names:
        vals = np.asarray(space[k], float)
        if vals.ndim != 1 or vals.size == 0:
            raise ValueError(f"search[{method!r}][{k!r}] must be a non-empty list of numbers.")
    out = []
    for combo in itertools.product(*(tuple(float(x) for x in space[k]) for k in names)):
        cand = dict(base, **dict(zip(names, combo)))
        out.append({f: float(cand[f]) for f in fields})
    return out

def _search_plan(methods, grids, eps, lams, replicates, law, seed: int) -> list[dict]:
    """The searches of a study, one per (method, epsilon, lambda, replicate): ``K ~ law`` candidate
    indices drawn uniformly from the method's grid (``law=None``: every grid point once).

    Internal: ``K`` and the candidates tried are not covered by the selection's spend and are
    never returned or written by the study (only the winner of each search is)."""
    from dpfair_jax.privacy import selection as S

    searches = []
    base_key = jax.random.key(seed)
    for mi, m in enumerate(methods):
        G = len(grids[m])
        for ei, _ in enumerate(eps):
            for li, lam in enumerate([0.0] if m == "dpsgd" else lams):
                for r in range(replicates):
                    if law is not None:
                        kk = jax.random.fold_in(jax.random.fold_in(base_key, 1 + mi), (ei * 1000 + li) * 1000 + r)
                        K = S.draw_num_runs(kk, law)
                        cands = np.random.default_rng([seed, mi, ei, li, r]).integers(0, G, size=K)
                    else:
                        cands = np.arange(G)
                    searches.append({"method": m, "eps_i": ei, "lam": lam, "replicate": r, "cands": cands})
    return searches


def _selection_label(law) -> str:
    return "nonprivate_argmax" if law is None else f"random_stopping(mean={law.mean:g}, shape={law.shape:g})"


def _sampling_shape(m, cfg, n: int) -> tuple[int, int]:
    """``(steps, padded batch rows)`` of one run of method ``m`` on ``n`` training rows."""
    if m in EXTRA_METHODS:
        from dpfair_jax.studies.tradeoff.baselines import sampling_shape

        return sampling_shape(m, cfg, n)
    steps = cfg.steps(n) if m == "pfld_epoch" else cfg.steps
    B = cfg.sgda_config(n).padded_batch(n) if m == "pfld_epoch" else cfg.sgda_config().padded_batch(n)
    return steps, B


def _padded_batch(m, cfg, n: int) -> int:
    return _sampling_shape(m, cfg, n)[1]


def truncation_charge(m, cfg, n: int, law, epsilon: float) -> float:
    """The Poisson padding's truncation probability of a selection of method ``m`` at ``epsilon``:
    one run's (:func:`dpfair_jax.privacy.sampling.truncation_delta`) times the mean number of runs
    (1 without a stopping law). It comes out of the target delta (``accounting.truncated_spend``)."""
    from dpfair_jax.privacy import sampling as Smp

    steps, B = _sampling_shape(m, cfg, n)
    if B >= n:
        return 0.0
    return Smp.truncation_delta(n, cfg.batch_size / n, B, steps, epsilon) * (1.0 if law is None else law.mean)


def _selection_spend(m, e, z, run_event, law, delta, n, cfgs, grids, private, Smp, S, A, *, selection_label):
    """The spend of one (method, epsilon): the best of ``K ~ law`` runs (or, labelled, the
    unaccounted arg-max over the grid)."""
    cfg = cfgs[_PROGRAM[m]]
    if not math.isfinite(e):
        return A.PrivacySpend(math.inf, delta, relation="add_remove", unit="example",
                              notes=f"{m}: epsilon = inf, no noise ({selection_label})")
    ev = run_event(m, z)
    B = _padded_batch(m, cfg, n)
    if not private:
        one = A.epsilon_of_event(ev, delta)
        return A.PrivacySpend(math.inf, delta, event=ev, relation="add_remove", unit="example",
                              notes=f"{m}: non-private arg-max over {len(grids[m])} runs, the selection is not "
                                    f"accounted (each run alone: epsilon {one:.4g})")
    eps_sel, total, trunc = A.truncated_spend(  # the truncation charge (times the mean runs) comes out of delta
        lambda d: S.selection_epsilon(ev, law, d, relation="add_remove"), float(delta),
        lambda eps: truncation_charge(m, cfg, n, law, eps))
    sampling = (f"Poisson padding {B} rows, truncation delta {trunc:.2e} (times the mean number of runs) included"
                if m not in ORACLE_METHODS else "no sampling (every training row each round), no truncation term")
    return A.PrivacySpend(eps_sel, min(total, 0.999999), event=S.repeat_and_select_event(ev, law),
                          relation="add_remove", unit="example", accountant="rdp",
                          notes=(f"{m}: best of K ~ {selection_label} runs on validation (each run: training, "
                                 f"its releases and a noisy validation error count); {sampling}"))
