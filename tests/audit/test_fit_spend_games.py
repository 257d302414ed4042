"""The generic fit/spend game: its claim is the algorithm's spend, bugs transform only the run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import models as M
from dpfair_jax.algorithms import dpsgd, fermi
from dpfair_jax.audit.fit_spend import UNCLIPPED, FitSpendGame, plant


def _dpsgd_game(**kw):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 2)).astype(np.float32)
    y = (np.arange(8) % 2).astype(np.int32)
    cfg = dpsgd.DPSGDConfig(model=M.logistic(input_dim=2), delta=1e-3, diagnostics=False, batch_size=4, steps=1)
    hp = dpsgd.DPSGDHparams(learning_rate=0.1, clip_norm=3.0, noise_multiplier=1.0)
    params = M.logistic(input_dim=2).init(jax.random.key(0))
    pair = ((jnp.asarray(x[:-1]), jnp.asarray(y[:-1])), (jnp.asarray(x), jnp.asarray(y)))
    return FitSpendGame(algorithm=dpsgd, config=cfg, hparams=hp, neighbours=pair,
                        statistic=lambda r: r.params["w"][0, 0], fit_kwargs={"params": params}, **kw)


def test_claim_is_the_larger_spend_over_the_two_worlds():
    game = _dpsgd_game(relation="add_remove")
    _, info = game.build()
    expected = max(dpsgd.spend(game.config, n, game.hparams).epsilon for n in (7, 8))
    assert info["claimed_epsilon"] == pytest.approx(expected, rel=1e-12)
    assert expected > dpsgd.spend(game.config, 8, game.hparams).epsilon  # D0's larger rate q = 4/7 decides
    assert info["relation"] == "add_remove"


def test_mechanism_runs_fit_on_the_selected_world():
    game = _dpsgd_game()
    fn, _ = game.build()
    key = jax.random.key(3)
    a, b = float(fn(key, jnp.int32(0))), float(fn(key, jnp.int32(1)))
    d0, d1 = game.neighbours
    ref0 = float(dpsgd.fit(key, d0, game.hparams, game.config, **game.fit_kwargs).params["w"][0, 0])
    ref1 = float(dpsgd.fit(key, d1, game.hparams, game.config, **game.fit_kwargs).params["w"][0, 0])
    assert (a, b) == pytest.approx((ref0, ref1), rel=1e-6)


def test_a_planted_bug_changes_the_run_and_not_the_claim():
    game = _dpsgd_game()
    bad = dataclasses_replace(game, run_hparams=plant(game.hparams, "noise", [("noise_multiplier", "clip_norm")]))
    assert bad.build()[1]["claimed_epsilon"] == game.build()[1]["claimed_epsilon"]
    hp = game.hparams
    fields = [("noise_multiplier", "clip_norm")]
    assert plant(hp, "noise_half", fields).noise_multiplier == 0.5
    assert plant(hp, "clip_unscaled", fields).noise_multiplier == pytest.approx(1.0 / 3.0)
    c = plant(hp, "clipping", fields)
    assert (c.clip_norm, c.noise_multiplier * c.clip_norm) == pytest.approx((3.0 * UNCLIPPED, 3.0))
    f = plant(fermi.FermiHparams(noise_theta=2.0, noise_w=4.0), "noise", [("noise_theta", None), ("noise_w", None)])
    assert (f.noise_theta, f.noise_w) == pytest.approx((0.2, 0.4))  # a NamedTuple's fields too


def dataclasses_replace(obj, **kw):
    import dataclasses

    return dataclasses.replace(obj, **kw)


def test_bad_input_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="bug"):
        plant(dpsgd.DPSGDHparams(), "typo", [("noise_multiplier", "clip_norm")])
    with pytest.raises(ValueError, match="clip field"):
        plant(dpsgd.DPSGDHparams(), "clipping", [("noise_multiplier", None)])
    with pytest.raises(ValueError, match="neighbours"):
        dataclasses_replace(_dpsgd_game(), neighbours=(1, 2, 3))
    with pytest.raises(ValueError, match="relation"):
        _dpsgd_game(relation="replace_one").build()
    with pytest.raises(ValueError, match="algorithm"):
        dataclasses_replace(_dpsgd_game(), algorithm=object())


def test_world_hparams_run_each_world_with_its_own():
    """A data-derived hyperparameter (a bug) runs each world with its own hparams; the claim stays
    the nominal spend."""
    game = _dpsgd_game()
    hp0 = dataclasses_replace(game.hparams, learning_rate=1e-9)  # D0 run barely moves
    bad = dataclasses_replace(game, world_hparams=(hp0, game.hparams))
    fn, info = bad.build()
    key = jax.random.key(5)
    w_init = float(game.fit_kwargs["params"]["w"][0, 0])
    assert float(fn(key, jnp.int32(0))) == pytest.approx(w_init, abs=1e-6)
    assert float(fn(key, jnp.int32(1))) == pytest.approx(float(game.build()[0](key, jnp.int32(1))), rel=1e-6)
    assert info["claimed_epsilon"] == game.build()[1]["claimed_epsilon"]
    with pytest.raises(ValueError, match="world_configs"):
        dataclasses_replace(game, neighbours=lambda flag: game.neighbours[1], world_configs=(1, 2))
