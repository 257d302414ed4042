"""Helpers of the sensitivity probe (tests/privacy/test_sensitivity_probe.py).

The probe runs an algorithm's ``fit`` (or the function its fit calls) eagerly
(``jax.disable_jit``) with every noise entry point of :mod:`dpfair_jax.privacy.mechanisms`
replaced by a spy, wherever a ``dpfair_jax`` module binds it:

* value-taking mechanisms (``gaussian_mechanism``, ``laplace_mechanism``, ``add_gaussian``,
  ``add_laplace``, ``noisy_histogram``, the exponential mechanism's logits / sampler) record the
  pre-noise value, the noise scale as drawn and, where the library states one, the sensitivity
  (a ``Sensitivity.under(relation)``, the histogram's relation, the exponential mechanism's
  ``sensitivity=``), and return the value without noise;
* raw draws (``gaussian_noise``, ``laplace_noise``) return a :class:`NoiseProbe`, a zero that
  records the value it is added to (``value + noise`` / ``noise + value``) and its scale. A caller
  that does anything else with a raw draw (slices it, multiplies it) gets a ``TypeError``; such
  a release needs an adapter in the test module.

Two worlds are run with the same key: world A on ``D`` records every release; world B on the
neighbour ``D'`` records its own pre-noise values but *returns world A's released values*, so
every later step of B starts from the same state as A (the adaptive-composition view: release
``t`` is compared at the same history ``r_<t``). Batch membership is made identical by running
Poisson samplers as "every row" (``SAMPLERS``), batch schemes at ``batch_size = n``.

Float64 host arithmetic measures each release's change; see :func:`ratio` for the tolerance.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from dp_accounting import dp_event as E

from dpfair_jax.privacy import mechanisms as _mech

# Poisson samplers run as "every row, in order" (name -> return value for n rows). A sampler that
# is renamed or moved needs one line here; one that is absent is simply not patched.
SAMPLERS: dict[str, Callable[[int, Any], Any]] = {
    "poisson_sample": lambda n, orig: orig.__globals__["PoissonSample"](
        jnp.arange(n, dtype=jnp.int32), jnp.ones((n,), jnp.float32), jnp.asarray(n, jnp.int32),
        jnp.asarray(False)),
}

F32 = float(np.finfo(np.float32).eps)


@dataclasses.dataclass
class Release:
    """One noisy release: ``kind`` is ``"l2"`` (Gaussian), ``"l1"`` (Laplace) or ``"linf"``
    (exponential mechanism scores); ``scale`` the noise std / Laplace scale as drawn (broadcast
    against ``value``), ``sensitivity`` the one the library states at the call (else None)."""

    fn: str
    site: str
    value: np.ndarray
    scale: Any
    kind: str
    sensitivity: Any = None
    shape: tuple = ()


def _shape(tree: Any) -> tuple:
    leaves = jax.tree_util.tree_leaves(tree)
    return tuple(np.shape(leaves[0])) if len(leaves) == 1 else (-1,)


def _host(tree: Any) -> np.ndarray:
    leaves = jax.tree_util.tree_leaves(tree)
    for leaf in leaves:
        if isinstance(leaf, jax.core.Tracer):
            raise TypeError("the sensitivity probe needs concrete values; this release is formed "
                            "under vmap/grad (give the case a path without them)")
    return np.concatenate([np.asarray(l, np.float64).ravel() for l in leaves]) if leaves else np.zeros(0)


def _site() -> str:
    f = sys._getframe(2)
    skip = ("_sensitivity_probe", "tests._sensitivity", "dpfair_jax.privacy.mechanisms")
    while f is not None and f.f_globals.get("__name__", "").startswith(skip):
        f = f.f_back
    return "?" if f is None else f"{f.f_globals.get('__name__', '?')}.{f.f_code.co_name}"


class Recorder:
    """Records releases (world A) or records and replays world A's releases (world B)."""

    def __init__(self, replay: list[Release] | None = None, replay_out: list[Any] | None = None):
        self.releases: list[Release] = []
        self.outputs: list[Any] = []
        self._replay = replay
        self._replay_out = replay_out

    def emit(self, rel: Release, out: Any) -> Any:
        """Store ``rel``; return what the release hands on (``out``, or world A's in replay)."""
        i = len(self.releases)
        self.releases.append(rel)
        if self._replay is None:
            self.outputs.append(out)
            return out
        if i >= len(self._replay):
            raise AssertionError(f"world B made more releases than world A ({rel.fn} at {rel.site})")
        ref = self._replay[i]
        if (ref.fn, ref.site, ref.value.shape) != (rel.fn, rel.site, rel.value.shape):
            raise AssertionError(f"release {i} differs in kind between the worlds: {ref.fn}@{ref.site}"
                                 f"{ref.value.shape} vs {rel.fn}@{rel.site}{rel.value.shape}")
        return self._replay_out[i]


