"""The fairness-error tradeoff study of paper 004 (Figs 2-9) and its public, tuned form.

The public study (:func:`tradeoff_frontier_study`, result :class:`TradeoffStudy`):

- methods: ``"dpfermi"`` (DP-FERMI, :mod:`dpfair_jax.algorithms.fermi`), ``"pfld_stochastic"`` (a
  stochastic PF-LD-style variant: multipliers moved every step on the batch's violation,
  :mod:`dpfair_jax.algorithms.pfld`), ``"pfld_epoch"`` (PF-LD as Tran, Fioretto and Van
  Hentenryck specify it: non-negative multipliers updated once per epoch on the noisy full-data
  violation, :mod:`dpfair_jax.algorithms.pfld_epoch`) and ``"dpsgd"`` (DP-SGD: the task loss
  alone, i.e. lambda = 0), over lambdas x epsilons x replicates; beside them, not in the default
  list, the paper's other baselines ``"mitigation"`` and ``"jagielski_post"`` (:mod:`.baselines`)
  and Jagielski et al.'s DP-oracle-learner ``"jagielski_in"`` (:mod:`.oracle`, both units);
- data: a :class:`~dpfair_jax.data.Dataset` or a pandas DataFrame with named target, group and
  feature columns (:func:`dpfair_jax.data.dataset_from_frame`); each replicate is its own
  train / validation / test split (a random permutation of the rows from the seed, cut at fixed
  sizes: a function of the seed and the row count only, :func:`replicate_splits`; numeric columns
  z-scored with the replicate's training moments);
- privacy: every method runs at the example level (all features, add/remove), with the same
  epsilon and delta; the noise multipliers are looked up for the user. ``privacy_unit=
  "sensitive_attribute"`` (the paper's Definition 2.2) runs the same mechanisms calibrated and
  accounted for a change of one record's ``s_i`` (:mod:`.units`, docs/privacy_units.md): DP-SGD
  records 0, and each row carries the paper's Theorem 3.3 record beside its spend;
- tuning (equal budget for every method): per (method, epsilon, lambda, replicate), the
  hyperparameters (learning rates, clip norms, W radius or multiplier box) are chosen on the
  validation split by Papernot-Steinke random stopping (:mod:`dpfair_jax.privacy.selection`): ``K``
  runs drawn from the same law for every method, each on a candidate drawn uniformly from the
  method's grid and scored by its noisy validation error, the best one kept. The training noise is
  calibrated so that the whole selection (all ``K`` runs and their scores) is within the target
  epsilon; that total is each row's ``spend_epsilon``. A row releases only the winning run (its
  candidate, noisy validation score, model and test metrics): ``K``, the losing candidates and
  their scores are never returned, written or logged (the bound holds only while they stay
  hidden). ``selection="nonprivate"`` (labelled) runs
  every grid point and takes the exact arg-max (no guarantee for the selection: ``spend_epsilon``
  is ``inf``);
- evaluation on the test split; one row per (method, epsilon, lambda, replicate) with the error,
  the violations, the spend, the selection, a ``degenerate`` flag (constant predictions, or a
  test error within 0.005 of the base-rate error or above it) and a ``converged`` flag (the
  released run's ``stationarity``, the gradient norm of its method's own objective on the test
  split, evaluation like the test metrics, over the norm at the start, at most
  :data:`.convergence.STATIONARITY_RTOL`: :func:`.convergence.row_stationarity`; computed inside
  the compiled program from the trained model, no extra training);
- the models: each row's released model (the winning run's trained parameters, float32 NumPy,
  with the row's spend, candidate and metrics) in :attr:`TradeoffStudy.models` /
  :meth:`TradeoffStudy.model`, saveable with :func:`dpfair_jax.serialization.save_run`
  (:meth:`SelectedModel.save`): keep it, a refit would spend again; the programs output every
  run's parameters, the host keeps only each search's winner;
- progress (:mod:`.progress`): a bar on a terminal, a log line per finished program, silent with
  ``progress=False``; never ``K``, a run count or a timing;
- one compiled program per algorithm and data shape (the runs of every epsilon, lambda, replicate
  and candidate as one ``vmap``); frontiers with intervals through
  :mod:`dpfair_jax.fairness.frontier` (:meth:`TradeoffStudy.plot`, :func:`compare_frontiers`).

The earlier engine (:func:`tradeoff_study`, fixed hyperparameters, one method per call, used by
studies that compare at fixed settings), :func:`equal_error_table`, :func:`baseline_name` and
:func:`plot_tradeoff` are kept.

Privacy: each row's model is ``(spend_epsilon, spend_delta)``-DP at the example level under
add/remove (the selection's ``RepeatAndSelectDpEvent`` over one run's event: the training steps,
the method's own releases and the noisy validation score; the Poisson padding's truncation
probability, times the expected number of runs, is in delta). Rows are separate releases (one
model per point of a frontier). Not covered: the check that every split has every group (one bit
about the data, before any training), the z-scoring moments of each training split and the test
metrics (evaluation). :func:`tradeoff_study` records its spend per epsilon as before.

Layout: :mod:`.methods` (methods, grids, labels), :mod:`.baselines` and :mod:`.oracle` (the
methods outside :data:`METHODS`), :mod:`.splits` (replicate splits),
:mod:`.program` (the compiled grid programs), :mod:`.selection` (candidate grids, search plan and
spend of the accounted selection), :mod:`.tables` (result, frontier comparison, equal-error table),
:mod:`.setup` (argument checks, splits, configs), :mod:`.plots`, :mod:`.progress` (bar and log lines), :mod:`.engine` (:func:`tradeoff_study`);
:func:`tradeoff_frontier_study` is here.
"""

