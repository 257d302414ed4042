"""Tests for dpfair_jax.fairness.metrics against fairlearn and plain NumPy loops."""

from __future__ import annotations

import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.fairness import metrics as F

fairlearn_metrics = pytest.importorskip("fairlearn.metrics")
sklearn_metrics = pytest.importorskip("sklearn.metrics")

TOL = dict(rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# independent NumPy references (loops, float64)
# ------------------------------------------------------------------------------------------------


def _probs_np(y_pred, c):
    y_pred = np.asarray(y_pred)
    if y_pred.ndim == 2:
        return y_pred.astype(float)
    if y_pred.dtype.kind == "f":
        return np.stack([1 - y_pred, y_pred], axis=1).astype(float)
    return np.eye(c)[y_pred]


def ref_rates(y_pred, s, k, c, w):
    p = _probs_np(y_pred, c)
    out = {}
    for g in range(k):
        idx = s == g
        if w[idx].sum() > 0:
            out[g] = [(w[idx] * p[idx, j]).sum() / w[idx].sum() for j in range(c)]
    return out, p


def ref_dp_pairwise(y_pred, s, k, c, w):
    rates, _ = ref_rates(y_pred, s, k, c, w)
    best = 0.0
    for j in range(c):
        for g1, g2 in itertools.product(rates, rates):
            best = max(best, abs(rates[g1][j] - rates[g2][j]))
    return best


def ref_dp_marginal(y_pred, s, k, c, w):
    rates, p = ref_rates(y_pred, s, k, c, w)
    best = 0.0
    for j in range(c):
        marg = (w * p[:, j]).sum() / w.sum()
        for g in rates:
            best = max(best, abs(rates[g][j] - marg))
    return best


def ref_eo(y_pred, y, s, k, c, w):
    p = _probs_np(y_pred, c)
    best = 0.0
    for j in range(c):
        for cond in (y == j, y != j):
            vals = []
            for g in range(k):
                idx = (s == g) & cond
                if w[idx].sum() > 0:
                    vals.append((w[idx] * p[idx, j]).sum() / w[idx].sum())
            for a, b in itertools.product(vals, vals):
                best = max(best, abs(a - b))
    return best


def _random_case(seed, n=300, k=2, c=2, kind="hard"):
    rng = np.random.default_rng(seed)
    s = rng.integers(0, k, n).astype(np.int32)
    y = rng.integers(0, c, n).astype(np.int32)
    if kind == "hard":
        y_pred = rng.integers(0, c, n).astype(np.int32)
    elif kind == "binary_soft":
        y_pred = rng.random(n).astype(np.float32)
    else:
        logits = rng.normal(size=(n, c)) * 2
        y_pred = (np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    return y_pred, y, s, rng


# ------------------------------------------------------------------------------------------------
# binary, two groups: fairlearn
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_two_groups_against_fairlearn(seed, weighted):
    y_pred, y, s, rng = _random_case(seed)
    w = rng.random(len(y)) * 2 if weighted else None
    kw = {} if w is None else {"sample_weight": w}
    np.testing.assert_allclose(
        F.demographic_parity_pairwise(y_pred, s, 2, weights=w),
        fairlearn_metrics.demographic_parity_difference(y, y_pred, sensitive_features=s, **kw),
        **TOL,
    )
    np.testing.assert_allclose(
        F.equalized_odds_violation(y_pred, y, s, 2, weights=w),
        fairlearn_metrics.equalized_odds_difference(y, y_pred, sensitive_features=s, **kw),
        **TOL,
    )
    frame = fairlearn_metrics.MetricFrame(
        metrics=sklearn_metrics.accuracy_score, y_true=y, y_pred=y_pred, sensitive_features=s,
        sample_params=None if w is None else {"sample_weight": w},
    )
    np.testing.assert_allclose(F.group_accuracy(y_pred, y, s, 2, weights=w),
                               frame.by_group.to_numpy(), **TOL)
    np.testing.assert_allclose(F.group_error_rates(y_pred, y, s, 2, weights=w),
                               1 - frame.by_group.to_numpy(), **TOL)
    np.testing.assert_allclose(F.accuracy(y_pred, y, weights=w), frame.overall, **TOL)
    np.testing.assert_allclose(F.misclassification_error(y_pred, y, weights=w),
                               1 - frame.overall, **TOL)
    # equal-opportunity part = fairlearn's TPR difference
    tpr = fairlearn_metrics.MetricFrame(
        metrics=fairlearn_metrics.true_positive_rate, y_true=y, y_pred=y_pred,
        sensitive_features=s, sample_params=None if w is None else {"sample_weight": w},
    ).difference()
    np.testing.assert_allclose(F.equal_opportunity_violation(y_pred, y, s, 2, weights=w), tpr,
                               **TOL)


def test_soft_binary_matches_thresholded_fairlearn_only_when_hard():
    y_pred, y, s, _ = _random_case(3, kind="binary_soft")
    hard = (y_pred > 0.5).astype(np.int32)
    # float 0/1 labels are the same as integer labels
    np.testing.assert_allclose(F.demographic_parity_pairwise(hard.astype(np.float32), s, 2),
                               F.demographic_parity_pairwise(hard, s, 2), **TOL)
    np.testing.assert_allclose(
        F.group_accuracy(y_pred, y, s, 2),
        fairlearn_metrics.MetricFrame(metrics=sklearn_metrics.accuracy_score, y_true=y,
                                      y_pred=hard, sensitive_features=s).by_group.to_numpy(),
        **TOL,
    )
    # soft rates are group means of the probabilities
    w = np.ones(len(y))
    np.testing.assert_allclose(F.demographic_parity_pairwise(y_pred, s, 2),
                               ref_dp_pairwise(y_pred, s, 2, 2, w), **TOL)
    np.testing.assert_allclose(F.equalized_odds_violation(y_pred, y, s, 2),
                               ref_eo(y_pred, y, s, 2, 2, w), **TOL)
    expected_acc = [np.mean(np.where(y[s == g] == 1, y_pred[s == g], 1 - y_pred[s == g]))
                    for g in range(2)]
    np.testing.assert_allclose(F.group_accuracy(y_pred, y, s, 2, soft=True), expected_acc, **TOL)


# ------------------------------------------------------------------------------------------------
# multi-group, multi-class: NumPy loops
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["hard", "probs"])
@pytest.mark.parametrize("k, c", [(3, 4), (5, 3), (4, 2)])
def test_multigroup_multiclass_against_loops(kind, k, c):
    y_pred, y, s, rng = _random_case(10 * k + c, n=400, k=k, c=c, kind=kind)
    w = rng.random(len(y))
    mask = (rng.random(len(y)) > 0.2).astype(np.float32)
    ww = w * mask
    nc = c if kind == "hard" else None
    np.testing.assert_allclose(
        F.demographic_parity_pairwise(y_pred, s, k, num_classes=nc, weights=w, mask=mask),
        ref_dp_pairwise(y_pred, s, k, c, ww), **TOL)
    np.testing.assert_allclose(
        F.demographic_parity_marginal(y_pred, s, k, num_classes=nc, weights=w, mask=mask),
        ref_dp_marginal(y_pred, s, k, c, ww), **TOL)
    np.testing.assert_allclose(
        F.equalized_odds_violation(y_pred, y, s, k, num_classes=nc, weights=w, mask=mask),
        ref_eo(y_pred, y, s, k, c, ww), **TOL)
    rates, counts = F.group_prediction_rates(y_pred, s, k, num_classes=nc, weights=w, mask=mask)
    ref, _ = ref_rates(y_pred, s, k, c, ww)
    np.testing.assert_allclose(rates, np.array([ref[g] for g in range(k)]), **TOL)
    np.testing.assert_allclose(counts, [ww[s == g].sum() for g in range(k)], rtol=1e-5)
    hard = y_pred if kind == "hard" else np.argmax(y_pred, axis=1)
    acc = [np.sum(ww[s == g] * (hard[s == g] == y[s == g])) / ww[s == g].sum() for g in range(k)]
    np.testing.assert_allclose(F.group_accuracy(y_pred, y, s, k, num_classes=nc, weights=w,
                                                mask=mask), acc, **TOL)


def _official_eo(y_pred, y, s):
    """Paper 004's public code's procedure (metrics.py, ``equalized_odds_violation_binary`` and
    ``_multiple``), rewritten: per group the rate of predicted 1 among y = 1 (TPR) and among y = 0
    (FPR), each gap max - min over groups, their max; several classes: labels and predictions
    binarized one-vs-rest per label, the max over labels."""
    def binary(p, t):
        tpr = [p[(s == g) & (t == 1)].mean() for g in np.unique(s)]
        fpr = [p[(s == g) & (t == 0)].mean() for g in np.unique(s)]
        return max(max(tpr) - min(tpr), max(fpr) - min(fpr)), max(tpr) - min(tpr), max(fpr) - min(fpr)
    if len(np.unique(y)) == 2:
        return binary(y_pred, y)
    return (max(binary((y_pred == c).astype(int), (y == c).astype(int))[0] for c in np.unique(y)),)


@pytest.mark.parametrize("k, c", [(2, 2), (3, 2), (2, 3), (4, 3)])
def test_equalized_odds_is_the_official_codes_max_not_a_sum(k, c):
    """The kit's eq.-11 reading equals the authors' code's (the max of the TPR and FPR gaps on hard
    test predictions), not the sum of the two gaps."""
    y_pred, y, s, _ = _random_case(100 + 10 * k + c, n=600, k=k, c=c, kind="hard")
    official = _official_eo(y_pred, y, s)
    kit = float(F.equalized_odds_violation(y_pred, y, s, k, num_classes=c))
    np.testing.assert_allclose(kit, official[0], **TOL)
    if c == 2:
        _, tpr_gap, fpr_gap = official
        np.testing.assert_allclose(F.equal_opportunity_violation(y_pred, y, s, k), tpr_gap, **TOL)
        assert min(tpr_gap, fpr_gap) > 0.01 and kit < tpr_gap + fpr_gap - 0.01


def test_marginal_bounds_pairwise():
    for seed in range(5):
        y_pred, _, s, _ = _random_case(seed, n=200, k=4, c=3, kind="probs")
        pair = float(F.demographic_parity_pairwise(y_pred, s, 4))
        marg = float(F.demographic_parity_marginal(y_pred, s, 4))
        assert marg <= pair + 1e-6 and pair <= 2 * marg + 1e-6


# ------------------------------------------------------------------------------------------------
# jit / vmap
# ------------------------------------------------------------------------------------------------


def test_jit_and_vmap_over_predictions():
    rng = np.random.default_rng(7)
    n, k, c, t = 150, 3, 3, 4
    s = rng.integers(0, k, n).astype(np.int32)
    y = rng.integers(0, c, n).astype(np.int32)
    logits = rng.normal(size=(t, n, c))
    probs = jnp.asarray(np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), jnp.float32)

    def all_metrics(p):
        return jnp.stack([
            F.demographic_parity_pairwise(p, s, k),
            F.demographic_parity_marginal(p, s, k),
            F.equalized_odds_violation(p, y, s, k),
            F.group_accuracy(p, y, s, k)[0],
            F.group_error_rates(p, y, s, k)[1],
        ])

    batched = jax.jit(jax.vmap(all_metrics))(probs)
    for i in range(t):
        np.testing.assert_allclose(batched[i], all_metrics(np.asarray(probs[i])), **TOL)
    # the decision threshold is a traced sweep parameter
    p1 = probs[0, :, 1]
    accs = jax.jit(jax.vmap(lambda th: F.group_accuracy(p1, (y > 0).astype(np.int32), s, k,
                                                        threshold=th)))(jnp.array([0.3, 0.7]))
    for i, th in enumerate([0.3, 0.7]):
        hard = (np.asarray(p1) > th).astype(int)
        np.testing.assert_allclose(accs[i], [np.mean(hard[s == g] == (y[s == g] > 0))
                                             for g in range(k)], **TOL)
    # group ids and weights may be traced too (e.g. a synthetic dataset generated per trial)
    out = jax.jit(lambda p, ss, w: F.equalized_odds_violation(p, y, ss, k, weights=w))(
        probs[0], s, jnp.ones(n))
    np.testing.assert_allclose(out, batched[0, 2], **TOL)


