"""A sensitivity probe for every release: with the noise off, each algorithm's releases on
neighbouring data sets move by at most the sensitivity its accounting declares.

For each row of ``CASES`` (an algorithm and one privacy-relevant option) and each neighbour the
relation it claims allows (add/remove: ``D`` and ``D`` plus one adversarial record; replace-one:
one record replaced; sensitive-attribute unit: only ``s_i`` changed; within-group relations: a
replacement in the same group), the fit runs twice with the same key and the spies of
``tests/_sensitivity_probe.py``: world A records every pre-noise release, world B records its own
and hands on A's, so each release is compared at the same history. Adversarial records have
features of norm 1e6 (or the edge of a declared public domain), labels at both ends and every
group. The declared sensitivity is what the library's spend charges: the noise scale drawn at the
release over the multiplier its ``PrivacySpend``'s ``DpEvent`` (or ledger) accounts; each case
also checks that number against the closed form (``C`` / ``2C`` for clipped sums, ...).

``test_probe_catches_planted_bugs`` plants wrong sensitivities (the mitigation's penalty left
unclipped, a clip norm doubled before clipping, a replace-one release noised for add/remove,
Jagielski et al.'s Laplace histogram at half its scale or noised for add/remove under the
sensitive-attribute unit, their DP-oracle-learner's anchor group weighed once in the rate
differences' sensitivity or its score sensitivity without the multiplier bound) and asserts the
probe fails on each.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models
from dpfair_jax.data.dataset import make_dataset

import _sensitivity_probe as P
from _sgd_keywords import mitigation_fit_kw, mitigation_spend_kw

BIG = 1e6
P.ADAPTERS[:] = []  # filled below (budget tailoring)
# The closed-form sanity checks of the declared sensitivities (on in the probe; the self-check
# turns them off, so that it shows the comparison itself failing on a planted bug).
SANITY = {"on": True}


def sane(ok: bool, what: str) -> None:
    if SANITY["on"]:
        assert ok, f"declared sensitivity is not the closed form: {what}"


# ------------------------------------------------------------------------------------------------
# data and neighbours
# ------------------------------------------------------------------------------------------------
def base_data(n: int = 6, d: int = 3, groups: int = 2, seed: int = 0, regression: bool = False,
              big: float = BIG):
    """Small data whose row 0 (the one replace-one neighbours replace) is itself adversarial:
    norm ``big`` along ``-1/sqrt(d)``, so a replacement can move a clipped sum by the full 2C."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[0] = -big * np.ones(d, np.float32) / math.sqrt(d)
    y = (x @ rng.normal(size=d)).astype(np.float32) if regression else (np.arange(n) % 2).astype(np.int32)
    s = (np.arange(n) % groups).astype(np.int32)
    return x, y, s


def adversarial_records(d: int, groups: int, labels: tuple, norm: float = BIG, seed: int = 1,
                        full: bool = False):
    """Records at feature norm ``norm``: along ``+1/sqrt(d)`` (opposite to row 0 of
    :func:`base_data`) and a random direction; every group, and both label ends across them
    (``full``: every (group, label) pair)."""
    rng = np.random.default_rng(seed)
    dirs = [np.ones(d) / math.sqrt(d), rng.normal(size=d)]
    dirs[1] /= np.linalg.norm(dirs[1])
    pairs = [(g, lab) for g in range(groups) for lab in labels] if full else \
        [(g, labels[g % len(labels)]) for g in range(groups)] + \
        ([(0, labels[-1])] if groups < len(labels) or groups == 1 else [])
    return [((norm * dirs[i % 2]).astype(np.float32), lab, g) for i, (g, lab) in enumerate(pairs)]


def neighbours(x, y, s, relation: str, records, *, replace_at: int = 0):
    """``(label, (x', y', s'))`` for each adversarial record under ``relation``:
    ``add_remove`` appends it; ``replace_one`` replaces row ``replace_at``; ``within_group``
    replaces a row of the record's group; ``attribute`` changes only ``s`` of row ``replace_at``."""
    out = []
    for i, (xr, yr, sr) in enumerate(records):
        if relation == "add_remove":
            out.append((f"add#{i}(s={sr},y={yr})", (np.vstack([x, xr[None]]), np.append(y, np.asarray(yr, y.dtype)),
                                                   np.append(s, np.int32(sr)))))
        elif relation in ("replace_one", "within_group"):
            j = replace_at if relation == "replace_one" else int(np.flatnonzero(s == sr)[0])
            x2, y2, s2 = x.copy(), y.copy(), s.copy()
            x2[j], y2[j], s2[j] = xr, yr, sr
            out.append((f"replace#{i}(s={sr},y={yr})", (x2, y2, s2)))
        elif relation == "attribute":
            for g in sorted(set(np.unique(s).tolist()) - {int(s[replace_at])}):
                s2 = s.copy()
                s2[replace_at] = g
                out.append((f"s[{replace_at}]->{g}", (x, y, s2)))
            break
        else:
            raise ValueError(relation)
    return out


def probe(monkeypatch, run: Callable[[tuple], Any], base: tuple, nbrs, multiplier) -> list[P.Check]:
    """World A on ``base`` against world B on each neighbour; ``run(data) -> spend``.
    ``multiplier``: ``(release, spend) -> z`` (each release against its own charge), or
    ``"zcdp"`` / ``"pure"`` (the whole run against the spend's ``rho`` / ``epsilon``)."""
    a, spend_a = P.run_world(monkeypatch, lambda: run(base))
    checks = []
    for label, data in nbrs:
        b, _ = P.run_world(monkeypatch, lambda: run(data), replay=a)
        if multiplier == "zcdp":
            checks += P.compare_zcdp(a, b, spend_a.rho, label)
        elif multiplier == "pure":
            checks += P.compare_zcdp(a, b, math.inf, label, epsilon=spend_a.epsilon)
        else:
            checks += P.compare(a, b, lambda r: multiplier(r, spend_a), label)
    return checks