class NoiseProbe:
    """A zero draw that records the value it is added to."""

    __array_ufunc__ = None  # numpy defers to __radd__

    def __init__(self, rec: Recorder, fn: str, site: str, shape: tuple, scale: Any, dtype: Any, kind: str):
        self.rec, self.fn, self.site, self.shape, self.scale, self.dtype, self.kind = (
            rec, fn, site, tuple(shape), scale, dtype, kind)

    def __radd__(self, other: Any) -> Any:
        value = jnp.asarray(other)
        value = jnp.broadcast_to(value, jnp.broadcast_shapes(value.shape, self.shape))
        rel = Release(self.fn, self.site, _host(value), np.asarray(self.scale, np.float64), self.kind,
                      shape=tuple(value.shape))
        return self.rec.emit(rel, value)

    __add__ = __radd__

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise TypeError(f"{self.fn} at {self.site}: the raw draw is used as .{name}, not added to a "
                        "value; this release needs an adapter in the probe")


def _patch_everywhere(monkeypatch, orig: Any, new: Any) -> int:
    """Replace ``orig`` by ``new`` in every loaded ``dpfair_jax`` module that binds it."""
    hits = 0
    for name, mod in list(sys.modules.items()):
        if not name.startswith("dpfair_jax") or mod is None:
            continue
        for attr, val in list(vars(mod).items()):
            if val is orig:
                monkeypatch.setattr(mod, attr, new)
                hits += 1
    return hits


# Adapters for releases formed outside the mechanisms (``(monkeypatch, recorder) -> None``,
# installed after the spies); registered by the test module.
ADAPTERS: list[Callable[[Any, Recorder], None]] = []