def test_classification_summary_matches_parts_and_vmaps():
    y_pred, y, s, _ = _random_case(12, n=120, k=3, c=3, kind="probs")
    out = F.classification_summary(y_pred, y, s, 3)
    hard = np.argmax(y_pred, axis=1).astype(np.int32)
    np.testing.assert_allclose(out["dp_pairwise"],
                               F.demographic_parity_pairwise(hard, s, 3, num_classes=3), **TOL)
    np.testing.assert_allclose(out["eo"],
                               F.equalized_odds_violation(hard, y, s, 3, num_classes=3), **TOL)
    np.testing.assert_allclose(out["error"], sklearn_metrics.zero_one_loss(y, hard), **TOL)
    stacked = jnp.stack([jnp.asarray(y_pred), jnp.asarray(y_pred[::-1])])
    batched = jax.jit(jax.vmap(lambda p: F.classification_summary(p, y, s, 3)))(stacked)
    np.testing.assert_allclose(batched["dp_marginal"][0], out["dp_marginal"], **TOL)
    assert batched["group_accuracy"].shape == (2, 3)


# ------------------------------------------------------------------------------------------------
# empty groups
# ------------------------------------------------------------------------------------------------


def test_empty_group_gives_no_nan_and_is_excluded():
    y_pred, y, s, _ = _random_case(4, n=120, k=2, c=2)
    s3 = np.where(s == 1, 2, 0).astype(np.int32)  # group 1 of 3 is empty
    for fn, args in [
        (F.demographic_parity_pairwise, (y_pred,)),
        (F.demographic_parity_marginal, (y_pred,)),
    ]:
        got = fn(*args, s3, 3)
        assert np.isfinite(got)
        np.testing.assert_allclose(got, fn(*args, s, 2), **TOL)
    eo = F.equalized_odds_violation(y_pred, y, s3, 3)
    np.testing.assert_allclose(eo, F.equalized_odds_violation(y_pred, y, s, 2), **TOL)
    acc = F.group_accuracy(y_pred, y, s3, 3)
    assert acc[1] == 0.0 and np.all(np.isfinite(acc))
    assert F.group_error_rates(y_pred, y, s3, 3)[1] == 0.0
    rates, counts = F.group_prediction_rates(y_pred, s3, 3)
    assert counts[1] == 0 and np.all(rates[1] == 0)
    # a group with no positive labels: its TPR cell is excluded, FPR still counts
    y_mod = np.where(s == 1, 0, y).astype(np.int32)
    w = np.ones(len(y))
    np.testing.assert_allclose(F.equalized_odds_violation(y_pred, y_mod, s, 2),
                               ref_eo(y_pred, y_mod, s, 2, 2, w), **TOL)
    # everything masked out: all zeros, no NaN
    zero = np.zeros(len(y), np.float32)
    assert F.demographic_parity_pairwise(y_pred, s, 2, mask=zero) == 0.0
    assert F.equalized_odds_violation(y_pred, y, s, 2, mask=zero) == 0.0
    # gradients through an empty group stay finite
    g = jax.grad(lambda p: F.demographic_parity_pairwise(p, s3, 3))(jnp.asarray(y_pred, jnp.float32))
    assert np.all(np.isfinite(g))