from __future__ import annotations

import functools
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from dpfair_jax.studies.tradeoff.engine import tradeoff_study
from dpfair_jax.studies.tradeoff import baselines as _BL
from dpfair_jax.studies.tradeoff.methods import (
    _PROGRAM,
    BASELINE_METHODS,
    EXTRA_METHODS,
    ORACLE_METHODS,
    PROGRAMS,
    _field_set,
    DEFAULT_LAMS,
    DEFAULT_SEARCH,
    METHOD_LABELS,
    METHODS,
    UNIT_LABEL,
)
from dpfair_jax.studies.tradeoff.plots import plot_study, plot_tradeoff
from dpfair_jax.studies.tradeoff.progress import StudyProgress, check_progress
from dpfair_jax.studies.tradeoff.released import _block_models, _row_keys
from dpfair_jax.studies.tradeoff.program import _fermi_event, _method_fns, _program, _stack
from dpfair_jax.studies.tradeoff.selection import _grid, _search_plan, truncation_charge, _selection_label, _selection_spend
from dpfair_jax.studies.tradeoff.splits import _as_dataset, _permutation_splits, _stratified_splits, replicate_splits
from dpfair_jax.studies.tradeoff import units as U
from dpfair_jax.studies.tradeoff.setup import _Setup, _check_study_args, _setup  # noqa: F401
from dpfair_jax.studies.tradeoff.tables import (
    SelectedModel,
    TradeoffStudy,
    _boot_frontier,
    baseline_name,
    compare_frontiers,
    equal_error_table,
)

__all__ = [
    "METHODS",
    "BASELINE_METHODS",
    "ORACLE_METHODS",
    "METHOD_LABELS",
    "DEFAULT_LAMS",
    "DEFAULT_SEARCH",
    "TradeoffStudy",
    "SelectedModel",
    "tradeoff_frontier_study",
    "compare_frontiers",
    "plot_study",
    "replicate_splits",
    "tradeoff_study",
    "baseline_name",
    "equal_error_table",
    "plot_tradeoff",
]

_NOT_COVERED = ("the check that every split of every replicate has every group (one bit about the data, "
                "before training; a failing check aborts the study); each replicate's numeric columns are "
                "z-scored with its training split's moments, computed without noise; the test metrics are "
                "evaluation")