def assert_within(checks: list[P.Check]) -> None:
    bad = [c for c in checks if not c.ok]
    assert not bad, "releases moved by more than their declared sensitivity:\n" + "\n".join(
        c.line() for c in bad[:12])


def single_gaussian_z(spend) -> float:
    zs = P.event_multipliers(spend.event)["gaussian"]
    assert len(zs) == 1, f"one Gaussian multiplier expected in the spend's event, got {zs}"
    return zs.pop()


# ------------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Case:
    name: str
    relation: str
    build: Callable[[], tuple]  # -> (run, base, neighbours, multiplier)
    violates: bool = False  # a documented non-private option: the probe must flag it


CASES: list[Case] = []


def case(name: str, relation: str, violates: bool = False):
    def deco(fn):
        CASES.append(Case(name, relation, fn, violates))
        return fn
    return deco


# --- DP-SGD -------------------------------------------------------------------------------------
def _dpsgd_case(sampling: str, relation: str, per_example: str = "auto", C: float = 0.7, z: float = 1.3):
    from dpfair_jax.algorithms import dpsgd

    x, y, s = base_data()
    n, d = x.shape
    cfg = dpsgd.DPSGDConfig(model=models.logistic(input_dim=d), sampling=sampling, per_example=per_example,
                            batch_size=n, steps=2)
    hp = dpsgd.DPSGDHparams(learning_rate=0.3, clip_norm=C, noise_multiplier=z)

    def run(data):
        xx, yy, ss = data
        return dpsgd.fit(jax.random.key(7), make_dataset(xx, yy, ss, num_groups=2, num_classes=2), hp, cfg).spend

    def multiplier(rel, spend):
        zz = single_gaussian_z(spend)
        # closed form: the declared sensitivity of the clipped sum is C (add/remove), 2C (replace)
        want = C * (1.0 if spend.relation == "add_remove" else 2.0)
        sane(math.isclose(float(rel.scale) / zz, want, rel_tol=1e-6), f"{float(rel.scale) / zz} vs {want}")
        sane(spend.relation == relation, spend.relation)
        return zz

    recs = adversarial_records(d, 2, (0, 1))
    return run, (x, y, s), neighbours(x, y, s, relation, recs), multiplier


for _smp_name, _rel_name in (("poisson", "add_remove"), ("fixed_size", "replace_one"), ("shuffle", "replace_one")):
    case(f"dpsgd[{_smp_name}]", _rel_name)(lambda s=_smp_name, r=_rel_name: _dpsgd_case(s, r))
case("dpsgd[poisson,vmap]", "add_remove")(lambda: _dpsgd_case("poisson", "add_remove", "vmap"))


# --- paper 001 mitigation -----------------------------------------------------------------------
def _mitigation_case(gammas=(1.0, 1.0), penalty_clip_norm=None, stats_every: int = 0, C: float = 2.0):
    """C = 2 leaves some rows of the data unclipped, so the groups' clipped-norm statistics differ
    from step 0 on (equal statistics give zero penalty coefficients: nothing to probe)."""
    from dpfair_jax.algorithms import mitigation as M

    x, y, s = base_data(n=6, d=3, groups=2)
    n, d = x.shape
    z = 1.1
    model = models.logistic(input_dim=d)
    params = model.init(jax.random.key(0), d)

    def run(data):
        xx, yy, ss = data
        ds = make_dataset(xx, yy, ss, num_groups=2, num_classes=2)
        mitigation_fit_kw(jax.random.key(2), model, params, ds, gamma1=gammas[0], gamma2=gammas[1], clip_norm=C,
                noise_multiplier=z, stats_noise_multiplier=z, learning_rate=0.5, batch_size=n, steps=2,
                stats_every=stats_every, penalty_clip_norm=penalty_clip_norm)
        return mitigation_spend_kw(z, z, n=n, batch_size=n, delta=1e-5, steps=2, gamma1=gammas[0],
                         gamma2=gammas[1], stats_every=stats_every)

    def multiplier(rel, spend):
        zz = single_gaussian_z(spend)
        sens = float(rel.scale) / zz
        if rel.shape == (2, 3):  # the [K, 3] group statistics: rows in [0, 1]^3
            sane(math.isclose(sens, math.sqrt(3.0), rel_tol=1e-6), f"stats {sens}")
        else:  # the clipped sum: C, or C + C_p clipped apart
            sane(math.isclose(sens, C + (penalty_clip_norm or 0.0), rel_tol=1e-6), f"sum {sens}")
        sane(spend.relation == "add_remove", spend.relation)
        return zz

    # huge records saturate the model, where the penalty gradients vanish: add moderate ones
    recs = adversarial_records(d, 2, (0, 1)) + adversarial_records(d, 2, (1, 0), norm=6.0, seed=2)
    return run, (x, y, s), neighbours(x, y, s, "add_remove", recs), multiplier


case("mitigation[gamma=(1,1)]", "add_remove")(lambda: _mitigation_case())
case("mitigation[gamma=(0.5,0)]", "add_remove")(lambda: _mitigation_case((0.5, 0.0)))
case("mitigation[gamma=(0,2)]", "add_remove")(lambda: _mitigation_case((0.0, 2.0)))
case("mitigation[penalty_clip_norm]", "add_remove")(lambda: _mitigation_case(penalty_clip_norm=0.3))
case("mitigation[stats_every]", "add_remove")(lambda: _mitigation_case(stats_every=1))