# ------------------------------------------------------------------------------------------------
# group losses, MSPE, excessive risk
# ------------------------------------------------------------------------------------------------


def test_group_mean_loss_and_mspe():
    rng = np.random.default_rng(5)
    n, k, t = 60, 3, 4
    s = rng.integers(0, k, n).astype(np.int32)
    losses = rng.random((t, n))
    w = rng.random(n)
    got = F.group_mean_loss(losses, s, k, weights=w)
    ref = np.array([[np.sum(w[s == g] * losses[i, s == g]) / w[s == g].sum() for g in range(k)]
                    for i in range(t)])
    np.testing.assert_allclose(got, ref, **TOL)
    pred, y = rng.normal(size=n), rng.normal(size=n)
    np.testing.assert_allclose(
        F.group_mspe(pred, y, s, k),
        [np.mean((pred[s == g] - y[s == g]) ** 2) for g in range(k)], **TOL)
    empty = np.where(s == 1, 0, s).astype(np.int32)
    assert F.group_mean_loss(losses[0], empty, k)[1] == 0.0


def test_excessive_risk_against_loops():
    rng = np.random.default_rng(6)
    n, k, t = 80, 3, 5
    s = rng.integers(0, k, n).astype(np.int32)
    ref_losses = rng.random(n)
    priv = ref_losses + rng.random((t, n)) * (1 + s)  # group 2 suffers most
    out = F.excessive_risk(priv, ref_losses, s, k)
    r_a = np.array([priv[:, s == g].mean() - ref_losses[s == g].mean() for g in range(k)])
    r = priv.mean() - ref_losses.mean()
    np.testing.assert_allclose(out.group, r_a, **TOL)
    np.testing.assert_allclose(out.population, r, **TOL)
    # R = sum_a p_a R_a
    p = np.bincount(s, minlength=k) / n
    np.testing.assert_allclose(out.population, p @ r_a, **TOL)
    np.testing.assert_allclose(out.group_gap, np.abs(r_a - r), **TOL)
    np.testing.assert_allclose(out.gap, np.max(np.abs(r_a - r)), **TOL)
    np.testing.assert_allclose(F.excessive_risk_gap(out.group, out.population), out.gap, **TOL)
    # per-run reference [T, n] is averaged the same way
    ref_t = np.broadcast_to(ref_losses, (t, n))
    np.testing.assert_allclose(F.excessive_risk(priv, ref_t, s, k).gap, out.gap, **TOL)
    # empty group: excluded from the gap, no NaN
    s_e = np.where(s == 1, 0, s).astype(np.int32)
    out_e = F.excessive_risk(priv, ref_losses, s_e, k)
    assert np.all(np.isfinite(np.asarray(out_e.group))) and out_e.group_gap[1] == 0.0
    assert F.excessive_risk_gap(np.array([0.1, 5.0, 0.3]), 0.2, counts=np.array([1, 0, 2])) == \
        pytest.approx(0.1, abs=1e-6)
    # vmap over a grid of trials sets
    batched = jax.jit(jax.vmap(lambda pr: F.excessive_risk(pr, ref_losses, s, k).gap))(
        jnp.stack([priv, 2 * priv]))
    np.testing.assert_allclose(batched[0], out.gap, **TOL)