def tradeoff_frontier_study(
    data,
    *,
    target: str | None = None,
    group: str | None = None,
    features: list[str] | None = None,
    fairness: str = "dp",
    methods=METHODS,
    lams=DEFAULT_LAMS,
    epsilons=(1.0,),
    replicates: int = 3,
    epochs: int = 10,
    batch_size: int = 256,
    val_size: float = 0.15,
    test_size: float = 0.2,
    standardize: bool = True,
    max_rows: int | None = None,
    delta: float | None = None,
    selection: str = "private",
    runs=None,
    search: dict | None = None,
    fixed: dict | None = None,
    score_noise: float = 30.0,
    w_noise_ratio: float = 4.0,
    violation_noise_ratio: float = 10.0,
    count_noise_multiplier: float = 50.0,
    model=None,
    privacy_unit: str = "example",
    seed: int = 0,
    ctx=None,
    progress: bool | None = None,
) -> TradeoffStudy:
    """Fairness-error frontiers of DP-FERMI, both PF-LDs and DP-SGD, every method tuned on validation.

    Args:
      data: a :class:`~dpfair_jax.data.Dataset` (all rows; the study splits it) or a pandas
        DataFrame with columns ``target`` (two or more classes), ``group`` (the sensitive
        attribute) and ``features`` (default: every other column; non-numeric ones one-hot).
      fairness: ``"dp"`` (demographic parity, paper 004 eq. 10) or ``"eo"`` (equalized odds, eq. 11).
      methods: a subset of :data:`METHODS`, :data:`BASELINE_METHODS` (``"mitigation"``,
        ``"jagielski_post"``: example unit only) and :data:`ORACLE_METHODS` (``"jagielski_in"``:
        equalized odds, both units; :mod:`.oracle`).
      lams: the knob grid of the fair methods (DP-SGD is the lambda = 0 point).
      epsilons: target epsilons (``inf``: no noise); ``delta`` defaults to ``1 / n_train^2``.
      replicates: train/validation/test splits (``val_size``, ``test_size`` of the rows, a function
        of ``seed`` and the row count only, :func:`replicate_splits`; ``max_rows`` subsamples the
        data first); intervals are over replicates.
      epochs, batch_size: every method takes ``epochs * ceil(n_train / batch_size)`` Poisson-sampled
        steps of expected size ``batch_size``.
      selection: ``"private"`` (random stopping with ``runs``, default
        ``RandomStopping(mean=4, shape=1)``, the same for every method; the validation error
        count gets Gaussian noise of std ``score_noise``) or ``"nonprivate"`` (every grid point,
        exact arg-max; labelled, no guarantee for the selection).
      search: ``{method: {field: values}}`` replacing a method's candidate grid
        (:data:`DEFAULT_SEARCH`); ``fixed``: ``{method: {field: value}}`` for fields not searched.
      w_noise_ratio: the W (multiplier) update's noise multiplier over theta's in DP-FERMI and the
        stochastic PF-LD; ``violation_noise_ratio``: the same for PF-LD's per-epoch release;
        ``count_noise_multiplier``: the noisy group-frequency histogram of DP-FERMI, the
        stochastic PF-LD and DP-SGD (charged to each).
      model: a :mod:`dpfair_jax.models` model (default logistic, multinomial for more classes).
      privacy_unit: ``"example"`` (default: a whole record, add/remove) or ``"sensitive_attribute"``
        (the paper's Definition 2.2: neighbours differ in one record's ``s_i``): the same runs,
        calibrated and accounted for a change of one ``s_i`` (:mod:`.units`; DP-SGD records 0, the
        rows add ``thm33_epsilon``, the paper's Theorem 3.3 record, and ``unit_ratio``).
      ctx: a runner context: the spends go to ``privacy.json``, each program is a resumable chunk
        (the runner shows the progress and logs a line per chunk).
      progress: without ``ctx``, ``None`` draws a tqdm bar on an interactive terminal (or notebook)
        and logs a line per finished program (logger ``dpfair_jax.studies.tradeoff``, INFO);
        ``True`` always draws the bar; ``False`` is silent. Neither shows ``K``, a run count or a
        timing (:mod:`.progress`).

    Returns:
      :class:`TradeoffStudy` (table, spends, plot, comparison) with ``models``: each row's released
      model (:meth:`TradeoffStudy.model`, a :class:`SelectedModel`: the winning run's trained
      params as float32 NumPy, the row's spend, candidate and metrics; ``.save(path)`` writes it
      with :func:`dpfair_jax.serialization.save_run`). Keep these rather than refit a chosen
      candidate: a refit is a new release and spends again. The losing runs' models are dropped.

    Privacy: each row's model is (``spend_epsilon``, ``spend_delta``)-DP at the example level under
    add/remove (``privacy_unit="sensitive_attribute"``: under substitution of one ``s_i``),
    ``spend_epsilon <= epsilon`` with private selection (module docstring); every method of a study
    has the same unit, epsilon and delta.
    """
    check_progress(progress)
    st = _setup(data, target=target, group=group, features=features, fairness=fairness, methods=methods,
                lams=lams, epsilons=epsilons, replicates=replicates, epochs=epochs, batch_size=batch_size,
                val_size=val_size, test_size=test_size, standardize=standardize, max_rows=max_rows, delta=delta,
                selection=selection, runs=runs, search=search, fixed=fixed, score_noise=score_noise,
                w_noise_ratio=w_noise_ratio, violation_noise_ratio=violation_noise_ratio,
                count_noise_multiplier=count_noise_multiplier, model=model, seed=seed, unit=privacy_unit)
    noise, spends = _calibrate(st, ctx)

    # -- the searches: K runs, each on a uniformly drawn candidate (internal: never released) -------
    searches = _search_plan(st.methods, st.grids, st.eps, st.lams, st.replicates, st.law, st.seed)
    stacked = {name: _stack(st.ds, st.splits[name]) for name in ("train", "val", "test")}
    base_err = 1.0 - np.max(np.stack([np.mean(st.splits["test"][1] == j, axis=1) for j in range(st.l)]), axis=0)

    programs = [p for p in PROGRAMS if any(_PROGRAM[m] == p for m in st.methods)]
    models: dict = {}
    bar = StudyProgress(f"tradeoff {fairness}", len(programs), st.replicates, False if ctx is not None else progress)

    def compute(chunk: dict) -> pd.DataFrame:
        return _compute_block(st, chunk["program"], searches, noise, spends, stacked, base_err, ctx, models, bar)

    chunks = [{"program": p, "fairness": fairness, "methods": list(st.methods)} for p in programs]
    try:
        if ctx is None:
            table = pd.concat([compute(c) for c in chunks], ignore_index=True)
        else:
            table = ctx.map_chunks(chunks, compute, desc=f"tradeoff_{fairness}")
    finally:
        bar.close()
    out = _assemble(st, table, noise, spends)
    out.models = {k: models[k] for k in _row_keys(out.table) if k in models}  # in the table's order
    return out


