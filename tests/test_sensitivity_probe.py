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
unclipped, a clip norm doubled before clipping, a replace-one release noised for add/remove) and
asserts the probe fails on each.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpfair_jax import models
from dpfair_jax.data.dataset import make_dataset

from tests import _sensitivity_probe as P

BIG = 1e6


# ------------------------------------------------------------------------------------------------
# data and neighbours
# ------------------------------------------------------------------------------------------------
def base_data(n: int = 6, d: int = 3, groups: int = 2, seed: int = 0, regression: bool = False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ rng.normal(size=d)).astype(np.float32) if regression else (np.arange(n) % 2).astype(np.int32)
    s = (np.arange(n) % groups).astype(np.int32)
    return x, y, s


def adversarial_records(d: int, groups: int, labels: tuple, norm: float = BIG, seed: int = 1):
    """Records at feature norm ``norm`` (two directions), each label end, every group."""
    rng = np.random.default_rng(seed)
    dirs = [np.ones(d) / math.sqrt(d), rng.normal(size=d)]
    dirs[1] /= np.linalg.norm(dirs[1])
    out = []
    for g in range(groups):
        for j, lab in enumerate(labels):
            u = dirs[(g + j) % 2] * (1 if j % 2 == 0 else -1)
            out.append(((norm * u).astype(np.float32), lab, g))
    return out


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
    """World A on ``base`` against world B on each neighbour; ``run(data) -> spend``."""
    a, spend_a = P.run_world(monkeypatch, lambda: run(base))
    checks = []
    for label, data in nbrs:
        b, _ = P.run_world(monkeypatch, lambda: run(data), replay=a)
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
    build: Callable[[], tuple]  # -> (run, base, neighbours, multiplier, sanity)


CASES: list[Case] = []


def case(name: str, relation: str):
    def deco(fn):
        CASES.append(Case(name, relation, fn))
        return fn
    return deco


# --- DP-SGD -------------------------------------------------------------------------------------
def _dpsgd_case(sampling: str, relation: str, per_example: str = "auto", C: float = 0.7, z: float = 1.3):
    from dpfair_jax.algorithms import dpsgd

    x, y, s = base_data()
    n, d = x.shape
    cfg = dpsgd.DPSGDConfig(model=models.logistic(input_dim=d), sampling=sampling, per_example=per_example)
    hp = dpsgd.DPSGDHparams(learning_rate=0.3, clip_norm=C, noise_multiplier=z, batch_size=n, steps=2)

    def run(data):
        xx, yy, ss = data
        return dpsgd.fit(jax.random.key(7), make_dataset(xx, yy, ss, num_groups=2, num_classes=2), hp, cfg).spend

    def multiplier(rel, spend):
        zz = single_gaussian_z(spend)
        # closed form: the declared sensitivity of the clipped sum is C (add/remove), 2C (replace)
        want = C * (1.0 if spend.relation == "add_remove" else 2.0)
        assert math.isclose(float(rel.scale) / zz, want, rel_tol=1e-6), (float(rel.scale) / zz, want)
        assert spend.relation == relation
        return zz

    recs = adversarial_records(d, 2, (0, 1))
    return run, (x, y, s), neighbours(x, y, s, relation, recs), multiplier


for _smp_name, _rel_name in (("poisson", "add_remove"), ("fixed_size", "replace_one"), ("shuffle", "replace_one")):
    case(f"dpsgd[{_smp_name}]", _rel_name)(lambda s=_smp_name, r=_rel_name: _dpsgd_case(s, r))
case("dpsgd[poisson,vmap]", "add_remove")(lambda: _dpsgd_case("poisson", "add_remove", "vmap"))


# --- paper 001 mitigation -----------------------------------------------------------------------
def _mitigation_case(gammas=(1.0, 1.0), penalty_clip_norm=None, stats_every: int = 0, C: float = 0.5):
    from dpfair_jax.algorithms import mitigation as M

    x, y, s = base_data(n=6, d=3, groups=2)
    n, d = x.shape
    z = 1.1
    model = models.logistic(input_dim=d)
    params = model.init(jax.random.key(0), d)

    def run(data):
        xx, yy, ss = data
        ds = make_dataset(xx, yy, ss, num_groups=2, num_classes=2)
        M.train(jax.random.key(2), model, params, ds, gamma1=gammas[0], gamma2=gammas[1], clip_norm=C,
                noise_multiplier=z, stats_noise_multiplier=z, learning_rate=0.5, batch_size=n, steps=2,
                stats_every=stats_every, penalty_clip_norm=penalty_clip_norm)
        return M.privacy(z, z, n=n, batch_size=n, delta=1e-5, steps=2, gamma1=gammas[0],
                         gamma2=gammas[1], stats_every=stats_every)

    def multiplier(rel, spend):
        zz = single_gaussian_z(spend)
        sens = float(rel.scale) / zz
        if rel.shape == (2, 3):  # the [K, 3] group statistics: rows in [0, 1]^3
            assert math.isclose(sens, math.sqrt(3.0), rel_tol=1e-6), sens
        else:  # the clipped sum: C, or C + C_p clipped apart
            assert math.isclose(sens, C + (penalty_clip_norm or 0.0), rel_tol=1e-6), sens
        assert spend.relation == "add_remove"
        return zz

    recs = adversarial_records(d, 2, (0, 1))
    return run, (x, y, s), neighbours(x, y, s, "add_remove", recs), multiplier


case("mitigation[gamma=(1,1)]", "add_remove")(lambda: _mitigation_case())
case("mitigation[gamma=(0.5,0)]", "add_remove")(lambda: _mitigation_case((0.5, 0.0)))
case("mitigation[gamma=(0,2)]", "add_remove")(lambda: _mitigation_case((0.0, 2.0)))
case("mitigation[penalty_clip_norm]", "add_remove")(lambda: _mitigation_case(penalty_clip_norm=0.3))
case("mitigation[stats_every]", "add_remove")(lambda: _mitigation_case(stats_every=1))


# ------------------------------------------------------------------------------------------------
# the probe
# ------------------------------------------------------------------------------------------------
def run_case(c: Case, monkeypatch) -> list[P.Check]:
    run, base, nbrs, multiplier = c.build()
    return probe(monkeypatch, run, base, nbrs, multiplier)


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_releases_move_at_most_their_sensitivity(c, monkeypatch):
    assert_within(run_case(c, monkeypatch))