# --- DP-SGDA (a generic min-max loss, whole records private) -------------------------------------
def _sgda_case(sampling: str, relation: str, factor: float):
    from dpfair_jax.algorithms import sgda

    x, y, s = base_data()
    n, d = x.shape
    hp = sgda.SGDAHparams(lr_theta=0.3, lr_w=0.2, clip_theta=0.7, clip_w=0.4, noise_theta=1.2,
                          noise_w=1.2, radius=5.0)

    def loss(th, w, ex):
        z = ex["x"] @ th
        return jax.nn.softplus(z) - ex["y"] * z + w * z  # dL/dw = x . theta: unbounded

    cfg = sgda.SGDAConfig(steps=2, batch_size=n, sampling=sampling, sensitivity_factor=factor, private_loss=loss)

    def run(data):
        xx, yy, _ = data
        sgda.fit(jax.random.key(5), {"x": jnp.asarray(xx), "y": jnp.asarray(yy, jnp.float32)}, hp, cfg,
                 theta0=jnp.full((d,), 0.1, jnp.float32), w0=jnp.zeros((), jnp.float32))
        return sgda.spend(cfg, xx.shape[0], hp)

    def multiplier(rel, spend):
        zz = single_gaussian_z(spend)
        f = 1.0 if relation == "add_remove" else 2.0  # theta's clip 0.7 or w's 0.4
        sane(any(math.isclose(float(rel.scale) / zz, c * f, rel_tol=1e-6) for c in (0.7, 0.4)),
             f"{float(rel.scale) / zz}")
        sane(spend.relation == relation, spend.relation)
        return zz

    recs = adversarial_records(d, 2, (0, 1))
    return run, (x, y, s), neighbours(x, y, s, relation, recs), multiplier


case("sgda[poisson]", "add_remove")(lambda: _sgda_case("poisson", "add_remove", 1.0))
case("sgda[fixed_size]", "replace_one")(lambda: _sgda_case("fixed_size", "replace_one", 2.0))
case("sgda[shuffle]", "replace_one")(lambda: _sgda_case("shuffle", "replace_one", 2.0))
case("sgda[fixed_size, sensitivity_factor=1]", "replace_one")(
    lambda: _sgda_case("fixed_size", "replace_one", 1.0))


# --- DP-FERMI and PF-LD -------------------------------------------------------------------------
def _fermi_case(pfld: bool = False, relation: str = "add_remove", lam: float = 1.0, **overrides):
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.algorithms import pfld as PF

    x, y, s = base_data(n=6, d=3, groups=2)
    n, d = x.shape
    z = 1.4
    kw = dict(model=models.logistic(input_dim=d), num_groups=2, steps=2, batch_size=n,
              count_noise_multiplier=z)
    kw.update(overrides)
    cfg = PF.config(**kw) if pfld else F.FermiConfig(**kw)
    hp = F.FermiHparams(lam=lam, lr_theta=0.5, lr_w=0.3, clip_theta=0.7, clip_w=0.4, noise_theta=z,
                        noise_w=z, radius=5.0)
    public = cfg.group_frequencies == "public"
    fit = PF.fit if pfld else F.fit

    def run(data):
        xx, yy, ss = data
        ds = make_dataset(xx, yy, ss, num_groups=2, num_classes=2)
        extra = {"p_s": np.array([0.5, 0.5], np.float32)} if public else {}
        fit(jax.random.key(3), ds, hp, cfg, **extra)
        return (PF.spend if pfld else F.spend)(cfg, xx.shape[0], hp)

    def multiplier(rel, spend):
        sane(spend.relation == cfg.relation(), spend.relation)
        if spend.event is None:  # sensitive-attribute unit / shuffle: exact curve of multiplier z
            zz = z
        else:
            zz = single_gaussian_z(spend)
        if rel.fn == "noisy_histogram":
            sane(math.isclose(float(rel.scale) / zz, 1.0 if spend.relation == "add_remove" else math.sqrt(2.0),
                              rel_tol=1e-6), f"histogram {float(rel.scale) / zz}")
        else:
            f = 1.0 if spend.relation == "add_remove" else 2.0  # theta's clip 0.7 or W's 0.4
            sane(any(math.isclose(float(rel.scale) / zz, c * f, rel_tol=1e-6) for c in (0.7, 0.4)),
                 f"sum {float(rel.scale) / zz}")
        return zz

    recs = adversarial_records(d, 2, (0, 1))
    return run, (x, y, s), neighbours(x, y, s, relation, recs), multiplier


case("fermi[poisson]", "add_remove")(lambda: _fermi_case())
case("fermi[fixed_size]", "replace_one")(lambda: _fermi_case(relation="replace_one", sampling="fixed_size"))
case("fermi[shuffle]", "replace_one")(lambda: _fermi_case(relation="replace_one", sampling="shuffle"))
case("fermi[eo]", "add_remove")(lambda: _fermi_case(fairness="eo"))
case("fermi[public frequencies]", "add_remove")(lambda: _fermi_case(group_frequencies="public"))
case("fermi[sensitive_attribute]", "attribute")(
    lambda: _fermi_case(relation="attribute", privacy_unit="sensitive_attribute"))
case("fermi[generic grad path]", "add_remove")(lambda: _fermi_case(grad_path="generic"))
# documented as not private (the public code's clipping at m C, the paper's unscaled W-noise for
# lam > 1): the probe must flag them; the paper variant at lam <= 1 is private
case("fermi[official_batch clip]", "add_remove", violates=True)(lambda: _fermi_case(clip_mode="official_batch"))
case("fermi[paper variant, lam=1]", "add_remove")(lambda: _fermi_case(variant="paper"))
case("fermi[paper variant, lam=3]", "add_remove", violates=True)(lambda: _fermi_case(variant="paper", lam=3.0))
case("pfld[poisson]", "add_remove")(lambda: _fermi_case(pfld=True))
case("pfld[fixed_size]", "replace_one")(lambda: _fermi_case(pfld=True, relation="replace_one", sampling="fixed_size"))
case("pfld[sensitive_attribute]", "attribute")(
    lambda: _fermi_case(pfld=True, relation="attribute", privacy_unit="sensitive_attribute"))