def _run_event(st: _Setup, m: str, z: float):
    """One run's ``DpEvent`` of method ``m`` at theta multiplier ``z`` (with the noisy score when private)."""
    import dp_accounting

    from dpfair_jax.algorithms import pfld_epoch as PE

    if m == "pfld_epoch":
        ev = PE.run_event(st.cfgs["pfld_epoch"], st.n, z, st.violation_noise_ratio * z)
    elif m in EXTRA_METHODS:
        ev = _BL.run_event(m, st.cfgs[_PROGRAM[m]], st.n, z, st.w_ratio[m])
    else:
        ev = _fermi_event(st.cfgs[_PROGRAM[m]], st.n, z, st.w_ratio[m] * z)
    return dp_accounting.ComposedDpEvent([ev, dp_accounting.GaussianDpEvent(float(st.score_noise))]) \
        if st.private else ev


def _calibrate(st: _Setup, ctx) -> tuple[dict, dict]:
    """Noise: per (method, epsilon) the training multipliers whose selection meets the target, and
    the selection's spend (recorded with ``ctx``)."""
    from dpfair_jax.privacy import accounting as A
    from dpfair_jax.privacy import sampling as Smp
    from dpfair_jax.privacy import selection as S

    run_event = functools.partial(_run_event, st)
    n, delta, law, w_ratio = st.n, st.delta, st.law, st.w_ratio
    t0 = time.perf_counter()
    noise, spends, cache = {}, {}, {}
    for m in st.methods:
        for e in st.eps:
            z = 0.0
            if math.isfinite(e):
                ck = (m if m == "pfld_epoch" or m in EXTRA_METHODS else w_ratio[m], e)

                def example_z(ck=ck, m=m, e=e):
                    # the padding's truncation charge at the target comes out of delta
                    d_cal = A.calibration_delta(e, delta, truncation_charge(m, st.cfgs[_PROGRAM[m]], n, law, e))
                    if (ck, d_cal) not in cache:
                        cache[(ck, d_cal)] = S.calibrate_for_selection(lambda zz: run_event(m, zz), law, e, d_cal,
                                                                       relation="add_remove", rtol=0.005)
                    return cache[(ck, d_cal)]

                z = example_z() if st.unit == "example" else U.calibrate(st, m, e, example_z)
            z2 = (st.violation_noise_ratio if m == "pfld_epoch" else w_ratio[m]) * z
            noise[(m, e)] = (z, z2)
            if st.unit == "example":
                spends[(m, e)] = _selection_spend(m, e, z, run_event, law, delta, n, st.cfgs, st.grids,
                                                  st.private, Smp, S, A, selection_label=_selection_label(law))
            else:
                spends[(m, e)] = U.selection_spend(st, m, e, z, _selection_label(law))
    if ctx is not None:
        ctx.log(f"tradeoff study: n_train={n}, n_val={st.n_val}, steps={st.steps}, delta={delta:.3g}; noise "
                f"calibrated in {time.perf_counter() - t0:.1f} s")
        for (m, e), sp in spends.items():
            if math.isfinite(e):
                ctx.record_privacy(f"{m}_{st.fairness}_eps{e:g}", sp, not_covered=_NOT_COVERED)
    return noise, spends