# ------------------------------------------------------------------------------------------------
# parity error (paper 003, Def. 10)
# ------------------------------------------------------------------------------------------------


def test_parity_error_definition_and_options():
    true_g = np.array([1.0, 2.0, 4.0])
    est_g = np.array([1.5, 1.0, 5.0])
    true_x, est_x = 2.0, 2.2
    strata = 0.5 + 0.5 + 0.25
    pop = 0.1
    np.testing.assert_allclose(F.parity_error(true_g, est_g, true_x, est_x), strata + pop / 3,
                               **TOL)
    np.testing.assert_allclose(F.parity_error(true_g, est_g, true_x, est_x, average=True),
                               strata / 3 + pop / 3, **TOL)
    np.testing.assert_allclose(F.parity_error(true_g, est_g, true_x, est_x, omega=1.0),
                               strata + pop, **TOL)
    # Fig. 2 code: unnormalized, no population term
    np.testing.assert_allclose(F.parity_error(true_g, est_g, normalize=False), 0.5 + 1.0 + 1.0,
                               **TOL)
    # zero reference terms are dropped; vector-valued f sums over columns
    tg = np.array([[1.0, 0.0], [2.0, 4.0]])
    eg = np.array([[2.0, 0.0], [2.0, 3.0]])
    np.testing.assert_allclose(F.parity_error(tg, eg, np.array([1.5, 2.0]), np.array([1.5, 1.0])),
                               1.0 + 0.25 + 0.5 * 0.5, **TOL)
    np.testing.assert_allclose(F.parity_error(true_g, est_g, group_mask=np.array([1, 0, 1])),
                               0.75, **TOL)
    # omega is a traced sweep parameter
    omegas = jnp.array([0.0, 1.0, 2.0])
    got = jax.jit(jax.vmap(lambda o: F.parity_error(true_g, est_g, true_x, est_x, omega=o)))(omegas)
    np.testing.assert_allclose(got, strata + pop * np.asarray(omegas), **TOL)