# --- PF-LD with per-epoch dual updates ----------------------------------------------------------
def _pfld_epoch_case(fairness: str = "dp"):
    from dpfair_jax.algorithms import pfld_epoch as PE

    x, y, s = base_data(n=6, d=3, groups=2)
    n, d = x.shape
    z = 1.3
    # batch 4: ceil(n / 4) = 2 steps per epoch for both n = 6 and n + 1 (the same program)
    cfg = PE.PFLDEpochConfig(model=models.logistic(input_dim=d), num_groups=2, epochs=2, batch_size=4,
                             fairness=fairness)
    hp = PE.PFLDEpochHparams(lam=1.0, lr_theta=0.5, lr_dual=1.0, clip_theta=0.7, clip_violation=0.4,
                             noise_theta=z, noise_violation=z)

    def run(data):
        xx, yy, ss = data
        PE.fit(jax.random.key(4), make_dataset(xx, yy, ss, num_groups=2, num_classes=2), hp, cfg)
        return PE.spend(cfg, xx.shape[0], hp)

    def multiplier(rel, spend):
        zz = single_gaussian_z(spend)
        if float(rel.scale) > 0:  # theta's clipped sum (0.7) or the soft counts (0.4), add/remove
            sane(any(math.isclose(float(rel.scale) / zz, c, rel_tol=1e-6) for c in (0.7, 0.4)),
                 f"{float(rel.scale) / zz}")
        sane(spend.relation == "add_remove", spend.relation)
        return zz

    recs = adversarial_records(d, 2, (0, 1))
    return run, (x, y, s), neighbours(x, y, s, "add_remove", recs), multiplier


case("pfld_epoch[dp]", "add_remove")(lambda: _pfld_epoch_case())
case("pfld_epoch[eo]", "add_remove")(lambda: _pfld_epoch_case("eo"))


# --- paper 001 output perturbation ----------------------------------------------------------------
def _output_perturbation_case(loss: str = "logistic", fit_intercept: bool = True):
    from dpfair_jax.algorithms import output_perturbation as OP

    R, z, reg = 2.0, 1.5, 0.5
    x, y, s = base_data(n=6, d=3, groups=2, regression=loss == "squared", big=R)
    if loss == "squared":
        y = np.clip(y, -1.0, 1.0).astype(np.float32)
    x = (x / np.maximum(1.0, np.linalg.norm(x, axis=1, keepdims=True) / R)).astype(np.float32)
    n, d = x.shape
    cfg = OP.OutputPerturbationConfig(loss=loss, fit_intercept=fit_intercept, iters=8)  # Newton: converged
    hp = OP.OutputPerturbationHparams(noise_multiplier=z, reg=reg, radius=R)

    def run(data):
        xx, yy, _ = data
        out = OP.fit(jax.random.key(6), (xx, yy), hp, cfg)
        sane(math.isclose(float(out.diagnostics["std"]), z * float(out.diagnostics["sensitivity"]), rel_tol=1e-6),
             "std = z Delta")
        return OP.spend(cfg, xx.shape[0], hp)

    def multiplier(rel, spend):
        sane(spend.relation == "replace_one", spend.relation)
        return z  # the analytic Gaussian's multiplier (spend: epsilon at z; no DpEvent)

    labels = (-1.0, 1.0) if loss == "squared" else (0, 1)
    recs = adversarial_records(d, 2, labels, norm=R * (1 - 1e-6))  # the public domain's edge
    return run, (x, y, s), neighbours(x, y, s, "replace_one", recs), multiplier


case("output_perturbation[logistic]", "replace_one")(lambda: _output_perturbation_case())
case("output_perturbation[squared, no intercept]", "replace_one")(
    lambda: _output_perturbation_case("squared", False))


# --- paper 003 stratified means ------------------------------------------------------------------
def _means_case(method: str, relation: str | None = None, counts: str = "auto", **cfg_kw):
    """``relation=None``: the config's default (replacement within a stratum, sizes public)."""
    from dpfair_jax.algorithms import mean_estimation as ME

    k = 2
    x, _, s = base_data(n=8, d=2, groups=k)
    n, d = x.shape
    if relation is not None:
        cfg_kw["relation"] = relation
    cfg = ME.MeanConfig(method=method, num_groups=k, counts=counts, **cfg_kw)
    hp = ME.MeanHparams(rho=0.4, epsilon=0.9, center=0.0, radius=3.0, clip=1.5, R=1.0, gamma=0.1)

    def run(data):
        xx, _, ss = data
        ME.fit(jax.random.key(8), (xx, ss), hp, cfg)
        sizes = np.bincount(ss, minlength=k)
        return ME.spend(cfg, sizes, hp)

    pure = method == "laplace" and relation is None and not cfg.noisy_counts
    nb = "within_group" if relation is None else relation
    recs = adversarial_records(d, k, (0,))
    return run, (x, np.zeros(n, np.float32), s), neighbours(x, np.zeros(n, np.float32), s, nb, recs), \
        ("pure" if pure else "zcdp")


for _m in ("laplace", "gaussian", "coinpress"):
    case(f"mean_estimation[{_m}, within group]", "within_group")(lambda m=_m: _means_case(m))
    case(f"mean_estimation[{_m}, add_remove]", "add_remove")(lambda m=_m: _means_case(m, "add_remove"))
case("mean_estimation[coinpress, 4 steps]", "within_group")(
    lambda: _means_case("coinpress", split=(0.1, 0.2, 0.3, 0.4)))
case("mean_estimation[coinpress, cumulative clip]", "within_group")(
    lambda: _means_case("coinpress", clip_mode="cumulative"))
case("mean_estimation[gaussian, noisy counts]", "within_group")(
    lambda: _means_case("gaussian", counts="noisy"))