def _block_layout(st: _Setup, kind: str, searches: list[dict], noise: dict):
    """The runs of program ``kind`` laid out per replicate: ``L`` slots (a multiple of 8, short
    replicates padded with their first run), the candidate fields, lambda and multipliers of each."""
    mine = [i for i, sr in enumerate(searches) if _PROGRAM[sr["method"]] == kind]
    per_rep = [[] for _ in range(st.replicates)]  # (search index, slot)
    for i in mine:
        for j in range(len(searches[i]["cands"])):
            per_rep[searches[i]["replicate"]].append((i, j))
    L = max(8, -(-max(len(p) for p in per_rep) // 8) * 8)
    fields = _field_set(kind)
    arr = {f: np.zeros((st.replicates, L), np.float32) for f in fields + ("lam", "zt", "z2", "zs")}
    for r, lst in enumerate(per_rep):
        for pos in range(L):
            i, j = lst[pos] if pos < len(lst) else lst[0]
            sr = searches[i]
            cand = st.grids[sr["method"]][int(sr["cands"][j])]
            e = st.eps[sr["eps_i"]]
            zt, z2 = noise[(sr["method"], e)]
            for f in fields:
                arr[f][r, pos] = cand[f]
            arr["lam"][r, pos], arr["zt"][r, pos], arr["z2"][r, pos] = sr["lam"], zt, z2
            arr["zs"][r, pos] = st.score_noise if (st.private and math.isfinite(e)) else 0.0
    return mine, per_rep, L, fields, arr


def _run_block(st: _Setup, kind: str, L: int, fields, arr: dict, stacked: dict, on_replicate=None) -> dict:
    """Program ``kind`` on every replicate (one compiled ``vmap`` over its ``L`` runs); outputs ``[R, L]``
    (``params``: a pytree of float32 NumPy leaves ``[R, L, ...]``); ``on_replicate()`` after each."""
    base_key = jax.random.key(st.seed)
    replicates = st.replicates
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.fold_in(base_key, 0x72756E), i))(
        jnp.arange(replicates * L) + 100_000 * PROGRAMS.index(kind))
    keys = keys.reshape((replicates, L))
    prog = _program(kind, st.cfgs[kind], st.model, st.l, st.n_val)
    outs = []
    for r in range(replicates):
        part = {name: jax.tree_util.tree_map(lambda a: a[r], stacked[name]) for name in stacked}
        o = prog(part["train"], part["val"], part["test"], keys[r], jnp.asarray(arr["lam"][r]),
                 jnp.asarray(arr["zt"][r]), jnp.asarray(arr["z2"][r]), jnp.asarray(arr["zs"][r]),
                 {f: jnp.asarray(arr[f][r]) for f in fields})
        outs.append({name: _host(v, name) for name, v in jax.block_until_ready(o).items()})
        if on_replicate is not None:
            on_replicate()
    return {name: jax.tree_util.tree_map(lambda *a: np.stack(a), *[o[name] for o in outs]) for name in outs[0]}


def _host(v, name: str):
    """An output on the host: NumPy; the params' leaves as float32."""
    if name == "params":
        return jax.tree_util.tree_map(lambda a: np.asarray(a, np.float32), v)
    return np.asarray(v)


