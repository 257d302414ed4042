"""Every algorithm's spend against what its fit/train actually runs.

Each row of ``CASES`` runs one public entry point on a tiny problem (its default configuration,
or one of the non-default sampling/relation/unit options it supports) and extracts from the
running code the facts its privacy claim depends on:

* the sampling it draws (which sampler is called, with which rate and padded width), read by
  spies on the samplers at trace time, and the number of steps it takes (diagnostics' length);
* the noise it adds, either read from the values the fit computes (``privacy.minmax_noise.clipped_sum_std``) or
  measured: the data are zeros, so every clipped gradient (or centred sum) is exactly 0 and the
  parameters / estimates move by the noise alone; thousands of coordinates give its std to ~1%;
* which private statistics are released (noisy histograms, noisy counts, group statistics) and
  with which multiplier; whether public parts of the update make batch membership visible.

It then compares them with the returned ``PrivacySpend`` (its ``DpEvent`` walked field by field,
``relation``, ``unit``, ``delta``'s truncation charge, ``rho`` / ledger), with the sensitivities
written out here independently: a clipped sum has sensitivity ``C`` under add/remove and ``2C``
under replace-one, so the accounted multiplier must equal ``noise std / sensitivity(relation)``.
A change that desynchronizes a fit from its spend (a padding rule, a sampling scheme, a relation
label, an uncharged statistic) fails its row with the mismatch named.

Statistical checks use fixed keys and tolerances of 5 standard errors of the estimated std.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import dp_event as E

from dpfair_jax import models
from dpfair_jax.data.dataset import make_dataset
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import sampling as S
from _sgd_keywords import dpsgd_fit_kw, dpsgd_spend_kw, mitigation_fit_kw, mitigation_spend_kw

DELTA = 1e-5
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------------
# rows, comparisons
# ------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
    """One check: ``fit`` is read from the run, ``spend`` from what the spend states (for the few
    rows about the run alone, e.g. "sizes are noisy", ``fit`` is what the spend's relation
    requires and ``spend`` what the run did). ``op`` is ``"=="`` (exact), ``"~"`` (relative
    tolerance ``rtol``, absolute ``atol``) or ``"<="`` (``fit`` at most ``spend``, within ``rtol``)."""

    what: str
    fit: Any
    spend: Any
    op: str = "=="
    rtol: float = 1e-9
    atol: float = 0.0

    def ok(self) -> bool:
        if self.op == "==":
            return self.fit == self.spend
        f, s = float(self.fit), float(self.spend)
        if self.op == "~":
            return math.isclose(f, s, rel_tol=self.rtol, abs_tol=self.atol)
        if self.op == "<=":
            return f <= s * (1.0 + self.rtol) + 1e-300
        raise AssertionError(self.op)

    def line(self) -> str:
        tol = f" (rtol {self.rtol:.3g})" if self.op != "==" else ""
        mark = "ok  " if self.ok() else "FAIL"
        return f"{mark} {self.what}: fit {self.fit!r} {self.op} spend {self.spend!r}{tol}"


def _privacy(cfg, n, zt, zw, delta):
    """fermi's spend at these multipliers and delta (the trio's spend with the delta in the config)."""
    from dpfair_jax.algorithms import fermi as F

    return F.spend(dataclasses.replace(cfg, delta=delta), n, F.FermiHparams(noise_theta=zt, noise_w=zw))


def _std_rtol(m: int) -> float:
    """5 standard errors of a std estimated from ``m`` i.i.d. normal draws."""
    return 5.0 / math.sqrt(2.0 * (m - 1))


def _charge(sens: float, var: float) -> float:
    """rho of a Gaussian release of sensitivity ``sens`` with noise variance ``var`` (inf if 0)."""
    return sens**2 / (2.0 * var) if var > 0 else math.inf


def _sens_factor(relation: str) -> float:
    """L2 sensitivity of a sum of vectors clipped to norm 1: 1 (add/remove), 2 (replace-one, within a
    group too: one vector replaced by another)."""
    return {"add_remove": 1.0, "replace_one": 2.0, "replace_one_within_group": 2.0}[relation]


def _hist_sens(relation: str) -> float:
    """L2 sensitivity of a histogram / count vector: 1 (add/remove), sqrt 2 (one record moves); the
    kit noises counts for sqrt 2 within a group too (where they do not change: an upper bound)."""
    return {"add_remove": 1.0, "replace_one": math.sqrt(2.0), "replace_one_within_group": math.sqrt(2.0)}[relation]


class Spy:
    """Wraps ``module.name``; records each call's arguments (and result) at call/trace time."""

    def __init__(self, monkeypatch, module, name: str, keep_result: bool = False):
        self.calls: list[tuple[tuple, dict, Any]] = []
        orig = getattr(module, name)

        @functools.wraps(orig)
        def wrapper(*args, **kwargs):
            out = orig(*args, **kwargs)
            self.calls.append((args, kwargs, out if keep_result else None))
            return out

        monkeypatch.setattr(module, name, wrapper)

    @property
    def called(self) -> bool:
        return bool(self.calls)


# ------------------------------------------------------------------------------------------------
# DpEvent walker
# ------------------------------------------------------------------------------------------------
def _components(ev: Any, count: int = 1) -> list[dict]:
    """Flatten an event into ``{count, sampling, z}`` components: ``sampling`` is ``None``
    (the record is in every one of the ``count`` releases), ``("poisson", q)`` or
    ``("wor", n, b)``; ``z`` lists the Gaussian multipliers released together per occurrence."""
    if isinstance(ev, E.GaussianDpEvent):
        return [{"count": count, "sampling": None, "z": [float(ev.noise_multiplier)]}]
    if isinstance(ev, E.SelfComposedDpEvent):
        return _components(ev.event, count * int(ev.count))
    if isinstance(ev, E.ComposedDpEvent):
        return [c for e in ev.events for c in _components(e, count)]
    if isinstance(ev, (E.PoissonSampledDpEvent, E.SampledWithoutReplacementDpEvent)):
        inner = _components(ev.event, 1)
        assert all(c["sampling"] is None and c["count"] == 1 for c in inner), ev
        if isinstance(ev, E.PoissonSampledDpEvent):
            smp = ("poisson", float(ev.sampling_probability))
        else:
            smp = ("wor", int(ev.source_dataset_size), int(ev.sample_size))
        return [{"count": count, "sampling": smp, "z": [z for c in inner for z in c["z"]]}]
    if isinstance(ev, E.ZCDpEvent):
        return [{"count": count, "sampling": "zcdp", "z": [], "rho": float(ev.rho)}]
    raise AssertionError(f"unexpected DpEvent in a spend: {ev!r}")


def _sampled(ev) -> list[dict]:
    return [c for c in _components(ev) if c["sampling"] not in (None, "zcdp")]


def _unsampled(ev) -> list[dict]:
    return [c for c in _components(ev) if c["sampling"] is None]


def _mu2(z: list[float]) -> float:
    """Squared shift/std of Gaussians of multipliers ``z`` released together."""
    return sum(1.0 / zz**2 for zz in z)


