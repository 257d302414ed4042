"""Relation labels say what they cover: budget tailoring and the stratified means with exact,
public group sizes record ``replace_one_within_group`` (one record replaced by another of the same
group), not ``replace_one``; a record moved to another group is refused by the spend or shown to
be told apart with certainty (epsilon = inf), and the label reaches ``privacy.json`` and REPORT.md.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import NeighboringRelation

from dpfair_jax.algorithms import budget_tailoring as bt
from dpfair_jax.algorithms import mean_estimation as me
from dpfair_jax.audit import budget_tailoring_games as BG
from dpfair_jax.audit import mean_estimation_games as MG
from dpfair_jax.audit import mechanism_audits as MA
from dpfair_jax.audit.fit_spend import FitSpendGame
from dpfair_jax.privacy import relations as R
from dpfair_jax.runner import report
from dpfair_jax.runner.context import run_experiment
from dpfair_jax.runner.registry import Experiment

WITHIN = "replace_one_within_group"


def test_relation_names_and_what_each_covers():
    """The within-group name keeps its label (the enum cannot say it) and replace-one's arithmetic."""
    assert R.RELATION_NAMES == ("add_remove", "replace_one", WITHIN)
    assert R.as_relation(WITHIN) is NeighboringRelation.REPLACE_ONE
    assert R.relation_name(WITHIN) == WITHIN and R.relation_name("REPLACE_ONE") == "replace_one"
    assert R.replace_factor(WITHIN) == 2.0
    assert R.clipped_sum_sensitivity(1.5).under(WITHIN) == 3.0
    assert R.within_group(WITHIN) and not R.within_group("replace_one")
    # a same-group replacement is a replacement; the converse does not hold
    assert R.covers("replace_one", WITHIN) and R.covers(WITHIN, WITHIN)
    assert not R.covers(WITHIN, "replace_one") and not R.covers(WITHIN, "add_remove")
    assert not R.covers("add_remove", "replace_one") and not R.covers("replace_one", "add_remove")
    with pytest.raises(ValueError, match=WITHIN):
        R.as_relation("swap")


def test_defaults_record_the_within_group_relation():
    """Both defaults divide by the exact group sizes; their spends name the relation that covers."""
    sp = bt.spend(bt.Config(), (5, 7), bt.Hyperparams(rho=0.5))
    assert sp.relation == WITHIN and "not covered" in sp.notes
    assert bt.Config().relation == WITHIN
    for method in me.METHODS:
        m = me.spend(me.MeanConfig(method=method, num_groups=2), (5, 7), me.MeanHparams())
        assert m.relation == WITHIN and "not covered" in m.notes, method
    assert me.spend(me.MeanConfig(num_groups=2), (5, 7), me.MeanHparams(rho=0.5)).relation == WITHIN
    assert me.resolve_count_rho(WITHIN, 1.0) is None
    # the noisy-count variants keep (and cover) what they say
    assert bt.spend(bt.Config(relation="add_remove"), (5, 7), bt.Hyperparams()).relation == "add_remove"
    ar = me.spend(me.MeanConfig(num_groups=2, relation="add_remove"), (5, 7), me.MeanHparams(rho=0.5))
    assert ar.relation == "add_remove" and ar.rho == pytest.approx(0.55)