# --- paper 002 reductions (exponential sampling, private CGOO) -----------------------------------
def _reductions_case(algorithm: int, variant: str = "corrected", objective: str = "sum"):
    from dpfair_jax.algorithms import reductions as R
    from dpfair_jax.algorithms.reductions import interface as RI

    K, M, n = 2, 5, 8
    rng = np.random.default_rng(3)
    ell = rng.uniform(0.2, 0.8, size=(M, n)).astype(np.float32)  # per-example losses of each candidate
    s = (np.arange(n) % K).astype(np.int32)
    f = R.sum_objective(K) if objective == "sum" else R.max_objective(temperature=0.1)
    problem = R.CGOO(f, R.bounded_group_loss(np.full(K, 0.3)), K)
    if algorithm == 1:
        cfg, hp = R.SamplingConfig(problem, variant=variant), R.SamplingHparams(G=2.0, epsilon=1.5)
    else:
        cfg = R.PrivateCGOOConfig(problem, steps=3, variant=variant)
        hp = R.PrivateCGOOHparams(G=2.0, oracle_epsilon=0.8, laplace_scale=0.3)

    def run(data):
        ll, _, ss = data
        R.fit(jax.random.key(9), R.GridData(R.group_losses(jnp.asarray(ll), ss, K), n), hp, cfg)
        return R.spend(cfg, n, hp)

    def multiplier(rel, spend):
        sane(spend.relation == "replace_one", spend.relation)
        if rel.kind == "l1":  # the loss release: Laplace at the budget's weight epsilon
            w_eps = RI._algorithm2_budget(cfg, n, hp).weight_epsilon
            sane(math.isclose(float(rel.scale) * w_eps, 2.0 / n, rel_tol=1e-6) or
                 math.isclose(float(rel.scale) * w_eps, K / n, rel_tol=1e-6), f"l1 {float(rel.scale) * w_eps}")
            return 1.0 / w_eps
        if algorithm == 1:  # the draw's spend over the epsilon it ran at
            return spend.epsilon / float(rel.scale)
        return 1.0

    # per-example losses at both ends of [0, 1], in every group, for every candidate
    base_l = ell.T  # [n, M]: neighbours() replaces a row
    recs = [(np.zeros(M, np.float32), 0, 0), (np.ones(M, np.float32), 0, 1),
            ((np.arange(M) % 2).astype(np.float32), 0, 1)]

    def as_data(rows):
        return (np.asarray(rows[0]).T, rows[1], rows[2])

    nbrs = [(lab, as_data(d)) for lab, d in neighbours(base_l, np.zeros(n, np.float32), s, "replace_one", recs)]
    return run, as_data((base_l, np.zeros(n, np.float32), s)), nbrs, multiplier


case("reductions[exponential sampling]", "replace_one")(lambda: _reductions_case(1))
case("reductions[exponential sampling, max objective]", "replace_one")(lambda: _reductions_case(1, objective="max"))
case("reductions[exponential sampling, paper sensitivity]", "replace_one")(lambda: _reductions_case(1, "paper"))
case("reductions[private cgoo]", "replace_one")(lambda: _reductions_case(2))


# --- paper 000 budget tailoring -------------------------------------------------------------------
def _budget_tailoring_adapter(mp, rec: P.Recorder) -> None:
    """Budget tailoring draws a run's standard normals at once and each release scales its slice
    (``core._run_draws``): the draws become zeros, and the two release functions are wrapped to
    record their pre-noise values with the stds they scale the draws by (stage 1: the upper
    triangle of ``X^T X``, ``X^T y``, the clipped residual sums; stage 2: each step's ``M1``,
    ``M2``) and, in world B, to hand on world A's releases."""
    from dpfair_jax.algorithms.budget_tailoring import core, stage1, stage2

    P._patch_everywhere(mp, core._run_draws, lambda key, steps, p, k, dtype: jnp.zeros(
        (core.num_draws(steps, p, k),), dtype))
    s1 = stage1._stage1_release

    def stage1_release(z_all, xs, y, onehot, xnorm, tau, hp, cfg, table=None):
        out = s1(jnp.zeros_like(z_all), xs, y, onehot, xnorm, tau, hp, cfg, table)
        std_xx, std_xy, std_res = stage1.stage1_noise_stds(tau, onehot.shape[1], hp, cfg)
        iu = np.triu_indices(xs.shape[0])
        parts = [(np.asarray(out.xtx)[iu], std_xx), (np.asarray(out.xty), std_xy),
                 (np.asarray(out.residual_sums), std_res)]
        res = None
        for i, (val, std) in enumerate(parts):
            val = np.asarray(val, np.float64)
            r = rec.emit(P.Release("stage1", f"budget_tailoring.stage1[{i}]", val.ravel(),
                                   np.asarray(std, np.float64), "l2", shape=val.shape), out)
            res = r if i == 0 else res
        return res

    s2 = stage2._release

    def release(theta, xs, y, onehot, xnorm, rel, zg, zl, hp, cfg, pre=None, table=None):
        m1, m2, clipped = s2(theta, xs, y, onehot, xnorm, rel, jnp.zeros_like(zg), jnp.zeros_like(zl), hp,
                             cfg, pre, table)
        v1 = np.asarray(m1, np.float64)
        o1 = rec.emit(P.Release("stage2", "budget_tailoring.stage2.M1", v1.ravel(),
                                np.broadcast_to(np.asarray(rel.gstd, np.float64), v1.shape), "l2",
                                shape=v1.shape), m1)
        o2 = m2
        if cfg.fairness:
            v2 = np.asarray(m2, np.float64)
            o2 = rec.emit(P.Release("stage2", "budget_tailoring.stage2.M2", v2.ravel(),
                                    np.broadcast_to(np.asarray(rel.lstd, np.float64), v2.shape), "l2",
                                    shape=v2.shape), m2)
        return o1, o2, clipped

    mp.setattr(stage1, "_stage1_release", stage1_release)
    mp.setattr(stage2, "_release", release)


def _budget_tailoring_case(**cfg_kw):
    """The config's default relation: replacement within a group (sizes public)."""
    from dpfair_jax.algorithms import budget_tailoring as BT

    K = 2
    x, y, s = base_data(n=8, d=2, groups=K, regression=True)
    cfg = BT.Config(steps=2, **cfg_kw)
    hp = BT.Hyperparams(rho=0.8, clip=0.7)

    def run(data):
        xx, yy, ss = data
        return BT.fit(jax.random.key(4), make_dataset(xx, yy, ss, num_groups=K, num_classes=0), hp, cfg).spend

    recs = adversarial_records(2, K, (-1e3, 1e3))
    return run, (x, y, s), neighbours(x, y, s, "within_group", recs), "zcdp"


