"""The audit-game protocol (``dpfair_jax.audit.games``): every registered game module is a
:class:`GameModule` and every family's builder returns what :class:`AuditGame` states."""

from __future__ import annotations

import inspect

import jax.numpy as jnp
import pytest

from dpfair_jax.audit import mechanism_audits as MA
from dpfair_jax.audit.games import AuditGame, GameModule


def test_every_game_module_is_a_game_module():
    for mod in set(MA.FAMILY_MODULES.values()):
        assert isinstance(mod, GameModule), mod.__name__
        fams = set(mod.FAMILY_BUGS)
        assert fams == set(mod.BUILDERS) == set(mod.ALGORITHMS) == set(mod.SUITE_TRIALS["quick"]) \
            == set(mod.SUITE_TRIALS["full"]), mod.__name__
        for fam in fams:
            bug = inspect.signature(mod.BUILDERS[fam]).parameters["bug"]
            assert bug.kind is inspect.Parameter.KEYWORD_ONLY and bug.default is None, fam


# families whose bug-free build (a calibration or a reference fit) takes over ~3 s of one core
_SLOW_BUILDS = {"dpsgd", "dpsgd_mlp", "output_perturbation", "exponential_sampling"}


@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f in _SLOW_BUILDS else f
                                    for f in MA.FAMILIES])
def test_every_registered_game_is_an_audit_game(family):
    """The bug-free game of each family: the claim's fields and a parametric bound its module
    computes (the games themselves run in ``test_audit_mechanisms``)."""
    g = MA.game(family)
    assert isinstance(g, AuditGame) and g.info["claimed_epsilon"] == g.claimed_epsilon
    if g.bound is not None:
        assert callable(getattr(MA.FAMILY_MODULES[family], "parametric_bound", None))


def test_an_incomplete_or_wrong_claim_is_refused():
    fn = lambda key, flag: jnp.float32(0)  # noqa: E731
    with pytest.raises(ValueError, match="relation"):
        AuditGame.from_built((fn, {"claimed_epsilon": 1.0, "delta": 1e-5}))
    with pytest.raises(ValueError):
        AuditGame.from_built((fn, {"claimed_epsilon": 1.0, "delta": 1e-5, "relation": "neighbours"}))
    with pytest.raises(ValueError, match="claimed_epsilon"):
        AuditGame(fn, float("inf"), 1e-5, "add_remove")
    with pytest.raises(ValueError, match="delta"):
        AuditGame(fn, 1.0, 1.0, "add_remove")
    g = AuditGame.from_built((fn, {"claimed_epsilon": 2, "delta": 0.0, "relation": "replace_one", "bound": "b"}))
    assert (g.claimed_epsilon, g.delta, g.relation, g.bound) == (2.0, 0.0, "replace_one", "b")