def install(monkeypatch, rec: Recorder) -> None:
    """Spies on every noise entry point and the Poisson samplers (see the module doc)."""
    M = _mech

    def gaussian_mechanism(key, value_tree, std):
        rel = Release("gaussian_mechanism", _site(), _host(value_tree), np.asarray(std, np.float64), "l2",
                      shape=_shape(value_tree))
        out = jax.tree_util.tree_map(lambda l: jnp.asarray(l).astype(M._float_dtype(jnp.asarray(l))),
                                     value_tree)
        return rec.emit(rel, out)

    def laplace_mechanism(key, value, scale):
        rel = Release("laplace_mechanism", _site(), _host(value), np.asarray(scale, np.float64), "l1",
                      shape=_shape(value))
        out = jax.tree_util.tree_map(lambda l: jnp.asarray(l).astype(M._float_dtype(jnp.asarray(l))), value)
        return rec.emit(rel, out)

    def add_gaussian(key, value, sensitivity, relation, noise_multiplier):
        sens = np.asarray(sensitivity.under(relation), np.float64)
        std = np.asarray(noise_multiplier, np.float64) * sens
        rel = Release("add_gaussian", _site(), _host(value), std, "l2", sensitivity=sens,
                      shape=_shape(value))
        return rec.emit(rel, jnp.asarray(value).astype(M._float_dtype(jnp.asarray(value))))

    def add_laplace(key, value, sensitivity, relation, epsilon):
        sens = np.asarray(sensitivity.under(relation), np.float64)
        rel = Release("add_laplace", _site(), _host(value), sens / np.asarray(epsilon, np.float64), "l1",
                      sensitivity=sens, shape=_shape(value))
        return rec.emit(rel, jnp.asarray(value).astype(M._float_dtype(jnp.asarray(value))))

    orig_hist = M.noisy_histogram

    def noisy_histogram(key, cells, num_cells, *, noise_multiplier, relation="add_remove", weights=None):
        counts = orig_hist(key, cells, num_cells, noise_multiplier=0.0, relation=relation, weights=weights)
        sens = M.histogram_sensitivity(relation)
        rel = Release("noisy_histogram", _site(), _host(counts),
                      np.asarray(noise_multiplier, np.float64) * sens, "l2", sensitivity=sens,
                      shape=_shape(counts))
        return rec.emit(rel, counts)

    orig_logits = M.exponential_mechanism_logits

    def exponential_mechanism_logits(scores, *, epsilon, sensitivity, minimize=True):
        logits = orig_logits(scores, epsilon=epsilon, sensitivity=sensitivity, minimize=minimize)
        rel = Release("exponential_mechanism", _site(), _host(scores), np.asarray(epsilon, np.float64),
                      "linf", sensitivity=np.asarray(sensitivity, np.float64), shape=tuple(np.shape(scores)))
        return rec.emit(rel, logits)

    orig_em = M.exponential_mechanism

    def exponential_mechanism(key, scores, *, epsilon, sensitivity, minimize=True, return_probs=False):
        rel = Release("exponential_mechanism", _site(), _host(scores), np.asarray(epsilon, np.float64),
                      "linf", sensitivity=np.asarray(sensitivity, np.float64), shape=tuple(np.shape(scores)))
        out = orig_em(key, scores, epsilon=epsilon, sensitivity=sensitivity, minimize=minimize,
                      return_probs=return_probs)
        return rec.emit(rel, out)

    def gaussian_noise(key, shape, std, dtype=jnp.float32):
        return NoiseProbe(rec, "gaussian_noise", _site(), shape, std, dtype, "l2")

    def laplace_noise(key, shape, scale, dtype=jnp.float32):
        return NoiseProbe(rec, "laplace_noise", _site(), shape, scale, dtype, "l1")

    spies = {"gaussian_mechanism": gaussian_mechanism, "laplace_mechanism": laplace_mechanism,
             "add_gaussian": add_gaussian, "add_laplace": add_laplace, "noisy_histogram": noisy_histogram,
             "exponential_mechanism_logits": exponential_mechanism_logits,
             "exponential_mechanism": exponential_mechanism, "gaussian_noise": gaussian_noise,
             "laplace_noise": laplace_noise}
    for name, spy in spies.items():
        _patch_everywhere(monkeypatch, getattr(M, name), spy)
    for name, every_row in SAMPLERS.items():
        for modname, mod in list(sys.modules.items()):
            if not modname.startswith("dpfair_jax") or mod is None:
                continue
            orig = vars(mod).get(name)
            if callable(orig) and getattr(orig, "__module__", "").startswith("dpfair_jax"):
                monkeypatch.setattr(mod, name, (lambda o, f: lambda key, n, *a, **k: f(int(n), o))(orig, every_row))
    for adapter in ADAPTERS:
        adapter(monkeypatch, rec)


def run_world(monkeypatch, fn: Callable[[], Any], replay: Recorder | None = None) -> tuple[Recorder, Any]:
    """Run ``fn`` eagerly with the spies; ``replay``: world A's recorder (world B)."""
    rec = Recorder(None if replay is None else replay.releases, None if replay is None else replay.outputs)
    with monkeypatch.context() as mp:
        install(mp, rec)
        with jax.disable_jit():
            out = fn()
    return rec, out


# ------------------------------------------------------------------------------------------------
# declared sensitivities and the comparison
# ------------------------------------------------------------------------------------------------
def event_multipliers(event: Any) -> dict[str, set[float]]:
    """The Gaussian and Laplace noise multipliers of a ``DpEvent`` (walked recursively)."""
    out: dict[str, set[float]] = {"gaussian": set(), "laplace": set()}

    def walk(ev):
        if isinstance(ev, E.GaussianDpEvent):
            out["gaussian"].add(float(ev.noise_multiplier))
        elif isinstance(ev, E.LaplaceDpEvent):
            out["laplace"].add(float(ev.noise_multiplier))
        elif isinstance(ev, E.ComposedDpEvent):
            for e in ev.events:
                walk(e)
        elif hasattr(ev, "event"):
            walk(ev.event)

    walk(event)
    return out


@dataclasses.dataclass
class Check:
    """One release compared between the worlds: ``moved`` (in units of the declared sensitivity:
    ``||(v_B - v_A) / scale|| * multiplier``) must be <= 1 within ``slack``."""

    label: str
    site: str
    moved: float
    slack: float

    @property
    def ok(self) -> bool:
        return bool(self.moved <= 1.0 + self.slack)

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.label} @ {self.site}: moved {self.moved:.6g} x declared"


