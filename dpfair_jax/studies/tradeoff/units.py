"""The privacy unit of the public tradeoff study: the kit's example-level default and the paper's
sensitive-attribute unit (paper 004's Definition 2.2: neighbours differ only in one record's
``s_i``, after Jagielski et al. 2019 and Tran et al. 2021b).

Under ``privacy_unit="sensitive_attribute"`` every method runs its example-level mechanism (the
same code path as the default) with its noise calibrated so that the whole selection is within the
target epsilon *for a change of one s_i*. One run's Renyi curve is the pointwise minimum of (a) the
exact membership-visible curve of the releases that read ``s`` (each at its sensitivity for a
change of one ``s_i``) and (b) the run's example-level add/remove curve carried to that change
(:mod:`dpfair_jax.privacy.attribute`, :func:`dpfair_jax.algorithms.fermi.attribute_change_rdp`,
:func:`dpfair_jax.algorithms.pfld_epoch.attribute_rdp`); the Papernot-Steinke selection is
accounted on that curve. The noisy validation score reads only ``y`` and the predictions (the
error count), so it spends nothing on ``s``. DP-SGD (lambda = 0) reads ``s`` nowhere: it keeps the
example-level noise of its target (it is still DP-SGD) and records a spend of 0 for this unit.

Beside each row, ``thm33_epsilon``: what the paper's Theorem 3.3 accounting would record for the
same selection (the Poisson-subsampled, amplified Gaussian at the attribute change's shift), and
``unit_ratio = spend_epsilon / thm33_epsilon``.

Privacy: each row's model is (``spend_epsilon``, ``spend_delta``)-DP under substitution of one
record's ``s_i`` (relation ``"replace_one"``); it claims nothing for a change of features or label.
"""

from __future__ import annotations

import math

import dp_accounting

from dpfair_jax.studies.tradeoff.methods import _PROGRAM, UNIT_LABEL

#: the study's units, named as :data:`dpfair_jax.privacy.records.UNITS`, and their row labels
UNITS = ("example", "sensitive_attribute")
UNIT_LABELS = {"example": UNIT_LABEL, "sensitive_attribute": "sensitive-attribute"}


def check_unit(unit) -> str:
    """``unit`` if one of :data:`UNITS`, else a ``ValueError`` naming them (before any compute)."""
    from dpfair_jax.privacy import attribute as At

    return At.check_unit(unit)


def run_rdp(st, m: str, z: float):
    """One run's curve for a change of one ``s_i`` (method ``m``, theta multiplier ``z``)."""
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.algorithms import pfld_epoch as PE

    if m == "pfld_epoch":
        return PE.attribute_rdp(st.cfgs["pfld_epoch"], st.n, z, st.violation_noise_ratio * z)
    if m == "jagielski_in":  # pure steps at the attribute unit's sensitivities (.oracle)
        from dpfair_jax.studies.tradeoff import oracle as OR

        return OR.attribute_rdp(st.cfgs["jagielski_in"], z, st.w_ratio[m])
    return F.attribute_change_rdp(st.cfgs[_PROGRAM[m]], st.n, z, st.w_ratio[m] * z, reads_s=m != "dpsgd")


def calibrate(st, m: str, e: float, example_z) -> float:
    """The theta multiplier of method ``m`` at target ``e`` for the attribute unit (DP-SGD: its
    example-level multiplier ``example_z()``, nothing being spent on ``s``)."""
    from dpfair_jax.privacy import attribute as At

    if m == "dpsgd":
        return example_z()
    return At.calibrate_attribute_selection(lambda z: run_rdp(st, m, z), st.law, e, st.delta, rtol=0.005)


def _truncation(st, m: str, eps: float) -> float:
    from dpfair_jax.privacy import sampling as Smp

    if m == "jagielski_in":  # no sampling: every row each round
        return 0.0
    cfg = st.cfgs[_PROGRAM[m]]
    steps = cfg.steps(st.n) if m == "pfld_epoch" else cfg.steps
    B = cfg.sgda_config(st.n).padded_batch(st.n) if m == "pfld_epoch" else cfg.sgda_config().padded_batch(st.n)
    return Smp.truncation_delta(st.n, cfg.batch_size / st.n, B, steps, eps) * st.law.mean if B < st.n else 0.0


