"""Neighbouring relations and per-relation sensitivities (dpfair_jax.privacy.relations),
checked against brute-force worst cases over small neighbouring datasets."""

import itertools
import math

import numpy as np
import pytest
from dp_accounting import NeighboringRelation

from dpfair_jax.privacy import relations as r


def test_as_relation_accepts_names_and_enum():
    assert r.as_relation("add_remove") is NeighboringRelation.ADD_OR_REMOVE_ONE
    assert r.as_relation("REPLACE_ONE") is NeighboringRelation.REPLACE_ONE
    assert r.as_relation(NeighboringRelation.REPLACE_ONE) is NeighboringRelation.REPLACE_ONE
    assert r.relation_name(NeighboringRelation.ADD_OR_REMOVE_ONE) == "add_remove"
    assert r.replace_factor("replace_one") == 2.0 and r.replace_factor("add_remove") == 1.0


@pytest.mark.parametrize("bad", ["swap", "bounded", 3, None, NeighboringRelation.REPLACE_SPECIAL])
def test_as_relation_refuses(bad):
    with pytest.raises(ValueError, match="relation"):
        r.as_relation(bad)


def test_swap_message_points_to_replace_one():
    with pytest.raises(ValueError, match="replace_one"):
        r.as_relation("swap")


def _worst(query, rows, relation):
    """Largest ||query(D) - query(D')|| over D of 2 rows from ``rows`` and its neighbours."""
    worst = 0.0
    for d in itertools.product(rows, repeat=2):
        d = list(d)
        if relation == "add_remove":
            neighbours = [d[:1]] + [d + [x] for x in rows]
        else:
            neighbours = [[x, d[1]] for x in rows]
        for e in neighbours:
            worst = max(worst, float(np.linalg.norm(np.ravel(query(d) - query(e)))))
    return worst


def test_clipped_sum_sensitivity_is_worst_case():
    c = 1.5
    angles = np.linspace(0, 2 * np.pi, 13)[:-1]
    rows = [c * np.array([np.cos(a), np.sin(a)]) for a in angles]
    s = r.clipped_sum_sensitivity(c)
    for rel in ("add_remove", "replace_one"):
        assert _worst(lambda d: np.sum(d, axis=0), rows, rel) == pytest.approx(s.under(rel))


def test_bounded_sum_and_gram_are_worst_cases():
    lo, hi = -0.5, 2.0
    rows = list(np.linspace(lo, hi, 6))
    s = r.bounded_sum_sensitivity(lo, hi)
    for rel in ("add_remove", "replace_one"):
        assert _worst(lambda d: np.array([sum(d)]), rows, rel) == pytest.approx(s.under(rel))
    u = 2.0
    angles = np.linspace(0, np.pi, 9)
    vecs = [u * np.array([np.cos(a), np.sin(a)]) for a in angles]
    g = r.gram_sensitivity(u)
    gram = lambda d: sum(np.outer(x, x) for x in d)  # noqa: E731
    for rel in ("add_remove", "replace_one"):
        assert _worst(gram, vecs, rel) == pytest.approx(g.under(rel))


def test_histogram_sensitivity_is_worst_case():
    cells = [0, 1, 2]
    onehot = lambda d: np.bincount(np.asarray(d), minlength=3).astype(float)  # noqa: E731
    h = r.histogram_sensitivity()
    for rel in ("add_remove", "replace_one"):
        assert _worst(onehot, cells, rel) == pytest.approx(h.under(rel))
    assert r.histogram_sensitivity("l1").replace_one == 2.0
    assert r.count_sensitivity().under("replace_one") == 1.0


def test_inf_clip_and_arrays():
    assert math.isinf(r.clipped_sum_sensitivity(float("inf")).under("add_remove"))
    s = r.clipped_sum_sensitivity(np.array([1.0, 2.0]))
    np.testing.assert_allclose(s.under("replace_one"), [2.0, 4.0])
    np.testing.assert_allclose(s.scaled(0.5).under("add_remove"), [0.5, 1.0])
    with pytest.raises(ValueError):
        r.clipped_sum_sensitivity(-1.0)
    with pytest.raises(ValueError):
        r.bounded_sum_sensitivity(1.0, 0.0)