def compare(a: Recorder, b: Recorder, multiplier: Callable[[Release], float], label: str) -> list[Check]:
    """Each release of world B against world A's.

    ``multiplier(release)`` is the noise multiplier the library's accounting charges for the
    release (a Gaussian's ``z``: std = z x sensitivity; a Laplace's ``scale / sensitivity``; for
    the exponential mechanism the spy's stated sensitivity is used directly). The declared
    sensitivity is thus ``scale / multiplier`` per entry (heterogeneous scales: the release is as
    private as ``||delta / scale||`` says), never re-derived here.

    Slack: the values are float32 sums of a few rows; their rounding is at most a few ulps of the
    largest magnitude involved, so ``slack = 64 eps32 (|v_A| + |v_B|)_max / declared`` (relative to
    the declared sensitivity); it is below 1e-4 for every case here and far from the factor-2
    changes a wrong sensitivity makes.
    """
    assert len(a.releases) == len(b.releases), (len(a.releases), len(b.releases))
    assert a.releases, f"{label}: no release was recorded (the spies saw no noise)"
    checks = []
    for ra, rb in zip(a.releases, b.releases):
        diff = rb.value - ra.value
        mag = np.max(np.abs(ra.value) + np.abs(rb.value)) if diff.size else 0.0
        if ra.kind == "linf":
            # the stated sensitivity, times the factor by which the spend's epsilon exceeds the
            # call's (1 unless the spend charges for a too-small stated sensitivity)
            sens = float(np.max(ra.sensitivity)) * float(multiplier(ra))
            moved = float(np.max(np.abs(diff))) / sens
            slack = 64 * F32 * mag / sens
        else:
            z = float(multiplier(ra))
            sc = np.asarray(ra.scale, np.float64)
            scale = np.full(diff.shape, float(sc)) if sc.ndim == 0 else np.broadcast_to(sc, ra.shape).ravel()
            if np.all(scale == 0):  # a noiseless part (e.g. an unused update): must not move at all
                checks.append(Check(label, ra.site, 0.0 if not np.any(diff) else math.inf, 0.0))
                continue
            if np.any(scale <= 0):
                raise AssertionError(f"{label}: a release at {ra.site} drew with scale 0 in part; "
                                     "give the case positive noise multipliers")
            r = diff / scale * z
            moved = float(np.linalg.norm(r, 1 if ra.kind == "l1" else 2))
            slack = 64 * F32 * mag * float(np.max(z / scale))
        checks.append(Check(label, ra.site, moved, slack))
    return checks


def compare_zcdp(a: Recorder, b: Recorder, rho: float, label: str, epsilon: float | None = None) -> list[Check]:
    """The whole run against a zCDP (or pure-DP) spend: each Gaussian release costs
    ``||(v_B - v_A) / std||^2 / 2``, each Laplace release ``||(v_B - v_A) / scale||_1`` in epsilon
    (``eps^2 / 2`` in zCDP); their total must be at most the ``rho`` the spend charges (or, with
    ``epsilon`` and Laplace releases only, at most ``epsilon``). One check, ``moved`` =
    ``sqrt(total / rho)`` (``total / epsilon``), so a sensitivity off by a factor c reads c.
    Slack as in :func:`compare`, summed over the releases."""
    assert len(a.releases) == len(b.releases) and a.releases, (len(a.releases), len(b.releases))
    total_rho, total_eps, slack, sites = 0.0, 0.0, 0.0, set()
    for ra, rb in zip(a.releases, b.releases):
        diff = rb.value - ra.value
        mag = np.max(np.abs(ra.value) + np.abs(rb.value)) if diff.size else 0.0
        sc = np.asarray(ra.scale, np.float64)
        scale = np.full(diff.shape, float(sc)) if sc.ndim == 0 else np.broadcast_to(sc, ra.shape).ravel()
        sites.add(ra.site.rsplit(".", 1)[-1])
        if np.all(scale == 0):
            if np.any(diff):
                return [Check(label, ra.site, math.inf, 0.0)]
            continue
        r = diff / scale
        if ra.kind == "l1":
            e = float(np.sum(np.abs(r)))
            total_eps += e
            total_rho += e * e / 2.0
        else:
            total_rho += float(np.sum(r * r)) / 2.0
        slack += 64 * F32 * mag * float(np.max(1.0 / scale))
    if epsilon is not None:
        return [Check(label, ",".join(sorted(sites)), total_eps / epsilon, slack / epsilon)]
    return [Check(label, ",".join(sorted(sites)), math.sqrt(total_rho / rho), slack / math.sqrt(2 * rho))]
