"""Steps actually run: every algorithm's ``fit`` report against the events of its ``spend``.

Each ``fit`` returns a :class:`dpfair_jax.privacy.sampling.SamplingReport` read from the program it
ran (the ``lax.scan`` lengths, the sampler it called with its rate, the padded width it drew, the
shuffled epochs, the other releases). Each row below runs ``fit`` on a tiny problem and compares
that report with what ``spend(config, sizes, hparams)`` composes: the number of sampled steps and
the sampling rate of its ``PoissonSampledDpEvent`` / ``SampledWithoutReplacementDpEvent``, the
number of self-compositions of its unsampled Gaussians (shuffled epochs, per-epoch releases, a
noisy histogram), the truncation charge at the width drawn; for the zCDP / closed-form spends the
budget re-derived from the releases run. A fit that runs more steps (or epochs, or a wider batch,
or another rate) than its spend records fails its row. ``test_planted_extra_epoch_is_caught``
plants such a change (one more shuffled epoch in DP-SGDA) and checks that the comparison fails.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import dp_event as E
from test_spend_matches_fit import Row, _cgoo_problem, _fermi_data, _truncation_row

from dpfair_jax import models
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy.sampling import SamplingReport

DELTA = 1e-5  # the spend walk's delta (its _truncation_row compares against it)


# ------------------------------------------------------------------------------------------------
# the spend's event as release groups
# ------------------------------------------------------------------------------------------------
def _gaussians(ev: Any) -> int | None:
    """Number of Gaussians released together in ``ev`` (a Gaussian or a composition of them)."""
    if isinstance(ev, E.GaussianDpEvent):
        return 1
    if isinstance(ev, E.ComposedDpEvent) and all(isinstance(e, E.GaussianDpEvent) for e in ev.events):
        return len(ev.events)
    return None


def _groups(ev: Any, count: int = 1) -> list[tuple[int, Any]]:
    """``(count, sampling)`` per release group of a ``DpEvent``: ``sampling`` is ``("poisson", q)``,
    ``("wor", n, b)``, ``None`` (unsampled Gaussians released ``count`` times) or ``"zcdp"``."""
    if _gaussians(ev) is not None:
        return [(count, None)]
    if isinstance(ev, E.SelfComposedDpEvent):
        return _groups(ev.event, count * int(ev.count))
    if isinstance(ev, E.ComposedDpEvent):
        return [g for e in ev.events for g in _groups(e, count)]
    if isinstance(ev, E.PoissonSampledDpEvent):
        return [(count, ("poisson", float(ev.sampling_probability)))]
    if isinstance(ev, E.SampledWithoutReplacementDpEvent):
        return [(count, ("wor", int(ev.source_dataset_size), int(ev.sample_size)))]
    if isinstance(ev, E.ZCDpEvent):
        return [(count, "zcdp")]
    raise AssertionError(f"unexpected DpEvent in a spend: {ev!r}")


def report_rows(report: Any, spend: Any, *, truncation: bool = True) -> list[Row]:
    """The report of a sampled fit against its spend's event (module docstring)."""
    rows = [Row("fit returns a SamplingReport", True, isinstance(report, SamplingReport))]
    if not isinstance(report, SamplingReport) or spend.event is None:
        rows.append(Row("spend records a DpEvent", True, spend.event is not None))
        return rows
    groups = _groups(spend.event)
    sampled = [g for g in groups if g[1] is not None]
    unsampled = sorted(c for c, s in groups if s is None)
    others = [c for _, c in report.releases]
    if report.sampler in ("poisson", "fixed_size"):
        rows.append(Row("one subsampled step event", 1, len(sampled)))
        if len(sampled) != 1:
            return rows
        count, smp = sampled[0]
        rows.append(Row("steps run = sampled steps composed", report.steps, count))
        if report.sampler == "poisson":
            rows.append(Row("sampler run (Poisson) = event's sampling", "poisson", smp[0]))
            rows.append(Row("Poisson rate run = event's rate", report.sample_rate, smp[1], "~", 1e-12))
            if truncation:
                rows.append(_truncation_row(spend, n=report.dataset_size, q=report.sample_rate,
                                            B=report.batch_width, steps=report.steps))
        else:
            rows.append(Row("sampler run (fixed size) = event's (n, b) without replacement",
                            ("wor", report.dataset_size, report.batch_width), smp))
        rows.append(Row("other releases run = unsampled compositions", sorted(others), unsampled))
    elif report.sampler == "shuffle":
        rows.append(Row("no amplification claimed for shuffled epochs", 0, len(sampled)))
        rows.append(Row("epochs x (n // batch) = steps run", report.steps,
                        report.epochs * (report.dataset_size // report.batch_width)))
        rows.append(Row("epochs run and other releases = unsampled compositions",
                        sorted([report.epochs, *others]), unsampled))
    else:
        rows.append(Row("a sampler was run", True, False))
    return rows


# ------------------------------------------------------------------------------------------------
# the SGD family, on every sampler it supports
# ------------------------------------------------------------------------------------------------
def _glm_data(n: int = 48, d: int = 3):
    return _fermi_data(n, d)  # the spend walk's two-group logistic data, at 48 rows


def _case_dpsgd(sampling: str) -> tuple[Any, Any]:
    from dpfair_jax.algorithms import dpsgd

    data = _glm_data()
    cfg = dpsgd.DPSGDConfig(model=models.logistic(input_dim=3), sampling=sampling, delta=DELTA, batch_size=12,
                            steps=8)
    hp = dpsgd.DPSGDHparams(learning_rate=0.1, clip_norm=1.0, noise_multiplier=1.1)
    res = dpsgd.fit(jax.random.key(0), (data.x, data.y), hp, cfg)
    return res.report, dpsgd.spend(cfg, data.n, hp)


def _sgda_problem():
    data = {"x": jnp.asarray(_glm_data().x)}
    loss = lambda th, w, ex: jnp.dot(th, ex["x"]) * jnp.dot(w, ex["x"]) - 0.5 * jnp.dot(th, th)  # noqa: E731
    return data, loss


def _case_sgda(sampling: str) -> tuple[Any, Any]:
    from dpfair_jax.algorithms import sgda

    data, loss = _sgda_problem()
    cfg = sgda.SGDAConfig(steps=8, batch_size=12, sampling=sampling, delta=DELTA,
                          sensitivity_factor=1.0 if sampling == "poisson" else 2.0, private_loss=loss,
                          theta_shape=(3,), w_shape=(3,))
    hp = sgda.SGDAHparams(noise_theta=1.2, noise_w=1.5)
    res = sgda.fit(jax.random.key(1), data, hp, cfg)
    return res.report, sgda.spend(cfg, 48, hp)


def _case_fermi(sampling: str, pfld: bool = False) -> tuple[Any, Any]:
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.algorithms import pfld as P

    data = _glm_data()
    kw = dict(model=models.logistic(input_dim=3), num_groups=2, steps=8, batch_size=12, sampling=sampling)
    cfg = P.config(**kw) if pfld else F.FermiConfig(**kw)
    hp = F.FermiHparams(lam=0.5, noise_theta=1.3, noise_w=1.7)
    res = (P.fit if pfld else F.fit)(jax.random.key(2), data, hp, cfg)
    spend = (P.spend if pfld else F.spend)(cfg, data.n, hp)
    return res.report, spend


def _case_pfld_epoch() -> tuple[Any, Any]:
    from dpfair_jax.algorithms import pfld_epoch as PE

    data = _glm_data()
    cfg = PE.PFLDEpochConfig(model=models.logistic(input_dim=3), num_groups=2, num_classes=2, epochs=2,
                             batch_size=12)
    hp = PE.PFLDEpochHparams(noise_theta=1.1, noise_violation=2.0)
    res = PE.fit(jax.random.key(3), data, hp, cfg)
    return res.report, PE.spend(cfg, data.n, hp)


def _case_mitigation() -> tuple[Any, Any]:
    from dpfair_jax.algorithms import mitigation as M

    data = _glm_data()
    cfg = M.MitigationConfig(model=models.logistic(input_dim=3), delta=DELTA, batch_size=12, steps=8)
    hp = M.MitigationHparams(learning_rate=0.1, clip_norm=1.0, noise_multiplier=1.1, stats_noise_multiplier=3.0)
    res = M.fit(jax.random.key(4), data, hp, cfg)
    return res.report, M.spend(cfg, data.n, hp)


def _sampled(case: Callable[[], tuple[Any, Any]], **kw) -> Callable[[], list[Row]]:
    def rows() -> list[Row]:
        report, spend = case()
        return report_rows(report, spend, **kw)
    return rows


# ------------------------------------------------------------------------------------------------
# unsampled algorithms: the releases run against the budget the spend composes
# ------------------------------------------------------------------------------------------------
def _rows_output_perturbation() -> list[Row]:
    """``k`` Gaussian releases of multiplier ``z`` are one of multiplier ``z / sqrt(k)``: the
    spend's epsilon must be that of the releases run."""
    from dpfair_jax.algorithms import output_perturbation as OP

    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 3))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    y = (rng.random(40) < 0.5).astype(np.int32)
    cfg = OP.OutputPerturbationConfig(delta=DELTA)
    hp = OP.OutputPerturbationHparams(noise_multiplier=1.5, reg=0.5, radius=1.0)
    res = OP.fit(jax.random.key(5), (x, y), hp, cfg)
    spend = OP.spend(cfg, 40, hp)
    k = res.report.steps
    return [Row("no sampler", None, res.report.sampler),
            Row("epsilon of the Gaussian releases run", A.analytic_gaussian_epsilon(1.5 / math.sqrt(k), DELTA),
                spend.epsilon, "~", 1e-9)]


def _rows_jagielski() -> list[Row]:
    """One Laplace release of the ``[K, 2, 2]`` confusion counts, no sampler: the spend's epsilon is
    the Laplace closed form (L1 sensitivity 2 under the sensitive attribute over the scale)."""
    from dpfair_jax.algorithms import jagielski as J

    rng = np.random.default_rng(3)
    yhat, y, s = (rng.integers(0, 2, 60) for _ in range(3))
    cfg = J.JagielskiConfig(num_groups=2, delta=DELTA)
    hp = J.JagielskiHparams(noise_multiplier=0.8)
    res = J.fit(jax.random.key(7), (yhat, y, s), hp, cfg)
    spend = J.spend(cfg, 60, hp)
    scale = 0.8 * 2.0  # the counts' Laplace scale: multiplier x the histogram's L1 sensitivity (replace-one)
    return [Row("no sampler", None, res.report.sampler),
            Row("one Laplace release run", (("laplace_histogram", 1),), res.report.releases),
            Row("epsilon = L1 sensitivity / scale", 2.0 / scale, spend.epsilon, "~", 1e-12),
            Row("fit records the spend", spend, res.spend)]


def _rows_jagielski_in() -> list[Row]:
    """Jagielski et al.'s DP-oracle-learner: one Laplace count release and, per round run, one
    exponential-mechanism draw and one Laplace release of the rate differences; the spend's epsilon
    is the composition of the releases run at the epsilon each was drawn at (the rate differences'
    from their scale over the L1 sensitivity of the released counts)."""
    from dpfair_jax.algorithms import jagielski_in as JI
    from dpfair_jax.privacy import oracle_learner as OL

    rng = np.random.default_rng(4)
    n, T = 60, 6
    preds, y, s = rng.integers(0, 2, (5, n)), rng.integers(0, 2, n), rng.integers(0, 3, n)
    cfg = JI.JagielskiInConfig(num_groups=3, steps=T, delta=DELTA)
    hp = JI.JagielskiInHparams(count_epsilon=0.3, oracle_epsilon=0.2, auditor_epsilon=0.25)
    res = JI.fit(jax.random.key(8), JI.OracleData(preds, y, s), hp, cfg)
    spend = JI.spend(cfg, n, hp)
    denom = OL.public_denominators(res.diagnostics["noisy_counts"])
    ea_run = float(OL.rate_difference_sensitivity(denom, cfg.privacy_unit)) / float(res.diagnostics["auditor_scale"])
    rounds = res.diagnostics["released"].shape[0]
    run_eps = OL.oracle_learner_epsilon(0.3, 0.2, ea_run, rounds, DELTA)[0]
    return [Row("no sampler", None, res.report.sampler),
            Row("releases run", (("laplace_counts", 1), ("exponential_mechanism", T), ("laplace_rate_differences", T)),
                res.report.releases),
            Row("rounds run = rounds released", rounds, res.report.steps),
            Row("epsilon of the releases run", run_eps, spend.epsilon, "~", 1e-4),
            Row("fit records the spend", spend, res.spend)]


def _rows_budget_tailoring(relation: str) -> list[Row]:
    """Stage 2 releases each group's clipped gradient sum once per step run: the steps run times
    the per-step charge (sensitivity under the relation over the noise std) must be the stage-2
    budget of the spend's ledger; stage 1 and the noisy counts are run iff the ledger charges them."""
    from dpfair_jax.algorithms import budget_tailoring as BT

    K, n_k = 3, 30
    rng = np.random.default_rng(1)
    x = rng.normal(size=(K * n_k, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + rng.normal(size=K * n_k)).astype(np.float32)
    data = make_dataset(x, y, np.repeat(np.arange(K), n_k).astype(np.int32), num_groups=K, num_classes=0)
    cfg = BT.Config(steps=5, relation=relation)
    hp = BT.Hyperparams(rho=0.8, clip=0.7)
    res = BT.fit(jax.random.key(6), data, hp, cfg)
    diag, report = res.diagnostics, res.report
    spend = BT.spend(cfg, [n_k] * K, hp)
    led = BT.budget_ledger(hp.rho, np.asarray(diag["se"]), config=cfg, tau_fraction=hp.tau_fraction,
                           count_fraction=hp.count_fraction)
    items = collections.defaultdict(float)
    for name, val in led.charges.items():
        items[name.split("/")[0]] += float(np.sum(val))
    factor = {"add_remove": 1.0, "replace_one_within_group": 2.0}[relation]
    std = np.asarray(diag["noise_std"], np.float64)
    rho2_run = report.steps * float(np.sum((factor * float(hp.clip)) ** 2 / (2.0 * std**2)))
    released = dict(report.releases)
    return [Row("stage-2 steps run x per-step charge = ledger's stage 2", rho2_run, items["stage2"], "~", 1e-5),
            Row("stage 1 run iff charged", "stage1" in released, items["stage1"] > 0),
            Row("noisy counts run iff charged", "noisy_counts" in released, items["counts"] > 0),
            Row("ledger total = spend rho", sum(items.values()), spend.rho, "~", 1e-6),
            Row("fit records the spend", spend, res.spend)]


def _rows_means(method: str) -> list[Row]:
    from dpfair_jax.algorithms import mean_estimation as ME

    K, per = 2, 40
    x = np.random.default_rng(3).normal(size=(K * per, 2)).astype(np.float32) * 0.1
    s = np.repeat(np.arange(K), per).astype(np.int32)
    cfg = ME.MeanConfig(num_groups=K, method=method, relation="add_remove")
    hp = ME.MeanHparams()
    res = ME.fit(jax.random.key(7), (x, s), hp, cfg)
    spend = ME.spend(cfg, [per] * K, hp)
    rows = [Row("no sampler", None, res.report.sampler),
            Row("rho the fit charged = spend's", float(res.diagnostics["rho"]), float(spend.rho), "~", 1e-6),
            Row("noisy counts run iff charged", "noisy_counts" in dict(res.report.releases),
                float(res.diagnostics["count_rho"]) > 0)]
    if method == "coinpress":
        rows.append(Row("CoinPress iterations run = the budget shares composed", len(cfg.split),
                        res.report.steps))
    else:
        rows.append(Row("one release", 1, res.report.steps))
    return rows


def _rows_synthesis() -> list[Row]:
    from dpfair_jax.algorithms import synthesis as SY

    rng = np.random.default_rng(4)
    codes = np.stack([rng.integers(0, 2, 60), rng.integers(0, 3, 60)], axis=1).astype(np.int32)
    s = rng.integers(0, 2, 60).astype(np.int32)
    cfg = SY.SynthesisConfig(domains=(2, 3), num_groups=2, delta=DELTA)
    hp = SY.SynthesisHparams(rho=1.0)
    res = SY.fit(jax.random.key(8), (codes, s), hp, cfg)
    spend = SY.spend(cfg, 60, hp)
    counted = "stratum_counts" in dict(res.report.releases)
    return [Row("one synthesizer fit", 1, res.report.steps),
            Row("noisy stratum counts run iff charged", counted, "no stratum counts released" not in spend.notes),
            Row("counts returned iff released", counted, res.params.counts is not None)]


def _rows_reductions() -> list[Row]:
    from dpfair_jax.algorithms import reductions as R
    from dpfair_jax.algorithms.reductions import interface as RI
    from dpfair_jax.algorithms.reductions import theory as PF

    K, M, n = 3, 12, 200
    L = np.random.default_rng(5).uniform(0.1, 0.6, size=(M, K)).astype(np.float32)
    data = R.GridData(L, n)
    prob = _cgoo_problem(K)
    c1, h1 = R.SamplingConfig(problem=prob), R.SamplingHparams(G=2.0, epsilon=1.0)
    r1 = R.fit(jax.random.key(9), data, h1, c1)
    s1 = R.spend(c1, n, h1)
    c2 = R.PrivateCGOOConfig(problem=prob, steps=7, delta=DELTA)
    h2 = R.PrivateCGOOHparams(G=2.0, oracle_epsilon=0.3, laplace_scale=0.05)
    r2 = R.fit(jax.random.key(10), data, h2, c2)
    s2 = R.spend(c2, n, h2)
    b = RI._algorithm2_budget(c2, n, h2)
    eps_run, _ = PF.advanced_composition(b.round_epsilon, b.oracle_delta, r2.report.steps, b.delta_bar)
    return [Row("Algorithm 1: one exponential-mechanism draw at the spend's epsilon", (1, 1.0),
                (r1.report.steps, s1.epsilon)),
            Row("Algorithm 2: rounds run composed = spend epsilon", eps_run, s2.epsilon, "~", 1e-12)]


CASES: dict[str, Callable[[], list[Row]]] = {
    "dpsgd/poisson": _sampled(functools.partial(_case_dpsgd, "poisson")),
    "dpsgd/fixed_size": _sampled(functools.partial(_case_dpsgd, "fixed_size")),
    "dpsgd/shuffle": _sampled(functools.partial(_case_dpsgd, "shuffle")),
    "sgda/poisson": _sampled(functools.partial(_case_sgda, "poisson")),
    "sgda/fixed_size": _sampled(functools.partial(_case_sgda, "fixed_size")),
    "sgda/shuffle": _sampled(functools.partial(_case_sgda, "shuffle")),
    "fermi/poisson": _sampled(functools.partial(_case_fermi, "poisson")),
    "fermi/fixed_size": _sampled(functools.partial(_case_fermi, "fixed_size")),  # slow (its compile)
    "fermi/shuffle": _sampled(functools.partial(_case_fermi, "shuffle")),
    "pfld/poisson": _sampled(functools.partial(_case_fermi, "poisson", pfld=True)),
    "pfld_epoch/poisson": _sampled(_case_pfld_epoch),
    "mitigation/poisson": _sampled(_case_mitigation),
    "output_perturbation": _rows_output_perturbation,
    "jagielski": _rows_jagielski,
    "jagielski_in": _rows_jagielski_in,
    "budget_tailoring/replace_one_within_group": functools.partial(_rows_budget_tailoring, "replace_one_within_group"),
    "budget_tailoring/add_remove": functools.partial(_rows_budget_tailoring, "add_remove"),
    "mean_estimation/coinpress": functools.partial(_rows_means, "coinpress"),
    "mean_estimation/laplace": functools.partial(_rows_means, "laplace"),
    "synthesis": _rows_synthesis,
    "reductions": _rows_reductions,
}


def _check(rows: list[Row], what: str) -> None:
    bad = [r for r in rows if not r.ok()]
    assert not bad, f"{what}: the fit's report does not match its spend:\n" + "\n".join(r.line() for r in rows)


# rows past the default suite's time budget (a sampler another row of the same algorithm compiles)
SLOW = {"fermi/fixed_size"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_fit_report_matches_spend(case):
    _check(CASES[case](), case)


def test_every_algorithm_has_a_row():
    import dpfair_jax.algorithms as algs

    covered = {c.split("/")[0] for c in CASES}
    assert set(algs.ALGORITHMS) <= covered, set(algs.ALGORITHMS) - covered


def test_planted_extra_epoch_is_caught(monkeypatch):
    """A shuffled DP-SGDA run with one epoch more than its spend records (planted in the batch
    loop the fit runs) must fail the comparison; without the plant the same run passes."""
    from dpfair_jax.algorithms import sgda

    _check(CASES["sgda/shuffle"](), "sgda/shuffle")
    orig = sgda.steps._scan_batches

    def one_more_epoch(step, init, key, n, config):
        return orig(step, init, key, n, dataclasses.replace(config, steps=config.steps + n // config.batch_size))

    monkeypatch.setattr(sgda.steps, "_scan_batches", one_more_epoch)
    rows = CASES["sgda/shuffle"]()
    failed = [r.what for r in rows if not r.ok()]
    assert any("epochs run" in w for w in failed), "\n".join(r.line() for r in rows)