def _event_rows(spend, *, scheme: str, q: float | None, n: int, b: int, steps: int,
                z_fit: list[float], rtol_z: float, extra_z: float | None) -> list[Row]:
    """Rows comparing a spend's event with the sampling and noise a fit used.

    ``scheme``: the sampler the fit ran ("poisson", "fixed_size", "shuffle"); ``z_fit`` the
    per-step multipliers derived from the fit's noise over the sensitivity under the spend's
    relation; ``extra_z`` the multiplier of a one-off release (noisy histogram) or None.
    """
    rows: list[Row] = []
    ev = spend.event
    rows.append(Row("spend records a DpEvent", True, ev is not None))
    if ev is None:
        return rows
    smp = _sampled(ev)
    uns = _unsampled(ev)
    if scheme in ("poisson", "fixed_size"):
        rows.append(Row("one subsampled step event", 1, len(smp)))
        if len(smp) != 1:
            return rows
        c = smp[0]
        if scheme == "poisson":
            rows.append(Row("sampling (fit: Poisson sampler)", "poisson", c["sampling"][0]))
            rows.append(Row("Poisson rate q", q, c["sampling"][1], "~", 1e-12))
        else:
            rows.append(Row("sampling (fit: fixed-size sampler)", ("wor", n, b), c["sampling"]))
        rows.append(Row("steps", steps, c["count"]))
        rows.append(Row("Gaussians per step", len(z_fit), len(c["z"])))
        for i, (zf, ze) in enumerate(zip(sorted(z_fit), sorted(c["z"]))):
            rows.append(Row(f"per-step multiplier {i} (noise std / sensitivity under relation)",
                            zf, ze, "~", rtol_z))
        rest = uns
    else:  # shuffled epochs: no amplification, each record in ceil(T / spe) steps
        rows.append(Row("no amplification claimed for shuffling (no sampled event)", 0, len(smp)))
        k = math.ceil(steps / (n // b))
        per_step = [c for c in uns if c["count"] == k and (extra_z is None or k > 1)]
        mu2 = sum(c["count"] * _mu2(c["z"]) for c in per_step)
        rows.append(Row("participations x per-step mu^2 (shuffle)", k * _mu2(z_fit), mu2, "~",
                        2 * rtol_z))
        rest = [c for c in uns if c not in per_step]
    if extra_z is None:
        rows.append(Row("one-off releases in the event (none in fit)", 0, len(rest)))
    else:
        got = [c for c in rest if c["count"] == 1]
        rows.append(Row("one-off release (noisy histogram) in the event", 1, len(got)))
        if got:
            rows.append(Row("histogram multiplier", extra_z, got[0]["z"][0], "~", 1e-6))
    return rows


def _truncation_row(spend, *, n: int, q: float, B: int, steps: int) -> Row:
    """The truncation charge at the width the fit padded to is taken out of DELTA: the spend states
    ``(epsilon, DELTA)`` and the mechanism's epsilon at ``DELTA - charge(epsilon)`` is at most epsilon."""
    extra = S.truncation_delta(n, q, B, steps, spend.epsilon) if B < n else 0.0
    if extra >= DELTA:  # the charge alone exceeds delta: added to it
        return Row(f"truncation charge at the fit's padded width B={B}, added to delta", extra,
                   spend.delta - DELTA, "~", 1e-6, atol=4 * np.spacing(DELTA))
    eps_mech = (A.epsilon_of_event(spend.event, DELTA - extra, accountant=spend.accountant)
                if spend.event is not None and spend.accountant in ("rdp", "pld") else spend.epsilon)
    return Row(f"truncation charge at the fit's padded width B={B}, inside delta", (True, DELTA),
               (bool(eps_mech <= spend.epsilon * (1 + 1e-9)), spend.delta))


# ------------------------------------------------------------------------------------------------
# DP-SGD
# ------------------------------------------------------------------------------------------------
def _zeros_glm_data(n: int, d: int):
    """``x = 0``: with a bias-free GLM every per-example gradient is exactly 0."""
    x = np.zeros((n, d), np.float32)
    y = (np.arange(n) % 2).astype(np.int32)
    s = (np.arange(n) % 4).astype(np.int32)
    return x, y, s


def _case_dpsgd(monkeypatch, *, sampling: str = "poisson", max_batch_size: int | None = None,
                d: int = 3001, epochs: int | None = None, steps: int | None = 12) -> list[Row]:
    from dpfair_jax.algorithms import dpsgd

    n, b, C, z, lr = 240, 24, 2.0, 1.3, 0.5
    if epochs is not None:
        steps = None
    sp = {"poisson": Spy(monkeypatch, S, "poisson_sample"),
          "fixed_size": Spy(monkeypatch, S, "fixed_size_batch"),
          "shuffle": Spy(monkeypatch, S, "shuffled_batches")}
    x, y, _ = _zeros_glm_data(n, d)
    model = models.logistic(fit_intercept=False, input_dim=d)
    params = model.init(jax.random.key(0))
    p_T, diag = dpsgd_fit_kw(jax.random.key(1), model, params, (x, y), clip_norm=C, noise_multiplier=z,
                            learning_rate=lr, batch_size=b, steps=steps, epochs=epochs,
                            sampling=sampling, max_batch_size=max_batch_size)
    spend = dpsgd_spend_kw(z, n=n, batch_size=b, delta=DELTA, steps=steps, epochs=epochs,
                          sampling=sampling, max_batch_size=max_batch_size)
    T = int(diag["batch_size"].shape[0])
    called = sorted(k for k, s in sp.items() if s.called)
    rows = [Row("sampler the fit traced", [sampling], called)]
    if called != [sampling]:
        return rows
    args = sp[sampling].calls[0][0]
    # noise: w_T = -lr / b * sum_t noise_t, each N(0, (z C)^2) per coordinate
    w = np.asarray(p_T["w"], np.float64).ravel()
    std = float(np.std(w)) * b / (lr * math.sqrt(T))
    z_fit = std / (_sens_factor(spend.relation) * C)
    rows += [Row("unit", "example", spend.unit),
             Row("relation of the sampling (Poisson: add/remove; batches: replace-one)",
                 "add_remove" if sampling == "poisson" else "replace_one", spend.relation)]
    if sampling == "poisson":
        n_fit, q_fit, B = int(args[1]), float(args[2]), int(args[3])
        rows += _event_rows(spend, scheme="poisson", q=q_fit, n=n_fit, b=b, steps=T, z_fit=[z_fit],
                            rtol_z=_std_rtol(w.size), extra_z=None)
        rows.append(_truncation_row(spend, n=n_fit, q=q_fit, B=B, steps=T))
        rows.append(Row("largest realized batch <= padded width", int(np.max(diag["batch_size"])), B, "<="))
        m = re.search(r"max_batch_size=(\d+)", spend.notes)
        rows.append(Row("padded width named in the notes", B, int(m.group(1)) if m else None))
    elif sampling == "fixed_size":
        rows += _event_rows(spend, scheme="fixed_size", q=None, n=int(args[1]), b=int(args[2]),
                            steps=T, z_fit=[z_fit], rtol_z=_std_rtol(w.size), extra_z=None)
    else:
        n_fit, b_fit = int(args[1]), int(args[2])
        rows += _event_rows(spend, scheme="shuffle", q=None, n=n_fit, b=b_fit, steps=T, z_fit=[z_fit],
                            rtol_z=_std_rtol(w.size), extra_z=None)
        k = math.ceil(T / (n_fit // b_fit))
        z_ev = _event_z_nominal(spend)
        part = A.participation_distribution(T, "shuffle", steps_per_epoch=n_fit // b_fit)
        eps = A.membership_visible_epsilon(1.0 / z_ev, DELTA, part) if z_ev else math.inf
        rows.append(Row(f"epsilon of {k} composed Gaussians (exact)", eps, spend.epsilon, "~", 1e-6))
    if epochs is not None:
        rows.append(Row("steps = epochs x (n // batch_size)", epochs * (n // b), T))
    return rows


def _event_z_nominal(spend) -> float | None:
    """The per-step effective multiplier the spend's event composes (unsampled steps)."""
    if spend.event is None:
        return None
    cs = [c for c in _unsampled(spend.event) if c["count"] > 1] or _unsampled(spend.event)
    return _mu2(cs[0]["z"]) ** -0.5 if cs else None


# ------------------------------------------------------------------------------------------------
# DP-FERMI, PF-LD (and DP-SGDA underneath)
# ------------------------------------------------------------------------------------------------
def _fermi_data(n: int = 60, d: int = 3):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.int32)
    s = (np.arange(n) % 2).astype(np.int32)
    return make_dataset(x, y, s, num_groups=2, num_classes=2)


def _case_fermi(monkeypatch, *, pfld: bool = False, **overrides) -> list[Row]:
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.algorithms import pfld as P
    from dpfair_jax.algorithms import sgda
    from dpfair_jax.privacy import clipping, mechanisms

    data = _fermi_data()
    n = data.n
    kw = dict(model=models.logistic(input_dim=3), num_groups=2, steps=4, batch_size=12)
    kw.update(overrides)
    config = P.config(**kw) if pfld else F.FermiConfig(**kw)
    hp = F.FermiHparams(lam=0.6, clip_theta=1.3, clip_w=0.7, noise_theta=1.5, noise_w=2.5)
    p_s = None
    if config.group_frequencies == "public":
        p_s = np.array([0.5, 0.5], np.float32)
    sp_run = Spy(monkeypatch, sgda, "dpsgda")
    # the noise stds and clip norms the run computes, read at run time (debug callbacks, indexed
    # by trace order: theta's update first, then w's)
    stds_clips: dict[int, tuple[float, float]] = {}
    traced: list[int] = []
    noise_std = sgda.steps._mm.clipped_sum_std

    def noise_std_spy(z, clip, factor):
        out = noise_std(z, clip, factor)
        i = len(traced)
        traced.append(i)
        jax.debug.callback(lambda o, c: stds_clips.__setitem__(i, (float(o), float(c))), out,
                           jnp.asarray(clip, jnp.float32))
        return out

    monkeypatch.setattr(sgda.steps._mm, "clipped_sum_std", noise_std_spy)
    sp_pois = Spy(monkeypatch, S, "poisson_sample")
    sp_clip = Spy(monkeypatch, clipping, "clipped_grad_sum")
    sp_hist = Spy(monkeypatch, mechanisms, "noisy_histogram")
    fit = P.fit if pfld else F.fit
    # traced afresh inside a new jit (the key is traced), so the spies see this run's program
    res = jax.jit(lambda k: fit(k, data, hp, config, p_s=p_s))(jax.random.key(3))
    jax.effects_barrier()
    spend = _privacy(config, n, hp.noise_theta, hp.noise_w, DELTA)

    (args, kwargs, _), = sp_run.calls
    scfg = args[5]
    T, m, scheme = scfg.steps, scfg.batch_size, scfg.sampling
    stds = [stds_clips[i][0] for i in sorted(stds_clips)]
    clips = [stds_clips[i][1] for i in sorted(stds_clips)]
    rows = [Row("two noisy updates (theta, W)", 2, len(stds))]
    unit_fit = "sensitive_attribute" if kwargs.get("public_loss") is not None else "example"
    rows.append(Row("unit (a public task loss => only s is protected)", unit_fit, spend.unit))
    if unit_fit == "sensitive_attribute":
        rows.append(Row("relation of substituting s_i", "replace_one", spend.relation))
    else:
        rows.append(Row("relation of the sampling", "add_remove" if scheme == "poisson" else "replace_one",
                        spend.relation))
    fr = _sens_factor(spend.relation)
    z_fit = [stds[0] / (fr * clips[0]), stds[1] / (fr * clips[1])]
    # clipped widths: every batch of per-example gradients the fit clips and sums (its weights)
    widths = sorted({int(np.shape(kw["weights"])[0]) for (_, kw, _) in sp_clip.calls})
    if scheme == "poisson":
        (pa, _, _), = sp_pois.calls[:1]
        n_fit, q_fit, B = int(pa[1]), float(pa[2]), int(pa[3])
        rows.append(Row("clipped batch width = padded width", [B], widths))
        rows.append(_truncation_row(spend, n=n_fit, q=q_fit, B=B, steps=T))
        m_note = re.search(r"Poisson padding (\d+) rows", spend.notes)
        rows.append(Row("padded width named in the notes", B, int(m_note.group(1)) if m_note else None))
    else:
        rows.append(Row("no Poisson sampler for a batch scheme", False, sp_pois.called))
        rows.append(Row("clipped batch width = batch size", [m], widths))
        rows.append(Row("no truncation charge", DELTA, spend.delta, "~", 1e-12))
        n_fit, q_fit = n, m / n
    # the noisy group-frequency histogram
    z_hist = None
    if sp_hist.calls:
        (ha, hk, _), = sp_hist.calls
        rows.append(Row("histogram relation = spend relation", spend.relation, hk["relation"]))
        hstd = float(hk["noise_multiplier"]) * _hist_sens(hk["relation"])
        z_hist = hstd / _hist_sens(spend.relation)
        rows.append(Row("histogram cells = labels x groups", config.num_classes * config.num_groups,
                        int(ha[2])))
    rows.append(Row("histogram released iff frequencies are noisy", config.group_frequencies == "noisy",
                    sp_hist.called))
    rows.append(Row("notes say whether the frequencies are charged",
                    "charged" if z_hist is not None else "not charged",
                    "not charged" if "not charged" in spend.notes else
                    ("charged" if "charged" in spend.notes else None)))
    exact = unit_fit == "sensitive_attribute" or scheme == "shuffle"
    if exact:  # membership visible (or shuffled): exact mixture of Gaussians
        if scheme == "shuffle":
            part = A.participation_distribution(T, "shuffle", steps_per_epoch=n // m)
        else:
            part = A.participation_distribution(T, "poisson" if scheme == "poisson" else "fixed_size",
                                                sample_rate=q_fit)
        mu_step = math.sqrt(_mu2(z_fit))
        eps = A.membership_visible_epsilon(mu_step, DELTA, part,
                                           extra_mu=0.0 if z_hist is None else 1.0 / z_hist)
        rows.append(Row("epsilon of the fit's releases (exact mixture)", eps, spend.epsilon, "~", 1e-6))
        if scheme == "shuffle":
            rows += _event_rows(spend, scheme="shuffle", q=None, n=n, b=m, steps=T, z_fit=z_fit,
                                rtol_z=1e-6, extra_z=z_hist)
    else:
        rows += _event_rows(spend, scheme=scheme, q=q_fit, n=n_fit, b=m, steps=T, z_fit=z_fit,
                            rtol_z=1e-6, extra_z=z_hist)
    rows.append(Row("fit reports its truncated steps", True, "truncated_steps" in res.diagnostics))
    return rows


# ------------------------------------------------------------------------------------------------
# paper 001 mitigation (DP-SGD with privately estimated group statistics)
# ------------------------------------------------------------------------------------------------
def _case_mitigation(monkeypatch, *, gammas: tuple[float, float] = (1.0, 1.0), d: int = 601) -> list[Row]:
    """``x = 0``: gradients, gradient norms and the penalty gradients are 0, so ``w`` moves by the
    update noise only, each group's statistics are ``(count, 0, count)`` (uncertainty 1/2 =
    its maximum for one logit) and the released sums minus these are the statistics' noise."""
    from dpfair_jax.algorithms import mitigation as M

    n, b, epochs, C, z, zs, lr = 160, 16, 3, 2.0, 1.1, 3.0, 0.5
    x, y, _ = _zeros_glm_data(n, d)
    data = make_dataset(x, y, np.arange(n) % 16, num_groups=16, num_classes=2)
    model = models.logistic(fit_intercept=False, input_dim=d)
    params = model.init(jax.random.key(0))
    sp = Spy(monkeypatch, S, "poisson_sample")
    g1, g2 = gammas
    kw = dict(gamma1=g1, gamma2=g2, clip_norm=C, noise_multiplier=z, learning_rate=lr, batch_size=b,
              epochs=epochs)
    p_T, diag = mitigation_fit_kw(jax.random.key(2), model, params, data, stats_noise_multiplier=zs, **kw)
    given = {} if gammas == (1.0, 1.0) else {"gamma1": g1, "gamma2": g2}  # default: not stated
    spend = mitigation_spend_kw(z, zs, n=n, batch_size=b, delta=DELTA, epochs=epochs, **given)
    T = int(diag["loss"].shape[0])
    rows = [Row("sampler the fit traced", True, sp.called)]
    if not sp.called:
        return rows
    (pa, _, _) = sp.calls[0]
    n_fit, q_fit, B = int(pa[1]), float(pa[2]), int(pa[3])
    rows += [Row("unit", "example", spend.unit), Row("relation (Poisson)", "add_remove", spend.relation),
             Row("steps = epochs x (n // batch_size)", epochs * (n // b), T)]
    w = np.asarray(p_T["w"], np.float64).ravel()
    z_grad = float(np.std(w)) * b / (lr * math.sqrt(T)) / (_sens_factor(spend.relation) * C)
    sums = np.asarray(diag["private_group_sums"], np.float64)  # [T, K, 3]
    noise = np.concatenate([sums[:, :, 1].ravel(), (sums[:, :, 0] - sums[:, :, 2]).ravel() / math.sqrt(2)])
    # each group's contribution (1, clipped norm / C, uncertainty / max) lies in [0, 1]^3
    z_stats = float(np.sqrt(np.mean(noise**2))) / (_sens_factor(spend.relation) * math.sqrt(3.0))
    if g1 == 0 and g2 == 0:
        z_fit = [z_grad]
        p_other, _ = mitigation_fit_kw(jax.random.key(2), model, params, data, stats_noise_multiplier=0.1 * zs, **kw)
        rows.append(Row("parameters do not depend on the uncharged statistics", True,
                        bool(np.array_equal(np.asarray(p_other["w"]), np.asarray(p_T["w"])))))
    else:
        z_fit = [z_grad, z_stats]
    rows += _event_rows(spend, scheme="poisson", q=q_fit, n=n_fit, b=b, steps=T, z_fit=z_fit,
                        rtol_z=_std_rtol(min(w.size, noise.size)), extra_z=None)
    rows.append(_truncation_row(spend, n=n_fit, q=q_fit, B=B, steps=T))
    m = re.search(r"max_batch_size=(\d+)", spend.notes)
    rows.append(Row("padded width named in the notes", B, int(m.group(1)) if m else None))
    return rows


# ------------------------------------------------------------------------------------------------
# paper 000 budget tailoring (zCDP ledger)
# ------------------------------------------------------------------------------------------------
def _case_budget_tailoring(monkeypatch, count_noise: bool = False, **cfg_kw) -> list[Row]:
    """The run's diagnostics state every release's noise and charge; each is re-derived here from
    the noise std and the sensitivity under the spend's relation (clipped vector sums: ``Delta``
    or ``2 Delta``; ``X^T X`` upper triangle: ``U^2`` or ``sqrt 2 U^2``; sums of values in
    ``[0, B]``: ``B``; counts: 1), and the whole must add up to the spend's rho."""
    from dpfair_jax.algorithms import budget_tailoring as BT

    K, n_k, T = 3, 40, 5
    rng = np.random.default_rng(1)
    x = rng.normal(size=(K * n_k, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + rng.normal(size=K * n_k)).astype(np.float32)
    s = np.repeat(np.arange(K), n_k).astype(np.int32)
    data = make_dataset(x, y, s, num_groups=K, num_classes=0)
    cfg = BT.Config(steps=T, **cfg_kw)
    hp = BT.Hyperparams(rho=0.8, clip=0.7)  # Delta < 1: stage1_clip="paper" must pay for Delta
    res = BT.fit(jax.random.key(4), data, hp, cfg)
    theta, diag, spend = res.params, res.diagnostics, res.spend
    rel = spend.relation
    rows = [Row("fit's spend = spend()", BT.spend(cfg, [n_k] * K, hp), spend),
            Row("relation", cfg.relation, rel), Row("unit", "example", spend.unit),
            Row("spend rho = the run's budget", float(hp.rho), spend.rho, "~", 1e-12)]
    counts = np.asarray(diag["counts"], np.float64)
    exact = np.full(K, float(n_k))
    rho_c = float(diag["rho_counts"])
    if rel != "add_remove":  # exact sizes: covered only by replacement within a group
        rows.append(Row("public sizes: relation within a group", "replace_one_within_group", rel))
        rows.append(Row("denominators: the public sizes", exact.tolist(), counts.tolist()))
        rows.append(Row("nothing charged for public sizes", 0.0, rho_c))
    else:
        rows.append(Row("denominators: noisy counts (differ from the exact sizes)", True,
                        bool(np.all(counts != exact))))
        rows.append(Row("count charge = count_fraction x rho", hp.count_fraction * hp.rho, rho_c, "~", 1e-6))
    if count_noise:
        # the count noise over many runs (vmap over keys of the same program): std 1 / sqrt(2 rho_c)
        keys = jax.random.split(jax.random.key(5), 400)
        one = lambda k: BT.fit_arrays(k, data.x, data.y, data.s, K, hp, cfg)[1].counts  # noqa: E731 (lower-level fit_arrays: Diagnostics)
        many = jax.jit(jax.vmap(one))(keys)
        dev = (np.asarray(many, np.float64) - exact).ravel()
        rho_c_fit = _charge(_hist_sens(rel), float(np.mean(dev**2)))
        rows.append(Row("count charge from the counts' noise (sensitivity 1)", rho_c_fit, rho_c, "~",
                        2 * _std_rtol(dev.size)))
    # stage 2: per group, T releases of the clipped gradient sum (and, with fairness, the loss sum)
    std = np.asarray(diag["noise_std"], np.float64)
    dl = float(hp.clip)
    per_release = T * (_sens_factor(rel) * dl) ** 2 / (2.0 * std**2)
    if cfg.method == "pooled":
        rho2_fit = float(per_release[0])  # one pooled sum (std repeated per group)
    else:
        rho2_fit = float(np.sum(per_release))
    if cfg.fairness:  # the clipped loss sums (values in [0, Delta^2]) released alongside
        se = np.asarray(diag["se"], np.float64)
        mu = float(diag["rho_stage2"]) / float(np.sum(se**2))
        g_std, l_std = (np.asarray(v, np.float64) for v in BT.group_noise_stds(
            se, mu, T, dl, fairness=True, relation=rel))
        rows.append(Row("fit's gradient stds vs group_noise_stds (max rel. diff.)",
                        float(np.max(np.abs(std / g_std - 1.0))), 1e-5, "<=", 0.0))
        rho2_fit += float(np.sum(T * dl**4 / (2.0 * l_std**2)))
    rows.append(Row("stage-2 charge from its noise stds", rho2_fit, float(diag["rho_stage2"]), "~", 1e-5))
    rho1 = float(diag["rho_stage1"])
    if cfg.method == "dpse":
        sxx, sxy, sres = (float(v) for v in BT.stage1_noise_stds(rho1, K, hp, cfg))
        ux, uy, dl = float(hp.stats_bound_x), float(hp.stats_bound_y), float(hp.clip)
        gram = {"add_remove": 1.0, "replace_one_within_group": math.sqrt(2.0)}[rel] * ux**2
        bound = dl**2 if cfg.stage1_clip == "delta_sq" else dl  # residuals in [0, bound]
        rho1_fit = gram**2 / (2 * sxx**2) + (_sens_factor(rel) * ux * uy) ** 2 / (2 * sxy**2) \
            + K * bound**2 / (2 * sres**2)
        rows.append(Row("stage-1 charge from its noise stds (at most the ledger's)", rho1_fit, rho1, "<=",
                        1e-5))
    else:
        rows.append(Row("no stage 1", 0.0, rho1))
    se2 = float(np.sum(np.asarray(diag["se"], np.float64) ** 2))
    rows.append(Row("allocation sums to 1", 1.0, se2, "~", 1e-5))
    rows.append(Row("charges add up to the spend's rho", rho_c + rho1 + float(diag["rho_stage2"]), spend.rho,
                    "~", 1e-5))
    led = BT.budget_ledger(hp.rho, np.asarray(diag["se"]), config=cfg, tau_fraction=hp.tau_fraction,
                           count_fraction=hp.count_fraction)
    items = led.charges
    for name, got in (("counts", rho_c), ("stage1", rho1), ("stage2", float(diag["rho_stage2"]))):
        total = float(sum(np.sum(v) for k_, v in items.items() if k_.split("/")[0] == name))
        rows.append(Row(f"budget_ledger item {name!r} = the run's charge", got, total, "~", 1e-5, atol=1e-12))
    eps = A.zcdp_to_dp(spend.rho, DELTA, method="bun_steinke")
    rows.append(Row("epsilon of rho at delta (Bun-Steinke)", eps, spend.epsilon, "~", 1e-9))
    return rows


# ------------------------------------------------------------------------------------------------
# paper 003 means (zCDP / pure DP, parallel over strata)
# ------------------------------------------------------------------------------------------------
def _means_spend(ME, method, K, relation, count_rho, budget, *, split=(0.25, 0.75), **hp):
    """``ME.spend`` of the estimator run with ``count_rho`` (None: the relation's default count
    budget): ``count_rho`` is ``config.count_fraction`` x the estimator's own ``budget``."""
    counts = "auto" if count_rho is None else "noisy"
    fraction = ME.DEFAULT_COUNT_FRACTION if count_rho is None else count_rho / budget
    cfg = ME.MeanConfig(method=method, num_groups=K, relation=relation, counts=counts,
                        count_fraction=fraction, split=split, delta=DELTA)
    return ME.spend(cfg, (1,) * K, ME.MeanHparams(**hp))


def _case_means(monkeypatch, *, estimator: str, relation: str = "replace_one_within_group",
                count_rho=None) -> list[Row]:
    """Data at the prior centre (0): every centred clipped sum is exactly 0, so each group's
    estimate is its noise over its denominator. With many groups and dimensions the noise std per
    group is measured and compared with the std the spend implies under its relation."""
    from dpfair_jax.algorithms import mean_estimation as ME

    noisy = relation != "replace_one_within_group" or count_rho is not None  # exact sizes only within a group
    K, per, d = (600 if noisy else 100), 30, 16  # noisy counts stay far above 1 (their noise is measured)
    n = K * per
    x = np.zeros((n, d), np.float32)
    s = np.repeat(np.arange(K), per).astype(np.int32)
    key = jax.random.key(6)
    kw = dict(relation=relation, count_rho=count_rho)
    f = _sens_factor(relation)
    rows = []
    if estimator == "coinpress":
        # the default two-step split for the sizes and the ledger; one step of the same budget for
        # the noise (at the centre the second step's clipped sum cancels the first step's noise)
        rhos = (0.125, 0.375)
        spend_default = _means_spend(ME, "coinpress", K, relation, count_rho, sum(rhos), rho=sum(rhos))
        out_default = ME.stratified_coinpress(key, x, s, K, rhos=rhos, **kw)
        budget = sum(rhos)
        out = ME.stratified_coinpress(key, x, s, K, rhos=(budget,), **kw)
        spend = _means_spend(ME, "coinpress", K, relation, count_rho, budget, split=(1.0,), rho=budget)
        rows.append(Row("two-step ledger = one-step ledger (same budget)", spend.rho, spend_default.rho,
                        "~", 1e-12))
        rows.append(Row("sizes of the default run = those of the one-step run", True,
                        bool(np.array_equal(np.asarray(out.sizes), np.asarray(out_default.sizes)))))
    elif estimator == "gaussian":
        rho, C = 0.3, 1.7
        out = ME.stratified_gaussian_mean(key, x, s, K, center=0.0, clip=C, rho=rho, **kw)
        spend = _means_spend(ME, "gaussian", K, relation, count_rho, rho, rho=rho)
        budget = rho
    else:
        eps, R, gamma = 0.9, 1.0, 0.1
        out = ME.stratified_laplace_mean(key, x, s, K, R=R, gamma=gamma, epsilon=eps, **kw)
        spend = _means_spend(ME, "laplace", K, relation, count_rho, 0.5 * eps**2, epsilon=eps)
        budget = 0.5 * eps**2
    rows += [Row("relation", relation, spend.relation), Row("unit", "example", spend.unit)]
    sizes = np.asarray(out.sizes, np.float64)
    present = np.asarray(out.present)
    c_fit = None
    if not noisy:
        rows.append(Row("sizes: the exact (public) group sizes", True, bool(np.all(sizes == per))))
    else:
        rows.append(Row("sizes: noisy counts (differ from the exact sizes)", True,
                        bool(np.all(sizes[present] != per))))
        dev = sizes - per  # every noisy count is far above 1 here (none reported as 0)
        c_fit = _charge(_hist_sens(relation), float(np.mean(dev**2)))
    den = np.maximum(sizes, 1.0)
    est = np.asarray(out.group_means, np.float64)
    m = present
    if estimator == "laplace":
        hw = np.asarray(out.radius, np.float64)  # clip half-width per group
        b_fit = np.mean(np.abs(est[m]) * den[m, None] / (d * hw[m, None]))  # scale / (d hw)
        eps_fit = f / b_fit  # L1 sensitivity d f hw over the scale d hw / eps
        mean_charge = 0.5 * eps_fit**2
        rtol = 5.0 / math.sqrt(est[m].size)  # |Laplace| has sd = mean
        if not noisy:
            rows.append(Row("pure epsilon from the Laplace scale and L1 sensitivity", eps_fit, spend.epsilon,
                            "~", rtol))
            rows.append(Row("pure DP: delta 0", 0.0, spend.delta))
    else:
        if estimator == "gaussian":
            pred = np.full(K, (f * C) ** 2 / (2.0 * budget))  # sigma^2 = (f C)^2 / (2 rho)
        else:  # one step from the prior ball B(0, 3): clip radius C_1, noise f C_1 / sqrt(2 rho)
            C1 = float(ME.coinpress_clip_radius(3.0, ME.gaussian_tailbound(d)))
            pred = np.full(K, f**2 * C1**2 / (2.0 * budget))
        z = est[m] * den[m, None] / np.sqrt(pred[m, None])
        ratio = float(np.mean(z**2))  # 1 if the noise is the spend's
        mean_charge = budget / ratio
        rtol = 2 * _std_rtol(z.size)
    rows.append(Row("means' charge from their noise (sensitivity under the relation)", mean_charge, budget,
                    "~", rtol))
    ledger_counts = None
    if spend.rho is not None and spend.accountant == "zcdp":
        ledger_counts = spend.rho - budget
    if noisy:
        rows.append(Row("count charge from the counts' noise", c_fit, ledger_counts, "~", 2 * _std_rtol(K)))
        default = count_rho if count_rho is not None else ME.DEFAULT_COUNT_FRACTION * budget
        rows.append(Row("count charge = the count budget the run used", default, ledger_counts, "~", 1e-6))
        rows.append(Row("notes: sizes noised", True, "noisy counts" in spend.notes))
        eps = A.zcdp_to_dp(budget + default, DELTA)
        rows.append(Row("epsilon of the total rho (CKS)", eps, spend.epsilon, "~", 1e-9))
    elif spend.accountant == "zcdp":
        rows.append(Row("no count charge", 0.0, ledger_counts, "~", 0.0, atol=1e-12))
        rows.append(Row("notes: sizes public", True, "public" in spend.notes))
    return rows


# ------------------------------------------------------------------------------------------------
# paper 001 output perturbation
# ------------------------------------------------------------------------------------------------
def _case_output_perturbation(monkeypatch, *, radius: float | None = 2.0) -> list[Row]:
    """Replace-one sensitivity of the regularized minimizer, ``2 L / (n reg)`` with ``L`` the
    Lipschitz constant over rows of norm <= radius (intercept: ``sqrt(R^2 + 1)``); the noise
    actually added (``theta - theta*`` over many coordinates) against the analytic Gaussian the
    spend states. Without a public radius the bound would come from the private rows: refused."""
    from dpfair_jax.algorithms import output_perturbation as OP

    n, d, reg, eps = 60, 200, 0.5, 2.0
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, d))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.5, 1.5, size=(n, 1))).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.int32)
    cfg = OP.OutputPerturbationConfig(delta=DELTA)
    if radius is None:
        try:
            res = OP.fit(jax.random.key(7), (x, y), OP.OutputPerturbationHparams(reg=reg, radius=None), cfg)
        except ValueError:
            return [Row("no public radius: refused (a data-derived bound is not private)", True, True)]
        return [Row("no public radius: refused, or the bound's cost stated in the spend", True,
                    "radius" in res.spend.notes.lower())]
    hp = OP.calibrate(cfg, n, (eps, DELTA), hparams=OP.OutputPerturbationHparams(reg=reg, radius=radius))
    res = OP.fit(jax.random.key(7), (x, y), hp, cfg)
    spend = res.spend
    sens, std = float(res.diagnostics["sensitivity"]), float(res.diagnostics["std"])
    rows = [Row("relation of the sensitivity 2L/(n reg)", "replace_one", spend.relation),
            Row("unit", "example", spend.unit),
            Row("spend = spend(config, n, calibrate(target))", OP.spend(cfg, n, hp), spend),
            Row("spend within the target", True, spend.epsilon <= eps and spend.delta == DELTA)]
    L = math.sqrt(radius**2 + 1.0)
    rows.append(Row("sensitivity used (float32 diagnostic)", 2 * L / (n * reg), sens, "~", 1e-6))
    noise = np.asarray(res.params, np.float64) - np.asarray(res.diagnostics["theta_star"], np.float64)
    rows.append(Row("noise std added", float(np.std(noise)), std, "~", _std_rtol(noise.size)))
    dlt = A.analytic_gaussian_delta(std, spend.epsilon, sens)
    rows.append(Row("delta of the Gaussian at that std and sensitivity (Balle-Wang)", dlt, spend.delta,
                    "~", 1e-6))
    return rows


# ------------------------------------------------------------------------------------------------
# paper 002 reductions
# ------------------------------------------------------------------------------------------------
def _cgoo_problem(K: int):
    from dpfair_jax.algorithms import reductions as R

    return R.CGOO(f=R.sum_objective(K), g=R.bounded_group_loss(np.full(K, 0.3)), num_groups=K)


def _case_exponential_sampling(monkeypatch) -> list[Row]:
    """Algorithm 1 is pure epsilon-DP under replace-one: replacing one record moves every
    candidate's itemized loss vector by a vector in ``[-1/n, 1/n]^K``. The log-probability
    ratio of the sampled index over the worst such pairs found must stay <= epsilon."""
    from dpfair_jax.algorithms import reductions as R

    K, M, n, eps, G = 3, 40, 50, 1.0, 2.0
    rng = np.random.default_rng(3)
    L = rng.uniform(0.1, 0.6, size=(M, K)).astype(np.float32)
    prob = _cgoo_problem(K)
    p0 = np.log(np.asarray(R.exponential_sampling_probs(L, prob, G=G, epsilon=eps, n=n), np.float64))
    worst = 0.0
    for t in range(200):
        sign = rng.choice([-1.0, 1.0], size=(M, 1)) * (rng.random((M, K)) < 0.9)
        L1 = np.clip(L + sign / n, 0.0, 1.0).astype(np.float32)
        p1 = np.log(np.asarray(R.exponential_sampling_probs(L1, prob, G=G, epsilon=eps, n=n), np.float64))
        worst = max(worst, float(np.max(np.abs(p1 - p0))))
    idx = R.exponential_sampling(jax.random.key(8), L, prob, G=G, epsilon=eps, n=n)
    return [Row("max log-probability ratio over neighbours <= epsilon", worst, eps, "<=", 1e-5),
            Row("the sampled index is a candidate", True, 0 <= int(idx) < M),
            Row("the bound is nearly attained (the check has power)", True, worst > 0.3 * eps)]


def _case_private_cgoo(monkeypatch) -> list[Row]:
    """Algorithm 2: per round a Laplace release of the loss vector (l1 sensitivity K/n) and an
    exponential-mechanism oracle; the ledger composes ``steps`` rounds of ``eps_o + eps_w``."""
    from dpfair_jax.algorithms import reductions as R
    from dpfair_jax.algorithms.reductions import theory as PF

    K, M, n, T, eps = 3, 30, 200, 300, 4.0
    rng = np.random.default_rng(4)
    L = rng.uniform(0.1, 0.6, size=(M, K)).astype(np.float32)
    budget = R.algorithm2_budget(eps, DELTA, T, n=n, num_groups=K)
    res = R.private_cgoo(jax.random.key(9), L, _cgoo_problem(K), G=2.0, steps=T,
                         oracle_epsilon=budget.oracle_epsilon, laplace_scale=budget.laplace_scale, n=n)
    ledger = R.algorithm2_ledger(budget)
    idx = np.asarray(res.indices)
    prev = np.concatenate([[0], idx[:-1]])  # round t releases the loss of the previous decision
    noise = np.asarray(res.released, np.float64) - L[prev].astype(np.float64)
    b = float(np.mean(np.abs(noise)))
    w_eps_fit = (K / n) / b  # l1 sensitivity of an itemized loss vector in [0, 1]^K: K / n
    rows = [Row("rounds run", budget.steps, int(idx.shape[0])),
            Row("weight release epsilon from its Laplace noise", w_eps_fit, budget.weight_epsilon, "~",
                5.0 / math.sqrt(noise.size))]
    eps_round = budget.oracle_epsilon + budget.weight_epsilon
    total, dtot = PF.advanced_composition(eps_round, budget.oracle_delta, T, budget.delta_bar)
    rows.append(Row("ledger epsilon = advanced composition of the rounds run", total, ledger["epsilon"], "~",
                    1e-12))
    rows.append(Row("ledger delta", dtot, ledger["delta"], "~", 1e-12))
    rows.append(Row("ledger within the target epsilon", ledger["epsilon"], eps, "<=", 1e-9))
    no_w = R.algorithm2_ledger(R.algorithm2_budget(eps, DELTA, T, n=n, num_groups=K, privatize_weights=False))
    rows.append(Row("unprivatized weights: no finite epsilon", math.inf, no_w["epsilon"]))
    return rows


def _case_dp_gd_oracle(monkeypatch) -> list[Row]:
    """The DP-GD LOPT oracle: ``steps`` full-batch Gaussian releases of the clipped gradient sum
    (replace-one sensitivity 2C), divided by the public n. ``x = 0``: the update is noise only."""
    from dpfair_jax.algorithms import reductions as R

    n, d, T, C, lr, eps = 80, 1500, 6, 1.5, 0.3, 2.0
    std = R.dp_gd_noise_std(eps, DELTA, T, C)
    x = np.zeros((n, d), np.float32)
    y = np.ones(n, np.float32)
    s = (np.arange(n) % 2).astype(np.int32)
    p = R.dp_weighted_least_squares(jax.random.key(10), x, y, s, np.array([1.0, 0.5], np.float32),
                                    num_groups=2, noise_std=std, steps=T, clip_norm=C, learning_rate=lr,
                                    radius=1e6, fit_intercept=False)
    w = np.asarray(p.w, np.float64)
    std_fit = float(np.std(w)) * n / (lr * math.sqrt(T))
    rho_fit = T * (2.0 * C) ** 2 / (2.0 * std_fit**2)
    rows = [Row("zCDP of T releases at the measured std, sensitivity 2C (replace-one)", rho_fit,
                A.dp_to_rho(eps, DELTA), "~", 2 * _std_rtol(w.size))]
    try:
        R.dp_gd_noise_std(eps, DELTA, T, C, relation="add_remove")
        refused = False
    except ValueError:
        refused = True
    rows.append(Row("add/remove refused (the oracle divides by the private n)", True, refused))
    return rows


# ------------------------------------------------------------------------------------------------
# paper 003 synthesis
# ------------------------------------------------------------------------------------------------
def _synthesizer_noise_rows(rho_fit: float) -> list[Row]:
    """The marginal synthesizer's noise at ``rho_fit``: many strata with large cell counts (no
    clamping at 0); its charge from the noise at the Gram sensitivity of one row (computed here
    from the one-hot row) must be ``rho_fit``."""
    from dpfair_jax.algorithms import synthesis as SY

    d, V, k = 3, 2, 60
    codes = np.array([[a, b, c] for a in range(V) for b in range(V) for c in range(V)] * 50, np.int32)
    codes = np.tile(codes, (k, 1))
    sid = np.repeat(np.arange(k), codes.shape[0] // k).astype(np.int32)
    model = SY.fit_marginal_synthesizer(jax.random.key(11), codes, [V] * d, rho_fit, s=sid, num_groups=k)
    one_hot = np.zeros((codes.shape[0], d * V))
    one_hot[np.arange(codes.shape[0])[:, None], np.arange(d) * V + codes] = 1.0
    exact = np.einsum("nk,na,nb->kab", np.eye(k)[sid], one_hot, one_hot)
    t = np.asarray(model.tables, np.float64).transpose(0, 1, 3, 2, 4).reshape(k, d * V, d * V)
    iu = np.triu_indices(d * V)
    valid = np.array([(a // V != b // V) or (a == b) for a, b in zip(*iu)])  # one-way on the diagonal
    noise = (t - exact)[:, iu[0], iu[1]][:, valid].ravel()
    row = one_hot[:1].T @ one_hot[:1]
    sens = float(np.sqrt(np.sum(np.triu(row) ** 2)))  # one row's upper-triangle Gram entries
    rho_noise = sens**2 / (2.0 * float(np.mean(noise**2)))
    return [Row("synthesizer's charge from its noise (one row's Gram sensitivity)", rho_noise, rho_fit,
                "~", 2 * _std_rtol(noise.size))]


def _case_synthesizer(monkeypatch) -> list[Row]:
    """The study's split (``study_spend``): ``(1 - COUNT_FRACTION) rho`` to the synthesizer,
    ``COUNT_FRACTION rho`` to the noisy stratum counts; the synthesizer's and the counts' noise
    measured against those charges (the study itself: the slow row below)."""
    from dpfair_jax.algorithms import synthesis as SY
    from dpfair_jax.studies.synthesis import study_spend

    eps = 3.0
    spend = study_spend(eps, 1e-9)
    rho_fit, rho_c = (1 - SY.COUNT_FRACTION) * spend.rho, SY.COUNT_FRACTION * spend.rho
    rows = [Row("relation of the Gram and count sensitivities", "add_remove", spend.relation),
            Row("epsilon of the spend's rho (CKS)", A.zcdp_to_dp(spend.rho, 1e-9), spend.epsilon, "~", 1e-6)]
    rows += _synthesizer_noise_rows(rho_fit)
    k = 2000
    s = np.repeat(np.arange(k), 50).astype(np.int32)
    props = SY.stratum_proportions(s, k, key=jax.random.key(14), count_rho=rho_c)
    counts = SY.stratum_counts(s, k, key=jax.random.key(14), count_rho=rho_c)
    dev = counts - 50.0  # far above 0: no clamping
    rows.append(Row("count charge from the counts' noise (sensitivity 1)",
                    _charge(1.0, float(np.mean(dev**2))), rho_c, "~", 2 * _std_rtol(k)))
    rows.append(Row("proportions = the noisy counts normalised", True,
                    bool(np.allclose(props, counts / counts.sum()))))
    return rows


def _case_synthesis_study(monkeypatch) -> list[Row]:
    """One run of the synthesis study (stratified by sex): the rho handed to the marginal
    synthesizer plus the rho of the noisy stratum counts must be the spend's rho, and the number
    of synthetic rows must come from those counts. Sampling is stubbed (post-processing)."""
    import pandas as pd

    from dpfair_jax.studies import synthesis as SY

    rng = np.random.default_rng(5)
    m = 240
    table = pd.DataFrame({"sex": rng.integers(0, 2, m), "race": rng.integers(0, 2, m),
                          "a": rng.integers(0, 3, m), "income": rng.integers(0, 2, m)})
    sp_fit = Spy(monkeypatch, SY, "fit_marginal_synthesizer")
    sp_cnt = Spy(monkeypatch, SY, "stratum_counts", keep_result=True)
    n_rows_sampled = []

    def sample(key, model, n_rows, proportions=None):  # post-processing: not what is checked here
        n_rows_sampled.append(n_rows)
        codes = np.tile((np.arange(n_rows) % 2)[:, None], (1, len(model.domains))).astype(np.int32)
        return codes, np.zeros(n_rows, np.int32)

    monkeypatch.setattr(SY, "sample_marginal_synthesizer", sample)
    eps = 3.0
    SY.synthesis_study(table, epsilons=[eps], variants=["sex"], trees=2, delta=1e-9,
                       domains={"sex": 2, "race": 2, "a": 3, "income": 2})
    spend = SY.study_spend(eps, 1e-9)
    rows = [Row("one synthesizer fit and one noisy count release", (1, 1),
                (len(sp_fit.calls), len(sp_cnt.calls)))]
    (fa, _, _), (_, ck, counts) = sp_fit.calls[0], sp_cnt.calls[0]
    rho_fit, rho_c = float(fa[3]), float(ck["count_rho"])
    rows.append(Row("synthesizer rho + count rho = spend rho", rho_fit + rho_c, spend.rho, "~", 1e-9))
    rows.append(Row("synthesizer rho = (1 - COUNT_FRACTION) x spend rho", (1 - SY.COUNT_FRACTION) * spend.rho,
                    rho_fit, "~", 1e-9))
    rows.append(Row("number of synthetic rows = the charged noisy counts' total",
                    max(int(round(float(np.sum(counts)))), 1), n_rows_sampled[0]))
    return rows


# ------------------------------------------------------------------------------------------------
# privacy.aggregation (the optax aggregators' stated mechanisms)
# ------------------------------------------------------------------------------------------------
def _case_aggregation(monkeypatch) -> list[Row]:
    """``dp_aggregate``: Gaussian of multiplier z on a sum of sensitivity C (add/remove), divided by
    a public denominator. ``group_weighted_dp_aggregate``: group k's rows are a Gaussian of
    multiplier sigma_k with public weights and denominators, so adding one example to group k
    moves the noise-free release by at most ``w_k C / n_k``; realized counts are private."""
    from dpfair_jax.privacy import aggregation as AG

    B, d, C, z = 32, 2000, 1.5, 0.8
    zeros = {"w": jnp.zeros((B, d), jnp.float32)}
    agg = AG.dp_aggregate(clip_norm=C, noise_multiplier=z, key=jax.random.key(12))
    out, _ = agg.update(zeros, agg.init(None))
    w = np.asarray(out["w"], np.float64)
    rows = [Row("dp_aggregate: multiplier from its noise (std x B / C)", float(np.std(w)) * B / C, z, "~",
                _std_rtol(w.size))]
    # group-weighted: neighbours D0 (n0 members of group 0 with gradient g) and D0 + one member
    # opposing g; noise-free, so the release difference is the mechanism's shift
    n0, g = 8, 0.99 * C
    wts = np.array([0.9, 0.1], np.float32)
    den = np.array([n0, n0], np.float32)
    grads = np.zeros((2 * n0 + 1, 1), np.float32)
    grads[:n0, 0] = g
    grads[2 * n0, 0] = -g
    groups = np.array([0] * n0 + [1] * n0 + [0], np.int32)
    mask0 = np.ones(2 * n0 + 1, np.float32)
    mask0[-1] = 0.0
    mask1 = np.ones(2 * n0 + 1, np.float32)

    def release(agg_, mask):
        o, _ = agg_.update({"w": jnp.asarray(grads)}, agg_.init(None), groups=jnp.asarray(groups),
                           mask=jnp.asarray(mask))
        return float(np.asarray(o["w"])[0])

    kw = dict(clip_norm=C, noise_multipliers=jnp.zeros(2), group_weights=wts, num_groups=2,
              key=jax.random.key(13))
    pub = AG.group_weighted_dp_aggregate(denominators=den, **kw)
    shift = abs(release(pub, mask1) - release(pub, mask0))
    rows.append(Row("group-weighted shift <= w_0 C / n_0 (public denominators)", shift, wts[0] * C / n0,
                    "<=", 1e-5))
    try:
        default = AG.group_weighted_dp_aggregate(**kw)
    except ValueError:
        rows.append(Row("default without public denominators: refused", True, True))
    else:
        shift = abs(release(default, mask1) - release(default, mask0))
        rows.append(Row("default denominators: shift <= w_0 C / n_0 (realized counts are private)", shift,
                        wts[0] * C / n0, "<=", 1e-5))
    return rows


# ------------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------------
CASES: dict[str, Callable[..., list[Row]]] = {
    "dpsgd/poisson(default)": functools.partial(_case_dpsgd, d=3001),
    "dpsgd/poisson+max_batch_size": functools.partial(_case_dpsgd, max_batch_size=40, d=3002),
    "dpsgd/fixed_size": functools.partial(_case_dpsgd, sampling="fixed_size", d=3003),
    "dpsgd/shuffle+epochs": functools.partial(_case_dpsgd, sampling="shuffle", epochs=2, d=3004),
    "fermi/all_features+poisson+noisy_freq(default)": _case_fermi,
    "fermi/all_features+fixed_size": functools.partial(_case_fermi, sampling="fixed_size"),
    "fermi/all_features+shuffle": functools.partial(_case_fermi, sampling="shuffle", steps=10),
    "fermi/sensitive_attribute+poisson": functools.partial(_case_fermi, privacy_unit="sensitive_attribute"),
    "fermi/sensitive_attribute+public_freq": functools.partial(
        _case_fermi, privacy_unit="sensitive_attribute", group_frequencies="public"),
    "pfld/default": functools.partial(_case_fermi, pfld=True),
    "mitigation/gammas(1,1)(default: statistics charged)": _case_mitigation,
    "mitigation/gammas(0,0)stated": functools.partial(_case_mitigation, gammas=(0.0, 0.0), d=602),
    "budget_tailoring/dpse+replace_one_within_group(default)": _case_budget_tailoring,
    "budget_tailoring/dpse+add_remove": functools.partial(_case_budget_tailoring, relation="add_remove",
                                                          count_noise=True),
    "budget_tailoring/pooled": functools.partial(_case_budget_tailoring, method="pooled"),
    "budget_tailoring/fairness+stage1_clip=paper+add_remove": functools.partial(
        _case_budget_tailoring, fairness=True, stage1_clip="paper", relation="add_remove"),
    "means/stratcoinpress+replace_one_within_group(default)": functools.partial(_case_means, estimator="coinpress"),
    "means/stratcoinpress+add_remove": functools.partial(_case_means, estimator="coinpress",
                                                         relation="add_remove"),
    "means/stratcoinpress+replace_one_within_group+count_rho": functools.partial(
        _case_means, estimator="coinpress", count_rho=0.02),
    "means/gaussian+replace_one(across strata: noisy counts)": functools.partial(
        _case_means, estimator="gaussian", relation="replace_one"),
    "means/gaussian+add_remove": functools.partial(_case_means, estimator="gaussian", relation="add_remove"),
    "means/laplace+replace_one_within_group(default)": functools.partial(_case_means, estimator="laplace"),
    "means/laplace+add_remove": functools.partial(_case_means, estimator="laplace", relation="add_remove"),
    "output_perturbation/public_radius": _case_output_perturbation,
    "output_perturbation/no_radius(default)": functools.partial(_case_output_perturbation, radius=None),
    "reductions/exponential_sampling": _case_exponential_sampling,
    "reductions/private_cgoo(privatized weights)": _case_private_cgoo,
    "reductions/dp_gd_oracle": _case_dp_gd_oracle,
    "synthesis/synthesizer+counts": _case_synthesizer,
    "synthesis/study(stratified by sex)": _case_synthesis_study,
    "aggregation/dp_aggregate+group_weighted": _case_aggregation,
}


# rows past the default suite's time budget (options whose code path another row already compiles)
SLOW = {"synthesis/study(stratified by sex)", "mitigation/gammas(0,0)stated", "dpsgd/poisson+max_batch_size",
        "fermi/sensitive_attribute+public_freq", "fermi/all_features+fixed_size",
        "means/stratcoinpress+replace_one_within_group+count_rho"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in CASES])
def test_spend_matches_fit(case, monkeypatch):
    rows = CASES[case](monkeypatch)
    bad = [r for r in rows if not r.ok()]
    assert not bad, f"{case}: the spend does not describe the run:\n" + "\n".join(r.line() for r in rows)