P.ADAPTERS.append(_budget_tailoring_adapter)
case("budget_tailoring[default]", "within_group")(lambda: _budget_tailoring_case())
case("budget_tailoring[fairness]", "within_group")(lambda: _budget_tailoring_case(fairness=True))
case("budget_tailoring[stage1_clip=paper]", "within_group")(lambda: _budget_tailoring_case(stage1_clip="paper"))


# --- paper 003 marginal synthesis ------------------------------------------------------------------
def _synthesis_adapter(mp, rec: P.Recorder) -> None:
    """The synthesizer draws a symmetric unit matrix per stratum under ``vmap`` and scales it by
    ``marginal_sigma`` (``_fit_tables``), and the stratum counts scale a host copy of a unit draw:
    the draws become zeros; each stratum's Gram upper triangle (recovered from the returned
    tables, whose masked entries are structurally zero for one-hot rows) is recorded with
    ``marginal_sigma(d, rho)``, the counts with ``1 / sqrt(2 count_rho)``; world B gets A's."""
    from dpfair_jax.algorithms import synthesis as SY

    mp.setattr(SY.marginals, "symmetric_gaussian_noise", lambda key, dim, std, dtype=jnp.float32: jnp.zeros((dim, dim), dtype))
    fit_tables = SY.marginals._fit_tables

    def fit_jit(key, codes, s, mask, rho, num_groups, V, domains):
        t = fit_tables(key, codes, s, mask, rho, num_groups, V, domains)
        d = len(domains)
        gram = np.asarray(t, np.float64).transpose(0, 1, 3, 2, 4).reshape(num_groups, d * V, d * V)
        iu = np.triu_indices(d * V)
        sigma = float(SY.marginals.marginal_sigma(d, rho))  # where the fit looks it up (and a plant patches it)
        out = t
        for g in range(num_groups):
            val = gram[g][iu]
            r = rec.emit(P.Release("marginals", f"synthesis.marginals[{g}]", val, np.asarray(sigma), "l2",
                                   shape=val.shape), t)
            out = r if g == 0 else out
        return out

    counts = SY.stratum_counts

    def stratum_counts(s, num_groups, *, key=None, count_rho=None):
        c = counts(s, num_groups)
        if count_rho is None:
            return c
        return rec.emit(P.Release("counts", "synthesis.stratum_counts", np.asarray(c, np.float64),
                                  np.asarray(1.0 / math.sqrt(2.0 * count_rho)), "l2", shape=np.shape(c)), c)

    mp.setattr(SY.marginals, "_fit_jit", fit_jit)
    mp.setattr(SY, "stratum_counts", stratum_counts)  # the trio's counts
    mp.setattr(SY.marginals, "stratum_counts", stratum_counts)  # stratum_proportions' counts


P.ADAPTERS.append(_synthesis_adapter)


def _synthesis_case(**cfg_kw):
    from dpfair_jax.algorithms import synthesis as SY

    K, domains = 2, (3, 2, 2)
    n = 8
    rng = np.random.default_rng(4)
    codes = np.stack([rng.integers(0, m, n) for m in domains], 1).astype(np.int32)
    s = (np.arange(n) % K).astype(np.int32)
    cfg = SY.SynthesisConfig(domains=domains, num_groups=K, **cfg_kw)
    hp = SY.SynthesisHparams(rho=0.7)

    def run(data):
        cc, _, ss = data
        SY.fit(jax.random.key(11), (cc, ss), hp, cfg)
        return SY.spend(cfg, cc.shape[0], hp)

    # every record type: each category at its ends, in every stratum
    recs = [(np.zeros(len(domains), np.int32), 0, g) for g in range(K)] + \
        [(np.asarray([m - 1 for m in domains], np.int32), 0, g) for g in range(K)]
    return run, (codes, np.zeros(n, np.float32), s), \
        neighbours(codes, np.zeros(n, np.float32), s, "add_remove", recs), "zcdp"


case("synthesis[tree, noisy counts]", "add_remove")(lambda: _synthesis_case())
case("synthesis[independent, no counts]", "add_remove")(lambda: _synthesis_case(mode="independent", counts="none"))


# --- paper 004's EO baseline: Jagielski et al.'s DP post-processing --------------------------------
def _jagielski_case(privacy_unit: str = "sensitive_attribute", K: int = 3):
    """The Laplace confusion histogram against the pure-DP spend. Sensitive-attribute unit: row 0's
    ``s`` changed to every other group (a move between two cells); example unit: every
    ``(s, yhat, y)`` record added."""
    from dpfair_jax.algorithms import jagielski as JA

    n = 12
    rng = np.random.default_rng(5)
    yhat, y = rng.integers(0, 2, n).astype(np.int32), rng.integers(0, 2, n).astype(np.int32)
    s = (np.arange(n) % K).astype(np.int32)
    cfg = JA.JagielskiConfig(num_groups=K, privacy_unit=privacy_unit)
    hp = JA.JagielskiHparams(noise_multiplier=0.8, gamma=0.05)

    def run(data):
        res = JA.fit(jax.random.key(12), data, hp, cfg)
        sane(res.spend.relation == JA.UNITS[privacy_unit], res.spend.relation)
        return res.spend

    if privacy_unit == "sensitive_attribute":
        nbrs = neighbours(yhat, y, s, "attribute", [(None, None, None)])  # the record is unused
        assert len(nbrs) == K - 1
    else:
        nbrs = [(f"add(s={g},yhat={h},y={v})", (np.append(yhat, np.int32(h)), np.append(y, np.int32(v)),
                                                np.append(s, np.int32(g))))
                for g in range(K) for h in (0, 1) for v in (0, 1)]
    return run, (yhat, y, s), nbrs, "pure"