def selection_spend(st, m: str, e: float, z: float, selection_label: str):
    """The :class:`~dpfair_jax.privacy.accounting.PrivacySpend` of one (method, epsilon) for the
    attribute unit: the best of ``K ~ law`` runs on the curve of :func:`run_rdp`."""
    from dpfair_jax.privacy import accounting as A
    from dpfair_jax.privacy import attribute as At

    kw = dict(relation="replace_one", unit="sensitive_attribute")
    if not math.isfinite(e):
        return A.PrivacySpend(math.inf, st.delta, notes=f"{m}: epsilon = inf, no noise ({selection_label})", **kw)
    if m == "dpsgd":
        return A.PrivacySpend(0.0, 0.0, accountant="rdp", notes=(
            "dpsgd: lambda = 0, no release reads s (the updates multiply every s-term by 0; the validation "
            "score reads y and the predictions): nothing spent on s; the noise is the example-level one"), **kw)
    if not st.private:
        one = At.attribute_selection_epsilon(run_rdp(st, m, z), None, st.delta)
        return A.PrivacySpend(math.inf, st.delta, notes=(
            f"{m}: non-private arg-max, the selection is not accounted (each run alone: epsilon {one:.4g} "
            "for a change of one s_i)"), **kw)
    eps = At.attribute_selection_epsilon(run_rdp(st, m, z), st.law, st.delta)
    if m == "jagielski_in":
        return A.PrivacySpend(eps, st.delta, accountant="rdp", notes=(
            f"{m}: best of K ~ {selection_label} runs on validation, a change of one s_i: the DP-oracle-learner's "
            "pure steps (Laplace counts, exponential mechanism as zCDP, Laplace rate differences) at the attribute "
            "unit's sensitivities; the class and the validation score read no s"), **kw)
    trunc = _truncation(st, m, eps)
    return A.PrivacySpend(eps, min(st.delta + trunc, 0.999999), accountant="rdp", notes=(
        f"{m}: best of K ~ {selection_label} runs on validation, a change of one s_i: min of the membership-"
        "visible curve of the parts that read s and the example-level curve under replace-one (weak triangle or "
        "direct); the validation "
        f"score reads no s; truncation delta {trunc:.2e} (times the mean number of runs) included"), **kw)


def thm33_epsilon(st, m: str, e: float, z: float) -> float:
    """What the paper's Theorem 3.3 accounting records for the same selection: the amplified,
    Poisson-subsampled Gaussian at the attribute change's shift (``nan`` for DP-SGD and ``inf``)."""
    from dpfair_jax.algorithms import fermi as F
    from dpfair_jax.privacy import attribute as At
    from dpfair_jax.privacy import accounting as A
    from dpfair_jax.privacy import selection as S

    if m in ("dpsgd", "jagielski_in") or not math.isfinite(e) or z == 0:  # no Theorem 3.3 for the oracle learner
        return math.nan
    if m == "pfld_epoch":
        cfg = st.cfgs["pfld_epoch"]
        steps = A.dpsgd_event(At.amplified_multiplier(z, At.CLIPPED_SUM_FACTOR), cfg.batch_size / st.n,
                              cfg.steps(st.n))
        rel = dp_accounting.GaussianDpEvent(At.amplified_multiplier(st.violation_noise_ratio * z,
                                                                    At.MOVED_CELL_FACTOR))
        ev = dp_accounting.ComposedDpEvent([steps, dp_accounting.SelfComposedDpEvent(rel, cfg.epochs)])
    else:
        ev = F.theorem33_attribute_event(st.cfgs[_PROGRAM[m]], st.n, z, st.w_ratio[m] * z)
    return S.selection_epsilon(ev, st.law if st.private else None, st.delta)