def _block_rows(st: _Setup, mine: list[int], per_rep: list, searches: list[dict], out: dict, noise: dict,
                spends: dict, base_err: np.ndarray) -> list[dict]:
    """One row per search: its winner (best noisy validation score), the winner's test metrics and spend."""
    fairness, n_val, law = st.fairness, st.n_val, st.law
    metric = "dp_violation" if fairness == "dp" else "eo_violation"
    rows = []
    where = {key: pos for r, lst in enumerate(per_rep) for pos, key in enumerate(lst)}
    thm33 = {} if st.unit == "example" else {
        (m, e): U.thm33_epsilon(st, m, e, noise[(m, e)][0]) for m in st.methods for e in st.eps}
    for i in mine:
        sr = searches[i]
        r, m, e = sr["replicate"], sr["method"], st.eps[sr["eps_i"]]
        pos = [where[(i, j)] for j in range(len(sr["cands"]))]
        score = -out["score_errors"][r, pos]
        best = int(np.argmax(score))
        p = pos[best]
        cand = st.grids[m][int(sr["cands"][best])]
        sp = spends[(m, e)]
        err = float(out["error"][r, p])
        constant = bool(out["pred_share"][r, p] >= 1.0)
        at_base = err >= float(base_err[r]) - 0.005
        row = {"method": m, "label": METHOD_LABELS[m], "unit": U.UNIT_LABELS[st.unit], "fairness": fairness,
               "metric": metric, "epsilon": e, "lam": sr["lam"], "replicate": r, "error": err,
               "violation": float(out[metric][r, p]), "dp_violation": float(out["dp_violation"][r, p]),
               "eo_violation": float(out["eo_violation"][r, p]), "ermi": float(out["ermi"][r, p]),
               "val_error_noisy": float(out["score_errors"][r, p]) / n_val,
               "degenerate": constant or at_base, "constant": constant, "base_error": float(base_err[r]),
               "spend_epsilon": float(sp.epsilon), "spend_delta": float(sp.delta),
               "selection": _selection_label(law), "candidate": int(sr["cands"][best]),
               "noise_theta": noise[(m, e)][0], "truncated_steps": float(out["truncated_steps"][r, p])}
        row.update(_convergence(out, r, p))
        row.update({f"hp_{f}": v for f, v in cand.items()})
        if st.unit == "sensitive_attribute":  # the paper's Theorem 3.3 record of the same selection
            row["thm33_epsilon"] = thm33[(m, e)]
            row["unit_ratio"] = float(sp.epsilon) / thm33[(m, e)] if thm33[(m, e)] > 0 else math.nan
        rows.append(row)
    return rows


def _convergence(out: dict, r: int, p: int) -> dict:
    """The run's ``stationarity`` (:func:`.convergence.row_stationarity`) and ``converged`` (at most
    :data:`.convergence.STATIONARITY_RTOL`; ``None`` where the method has no criterion: NaN)."""
    from dpfair_jax.studies.tradeoff.convergence import STATIONARITY_RTOL

    stat = float(out["stationarity"][r, p]) if "stationarity" in out else math.nan
    return {"stationarity": stat, "converged": None if math.isnan(stat) else bool(stat <= STATIONARITY_RTOL)}


def _compute_block(st: _Setup, kind: str, searches: list[dict], noise: dict, spends: dict, stacked: dict,
                   base_err: np.ndarray, ctx, models: dict | None = None, bar=None) -> pd.DataFrame:
    """The rows of one program (a resumable chunk): lay out its runs, run them, keep each search's
    winner (its model into ``models``; the other runs' models are dropped here)."""
    t1 = time.perf_counter()
    mine, per_rep, L, fields, arr = _block_layout(st, kind, searches, noise)
    out = _run_block(st, kind, L, fields, arr, stacked, None if bar is None else bar.replicate_done)
    rows = _block_rows(st, mine, per_rep, searches, out, noise, spends, base_err)
    all_params = out.pop("params", None)  # None: a stand-in program without models (tests)
    if models is not None and all_params is not None:
        models.update(_block_models(st, mine, per_rep, searches, out, all_params, rows, spends))
    del all_params
    if bar is not None:
        bar.block_done(kind)
    if ctx is not None:
        # the number of runs (a function of the K's) is not logged: it is not covered by the spend
        ctx.log(f"{kind}: {st.replicates} replicates x {st.steps} steps: {time.perf_counter() - t1:.1f} s")
    return pd.DataFrame(rows)


def _assemble(st: _Setup, table: pd.DataFrame, noise: dict, spends: dict) -> TradeoffStudy:
    """The table in (method, epsilon, lam, replicate) order, with the study's sizes and multipliers."""
    order = {m: i for i, m in enumerate(st.methods)}
    table = table.sort_values(["method", "epsilon", "lam", "replicate"], key=lambda c: c.map(order)
                              if c.name == "method" else c).reset_index(drop=True)
    if "converged" in table:  # True / False, <NA> where the method has no criterion
        table["converged"] = table["converged"].astype("boolean")
    info = {"n_train": st.n, "n_val": st.n_val, "n_test": st.splits["test"][1].shape[1], "steps": st.steps,
            "delta": st.delta, "noise": {f"{m}@{e:g}": zz for (m, e), zz in noise.items()},
            "grid_sizes": {m: len(g) for m, g in st.grids.items()}, "selection": _selection_label(st.law),
            "privacy_unit": st.unit}
    return TradeoffStudy(table, spends, st.fairness, U.UNIT_LABELS[st.unit], info)