case("jagielski[sensitive_attribute]", "attribute")(lambda: _jagielski_case())
case("jagielski[example]", "add_remove")(lambda: _jagielski_case("example"))


# --- paper 004's EO baseline: Jagielski et al.'s DP-oracle-learner (in-processing) --------------------
def _jagielski_in_case(privacy_unit: str = "sensitive_attribute", K: int = 3, relation: str = "replace_one"):
    """The group-label counts, each round's exponential-mechanism scores and the Laplace rate
    differences, against the epsilon each is drawn at (the denominators are world A's released
    counts in both worlds). Sensitive-attribute unit: row 0's ``s`` changed to every other group
    (row 0 is in the anchor group); example unit: row 0 replaced by records at the class's ends
    (``relation="add_remove"``: those records added; the count's L1 sensitivity is then 1)."""
    from dpfair_jax.algorithms import jagielski_in as JI

    n, M = 9, 4
    rng = np.random.default_rng(6)
    preds = rng.integers(0, 2, (M, n)).astype(np.float32)
    preds[:, 0] = 1.0  # every classifier predicts 1 on row 0: its move attains the sensitivity
    # row 0 (anchor group, label 0) is alone in its cell, whose block has the largest sensitivity
    y = np.array([0, 0, 0, 1, 0, 1, 1, 1, 1], np.int32)
    s = (np.arange(n) % K).astype(np.int32)
    cfg = JI.JagielskiInConfig(num_groups=K, steps=3, privacy_unit=privacy_unit, relation=relation)
    # a large Auditor step concentrates the multipliers, so the scores move by a good part of B
    hp = JI.JagielskiInHparams(B=20.0, eta=50.0, gamma=0.05, count_epsilon=0.5, oracle_epsilon=0.7,
                               auditor_epsilon=0.9)

    def run(data):
        xx, yy, ss = data
        res = JI.fit(jax.random.key(13), JI.OracleData(np.asarray(xx).T, yy, ss), hp, cfg)
        sane(res.spend.relation == relation and res.spend.unit == privacy_unit, str(res.spend))
        return res.spend

    def multiplier(rel, spend):
        if rel.kind == "linf":
            return 1.0
        if rel.value.size == 2 * K:  # the group-label counts: L1 sensitivity 2 (replace-one), 1 (add/remove)
            sane(math.isclose(float(rel.scale) * hp.count_epsilon, 2.0 if relation == "replace_one" else 1.0,
                              rel_tol=1e-6), "counts")
            return 1.0 / hp.count_epsilon
        return 1.0 / hp.auditor_epsilon

    base = (preds.T.copy(), y, s)
    if privacy_unit == "sensitive_attribute":
        nbrs = neighbours(*base, "attribute", [(None, None, None)])
    else:
        recs = [(np.ones(M, np.float32), v, g) for g in range(K) for v in (0, 1)] + \
            [(np.zeros(M, np.float32), 1, K - 1)]
        nbrs = neighbours(*base, relation, recs)
    return run, base, nbrs, multiplier


case("jagielski_in[sensitive_attribute]", "attribute")(lambda: _jagielski_in_case())
case("jagielski_in[example]", "replace_one")(lambda: _jagielski_in_case("example"))
case("jagielski_in[example, add_remove]", "add_remove")(lambda: _jagielski_in_case("example", relation="add_remove"))


# ------------------------------------------------------------------------------------------------
# the probe
# ------------------------------------------------------------------------------------------------
def run_case(c: Case, monkeypatch) -> list[P.Check]:
    run, base, nbrs, multiplier = c.build()
    return probe(monkeypatch, run, base, nbrs, multiplier)


# The default suite runs these (every algorithm, both relations, the units, public parts,
# penalties, COINPRESS steps, the exponential mechanism and its oracle, a documented violation);
# the other options run with -m slow (each case costs a few seconds of eager execution).
DEFAULT = {
    "dpsgd[poisson]", "dpsgd[fixed_size]", "mitigation[gamma=(1,1)]", "mitigation[penalty_clip_norm]",
    "sgda[shuffle]", "fermi[poisson]", "fermi[sensitive_attribute]", "fermi[official_batch clip]",
    "pfld[fixed_size]", "pfld_epoch[dp]", "output_perturbation[logistic]",
    "mean_estimation[coinpress, within group]", "mean_estimation[laplace, add_remove]",
    "reductions[exponential sampling]", "reductions[private cgoo]", "budget_tailoring[default]",
    "synthesis[tree, noisy counts]", "jagielski[sensitive_attribute]",
    "jagielski_in[sensitive_attribute]",
}


def test_every_algorithm_has_a_probe_case_in_the_default_suite():
    """Each algorithm of ``dpfair_jax.algorithms.ALGORITHMS`` has a case named after it, and at
    least one of them runs in the default suite."""
    from dpfair_jax import algorithms

    names = {c.name.split("[")[0] for c in CASES}
    assert set(algorithms.ALGORITHMS) <= names, set(algorithms.ALGORITHMS) - names
    assert set(algorithms.ALGORITHMS) <= {n.split("[")[0] for n in DEFAULT}
    assert DEFAULT <= {c.name for c in CASES}


@pytest.mark.parametrize("c", [c if c.name in DEFAULT else pytest.param(c, marks=pytest.mark.slow)
                               for c in CASES], ids=[c.name for c in CASES])
def test_releases_move_at_most_their_sensitivity(c, monkeypatch):
    checks = run_case(c, monkeypatch)
    if c.violates:
        assert any(not ch.ok for ch in checks), f"{c.name} is documented as not private; the probe missed it"
    else:
        assert_within(checks)


# ------------------------------------------------------------------------------------------------
# the probe can fail: planted bugs
# ------------------------------------------------------------------------------------------------
def _mutated(module: Any, name: str, old: str, new: str) -> Any:
    """``module.name`` recompiled from the module's source with ``old`` replaced by ``new``."""
    src = inspect.getsource(module)
    assert src.count(old) == 1, f"mutation site not found in {module.__name__}: {old!r}"
    ns = dict(vars(module))
    exec(compile(src.replace(old, new), module.__file__, "exec"), ns)
    return ns[name]