# ------------------------------------------------------------------------------------------------
# bad inputs
# ------------------------------------------------------------------------------------------------


def test_bad_inputs_raise():
    y_pred, y, s, _ = _random_case(9, n=50)
    with pytest.raises(ValueError, match="mismatched lengths"):
        F.demographic_parity_pairwise(y_pred[:-1], s, 2)
    with pytest.raises(ValueError, match="mismatched lengths"):
        F.equalized_odds_violation(y_pred, y[:-1], s, 2)
    with pytest.raises(ValueError, match="group ids outside"):
        F.demographic_parity_pairwise(y_pred, s + 1, 2)
    with pytest.raises(ValueError, match="group ids outside"):
        F.group_mean_loss(np.ones(50), s - 1, 2)
    with pytest.raises(ValueError, match="labels outside"):
        F.demographic_parity_pairwise(y_pred + 1, s, 2)
    with pytest.raises(ValueError, match="labels outside"):
        F.equalized_odds_violation(y_pred, y + 2, s, 2)
    with pytest.raises(ValueError, match="labels outside"):
        F.group_accuracy(y_pred, y + 2, s, 2)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        F.demographic_parity_pairwise(np.full(50, 1.5, np.float32), s, 2)
    with pytest.raises(ValueError, match="sum to 1"):
        F.demographic_parity_pairwise(np.full((50, 3), 0.5, np.float32), s, 2)
    with pytest.raises(ValueError, match="num_classes"):
        F.demographic_parity_pairwise(np.full((50, 3), 1 / 3, np.float32), s, 2, num_classes=4)
    with pytest.raises(ValueError, match="weights"):
        F.demographic_parity_pairwise(y_pred, s, 2, weights=-np.ones(50))
    with pytest.raises(ValueError, match="num_groups"):
        F.demographic_parity_pairwise(y_pred, s, 0)
    with pytest.raises(ValueError, match="positive_class"):
        F.equal_opportunity_violation(y_pred, y, s, 2, positive_class=2)
    with pytest.raises(ValueError, match="losses"):
        F.group_mean_loss(np.ones(49), s, 2)
    with pytest.raises(ValueError, match="non-finite"):
        F.excessive_risk(np.full(50, np.nan), np.ones(50), s, 2)
    with pytest.raises(ValueError, match="same shape"):
        F.parity_error(np.ones(3), np.ones(2))
    with pytest.raises(ValueError, match="both"):
        F.parity_error(np.ones(3), np.ones(3), true_population=1.0)
    with pytest.raises(ValueError, match="omega"):
        F.parity_error(np.ones(3), np.ones(3), 1.0, 1.0, omega=-1.0)


def test_no_warnings_on_empty_groups():
    y_pred, y, s, _ = _random_case(11, n=40)
    s3 = np.where(s == 1, 2, 0).astype(np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.equalized_odds_violation(y_pred, y, s3, 3)
        F.group_accuracy(y_pred, y, s3, 3)