def test_cross_group_replacement_is_refused_or_paid_for():
    """Budget tailoring has no cross-group path: general replace-one is refused at construction.
    The means cover it only with noisy counts (sensitivity sqrt 2), charged on top of the budget."""
    for bad in ("replace_one", NeighboringRelation.REPLACE_ONE):
        with pytest.raises(ValueError, match="replace_one_within_group"):
            bt.Config(relation=bad)
    cfg = me.MeanConfig(num_groups=2, relation="replace_one")
    assert cfg.noisy_counts and not me.MeanConfig(num_groups=2).noisy_counts
    sp = me.spend(cfg, (5, 7), me.MeanHparams(rho=0.5))
    assert sp.relation == "replace_one" and sp.rho == pytest.approx(0.5 * (1 + me.DEFAULT_COUNT_FRACTION))
    assert me.resolve_count_rho("replace_one", 2.0) == pytest.approx(2.0 * me.DEFAULT_COUNT_FRACTION)
    # the released sizes under general replace-one are noisy, not the exact counts
    x, s = jnp.arange(6.0), jnp.array([0, 0, 0, 1, 1, 1])
    out = me.stratified_gaussian_mean(jax.random.key(0), x, s, 2, center=0.0, clip=1.0, rho=0.5,
                                      relation="replace_one")
    assert not np.allclose(np.asarray(out.sizes), [3.0, 3.0])
    exact = me.stratified_gaussian_mean(jax.random.key(0), x, s, 2, center=0.0, clip=1.0, rho=0.5)
    np.testing.assert_array_equal(np.asarray(exact.sizes), [3.0, 3.0])


@pytest.mark.parametrize("family", ["budget_tailoring_fit", "stratified_coinpress"])
def test_a_record_moved_between_groups_is_refused_and_told_apart(family):
    """The cross-group pair: the honestly labelled game (relation="replace_one") is refused by the
    within-group spend; run anyway, the released group sizes separate the two worlds in every
    trial, so no finite epsilon holds for that pair (with TPR = 1 and FPR = 0, (eps, delta)-DP
    needs delta >= 1). The registry's cross_group variant claims the former label's epsilon."""
    game = (BG.budget_tailoring_fit_game(bug="cross_group") if family == "budget_tailoring_fit"
            else MG.stratified_coinpress_game(bug="cross_group"))
    assert game.spend().relation == WITHIN
    honest = FitSpendGame(algorithm=game.algorithm, config=game.config, hparams=game.hparams,
                          neighbours=game.neighbours, statistic=game.statistic, sizes=game.sizes,
                          relation="replace_one")
    with pytest.raises(ValueError, match="not covered"):
        honest.spend()
    fn, info = MA.build(family, "cross_group")
    assert info["relation"] == "replace_one" and np.isfinite(info["claimed_epsilon"])
    keys = jax.random.split(jax.random.key(5), 8)
    both = jax.jit(jax.vmap(lambda k: jnp.stack([fn(k, jnp.int32(0)), fn(k, jnp.int32(1))])))(keys)
    w0, w1 = np.asarray(both[:, 0]), np.asarray(both[:, 1])
    assert np.all(w0 == w0[0]) and np.all(w1 == w1[0]) and w1.min() == w0.max() + 1.0  # sizes differ by one
    assert "cross_group" in MA.FAMILY_BUGS[family]


def _study(config, ctx):
    ctx.record_privacy("budget_tailoring", bt.spend(bt.Config(), (5, 7), bt.Hyperparams(rho=0.5)))
    ctx.record_privacy("means", me.spend(me.MeanConfig(num_groups=2), (5, 7), me.MeanHparams()))
    ctx.record_privacy("means_noisy", me.spend(me.MeanConfig(num_groups=2, relation="replace_one"), (5, 7),
                                               me.MeanHparams()))


def test_the_label_reaches_privacy_json_and_the_report(tmp_path):
    res = run_experiment(Experiment("t_rel", "kit", "labels", {"quick": {}, "full": {}}, _study), size="quick",
                         root=tmp_path, progress=False)
    assert res.ok
    rec = json.loads((tmp_path / "runs" / "t_rel" / "privacy.json").read_text())
    assert rec["budget_tailoring"]["relation"] == WITHIN and rec["means"]["relation"] == WITHIN
    assert rec["means_noisy"]["relation"] == "replace_one"
    text = report.build_report(tmp_path).read_text()
    rows = [line for line in text.splitlines() if line.startswith("| budget_tailoring ") or line.startswith("| means")]
    assert len(rows) == 3
    assert all("replace-one within a group" in r for r in rows[:2]), rows
    assert "within a group" not in rows[2]