def _plant_unclipped_penalty(mp) -> None:
    """The mitigation's penalty gradient added after clipping (the issue's example)."""
    from dpfair_jax.algorithms import mitigation as M
    from dpfair_jax.algorithms.mitigation import program as MP

    mp.setattr(M, "_program", _mutated(
        MP, "program", "    return _clip.weighted_sum(aug, cf)\n",
        "    pen = jax.tree_util.tree_map(lambda a, b: combine(jnp.zeros_like(a), a, b), pg1, pg2)\n"
        "    cf = _clip.clip_factors(norms, run.clip_norm) * mask\n"
        "    return jax.tree_util.tree_map(jnp.add, _clip.weighted_sum(grads, cf), "
        "_clip.weighted_sum(pen, mask))\n"))


def _plant_doubled_clip(mp) -> None:
    """Every clip norm doubled before clipping (the noise still scaled to the stated one)."""
    from dpfair_jax.privacy import clipping

    cf, cgs = clipping.clip_factors, clipping.clipped_grad_sum
    P._patch_everywhere(mp, cf, lambda norms, clip_norm, *a, **k: cf(norms, 2.0 * clip_norm, *a, **k))
    P._patch_everywhere(mp, cgs, lambda *a, clip_norm, **k: cgs(*a, clip_norm=2.0 * clip_norm, **k))


def _plant_add_remove_factor(mp) -> None:
    """Replace-one releases accounted with the add/remove factor (1 instead of 2)."""
    from dpfair_jax.privacy import relations

    P._patch_everywhere(mp, relations.replace_factor, lambda relation: 1.0)


def _plant_half_marginal_noise(mp) -> None:
    """The synthesizer's marginal noise at half the std its zCDP charge assumes."""
    from dpfair_jax.algorithms import synthesis as SY

    ms = SY.marginal_sigma
    mp.setattr(SY.marginals, "marginal_sigma", lambda d, rho: 0.5 * ms(d, rho))



def _plant_jagielski_half_scale(mp) -> None:
    """The confusion histogram's Laplace scale halved (epsilon 2 / noise_multiplier drawn)."""
    from dpfair_jax.algorithms import jagielski as JA

    mp.setattr(JA, "noisy_confusion", _mutated(
        JA, "noisy_confusion", "eps = jnp.where(nm > 0, 1.0 / ", "eps = jnp.where(nm > 0, 2.0 / "))


def _plant_jagielski_add_remove(mp) -> None:
    """The sensitive-attribute histogram noised for add/remove (L1 sensitivity 1 instead of 2)."""
    from dpfair_jax.algorithms import jagielski as JA

    mp.setattr(JA, "noisy_confusion", _mutated(
        JA, "noisy_confusion", "relation = UNITS[privacy_unit]", 'relation = "add_remove"'))

def _plant_oracle_anchor_weight(mp) -> None:
    """The DP-oracle-learner's rate differences with the anchor group weighed once, not K-1 times."""
    from dpfair_jax.privacy import oracle_learner as OL

    mp.setattr(OL, "cell_weights", _mutated(OL, "cell_weights", "(k - 1) / m[..., :1, :]", "1.0 / m[..., :1, :]"))


def _plant_oracle_score_without_bound(mp) -> None:
    """The DP-oracle-learner's score sensitivity without the multiplier bound B."""
    from dpfair_jax.privacy import oracle_learner as OL

    mp.setattr(OL, "score_sensitivity", _mutated(
        OL, "score_sensitivity", "jnp.asarray(bound, jnp.float32) * rate_difference_linf_sensitivity",
        "rate_difference_linf_sensitivity"))


PLANTED = [
    ("unclipped mitigation penalty", _plant_unclipped_penalty, "mitigation[gamma=(1,1)]"),
    ("unclipped mitigation penalty, gamma2 only", _plant_unclipped_penalty, "mitigation[gamma=(0,2)]"),
    ("clip norm doubled before clipping", _plant_doubled_clip, "dpsgd[poisson]"),
    ("clip norm doubled before clipping (mitigation)", _plant_doubled_clip, "mitigation[gamma=(0.5,0)]"),
    ("replace-one noised for add/remove", _plant_add_remove_factor, "dpsgd[fixed_size]"),
    ("replace-one noised for add/remove (Laplace mean)", _plant_add_remove_factor,
     "mean_estimation[laplace, within group]"),
    ("marginal noise halved", _plant_half_marginal_noise, "synthesis[independent, no counts]"),
    ("Laplace scale halved (Jagielski)", _plant_jagielski_half_scale, "jagielski[sensitive_attribute]"),
    ("Laplace scale halved (Jagielski, example unit)", _plant_jagielski_half_scale, "jagielski[example]"),
    ("s-move noised for add/remove (Jagielski)", _plant_jagielski_add_remove, "jagielski[sensitive_attribute]"),
    ("anchor group weighed once (DP-oracle-learner)", _plant_oracle_anchor_weight,
     "jagielski_in[sensitive_attribute]"),
    ("score sensitivity without B (DP-oracle-learner)", _plant_oracle_score_without_bound,
     "jagielski_in[sensitive_attribute]"),
]


@pytest.mark.parametrize("what,plant,name", PLANTED, ids=[p[0] for p in PLANTED])
def test_probe_catches_planted_bugs(what, plant, name, monkeypatch):
    c = next(c for c in CASES if c.name == name)  # unplanted, it passes (the test above)
    monkeypatch.setitem(SANITY, "on", False)  # the comparison alone must flag the bug
    with monkeypatch.context() as mp:
        plant(mp)
        checks = run_case(c, mp)
    bad = [ch for ch in checks if not ch.ok]
    assert bad, f"the probe missed a planted bug ({what}): max moved {max(ch.moved for ch in checks):.4g}"
