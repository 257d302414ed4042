"""Every algorithm module offers one API, the trio, with the same substance (not only the names):

* ``fit(key, data, hparams, config)`` callable with exactly those four arguments (anything else is
  keyword-only with a default), returning :class:`dpfair_jax.algorithms.FitResult` whose ``spend``
  is ``spend(config, sizes, hparams)``;
* ``spend(config, sizes, hparams) -> PrivacySpend``;
* ``calibrate(config, sizes, target, *, hparams=None) -> hparams`` on the shared target check
  (``accounting.calibration_target``: a target delta other than ``config.delta`` is refused), whose
  result spends at most the target;
* hparams are one kind of pytree everywhere: a frozen dataclass registered with JAX whose every
  field is a leaf (so ``montecarlo.sweep(..., hparams=)`` grids any of them), and the legacy entry
  points (``train``, ``privacy``, ``calibrate_noise``, ``*_privacy``) are gone.
"""

from __future__ import annotations

import dataclasses
import inspect

import jax
import pytest

import dpfair_jax.algorithms as A
from dpfair_jax.privacy.accounting import PrivacySpend

from _trio_cases import CASES

MODULES = list(A.ALGORITHMS)
LEGACY = ("train", "privacy", "calibrate_noise", "synthesis_privacy", "gaussian_privacy", "laplace_privacy",
          "stratified_privacy")


@pytest.mark.parametrize("module", MODULES)
def test_signatures(module):
    mod = getattr(A, module)
    fit = inspect.signature(mod.fit).parameters
    assert list(fit)[:4] == ["key", "data", "hparams", "config"], f"{module}.fit{tuple(fit)}"
    for name, p in list(fit.items())[4:]:
        assert p.kind is p.KEYWORD_ONLY and p.default is not p.empty, f"{module}.fit: {name} must be keyword-only with a default"
    for name in ("key", "data", "hparams", "config"):
        assert fit[name].default is fit[name].empty, f"{module}.fit: {name} must be required"
    spend = inspect.signature(mod.spend).parameters
    assert list(spend) == ["config", "sizes", "hparams"], f"{module}.spend{tuple(spend)}"
    cal = inspect.signature(mod.calibrate).parameters
    assert list(cal) == ["config", "sizes", "target", "hparams"], f"{module}.calibrate{tuple(cal)}"
    assert cal["hparams"].kind is cal["hparams"].KEYWORD_ONLY and cal["hparams"].default is None, \
        f"{module}.calibrate: hparams must be keyword-only, default None"
    for fn in (mod.fit, mod.spend, mod.calibrate):
        assert inspect.getdoc(fn), f"{module}.{fn.__name__} has no docstring"


@pytest.mark.parametrize("module", MODULES)
def test_no_legacy_entry_points(module):
    mod = getattr(A, module)
    left = [name for name in LEGACY if callable(getattr(mod, name, None))]
    assert not left, f"algorithms.{module} still offers {left} beside the trio"


def test_every_module_has_a_case():
    assert {name.split("/")[0] for name in CASES} == set(MODULES)


def _assert_hparams_pytree(hp, where):
    assert dataclasses.is_dataclass(hp) and not isinstance(hp, type), f"{where}: hparams is not a dataclass"
    assert type(hp).__dataclass_params__.frozen, f"{where}: hparams dataclass is not frozen"
    assert not isinstance(hp, tuple), f"{where}: hparams is a NamedTuple"
    leaves, treedef = jax.tree_util.tree_flatten(hp, is_leaf=lambda x: x is None)
    assert not jax.tree_util.treedef_is_leaf(treedef), f"{where}: {type(hp).__name__} is not a registered pytree"
    assert len(leaves) == len(dataclasses.fields(hp)), \
        f"{where}: every hparams field must be a leaf (static choices belong in the config)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_trio_behaves_alike(name):
    case = CASES[name]()
    mod = getattr(A, case.module)
    hp = mod.calibrate(case.config, case.sizes, case.target)
    _assert_hparams_pytree(hp, name)
    recorded = mod.spend(case.config, case.sizes, hp)
    assert isinstance(recorded, PrivacySpend)
    assert recorded.epsilon <= case.target[0] * (1 + 1e-9), (recorded.epsilon, case.target)
    result = mod.fit(jax.random.key(0), case.data, hp, case.config)
    assert type(result) is A.FitResult, f"{name}: fit returned {type(result).__name__}"
    assert result.spend == recorded, f"{name}: fit's recorded spend differs from spend()"
    assert result.report is not None, f"{name}: fit returned no SamplingReport"
    with pytest.raises(ValueError, match="config.delta"):
        mod.calibrate(case.config, case.sizes, (case.target[0], case.target[1] / 2))
    again = mod.calibrate(case.config, case.sizes, case.target, hparams=hp)
    assert type(again) is type(hp)


def test_facade_lists_every_algorithm_module():
    import pathlib

    folder = pathlib.Path(A.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")} | {
        p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert set(MODULES) == modules


#: algorithms whose Poisson padding charges a truncation probability to delta
TRUNCATING = ("dpsgd", "mitigation", "sgda", "fermi", "pfld", "pfld_epoch")


@pytest.mark.parametrize("name", TRUNCATING)
def test_calibrate_takes_the_truncation_charge_out_of_the_target(name):
    """The recorded spend of a calibrated run is within the (epsilon, delta) asked for, the padding's
    truncation charge included (n = 2000: the padded batch is narrower than n, the charge is > 0)."""
    case = CASES[name]()
    mod = getattr(A, case.module)
    target = (1.0, case.target[1])
    sp = mod.spend(case.config, 2000, mod.calibrate(case.config, 2000, target))
    assert sp.epsilon <= target[0] and sp.delta <= target[1], (sp.epsilon, sp.delta)
    assert "truncation" in sp.notes.lower()


@pytest.mark.parametrize("name", ("dpsgd", "sgda"))
def test_epsilon_below_the_rdp_accountants_reach_is_refused_with_the_fix(name):
    case = CASES[name]()
    mod = getattr(A, case.module)
    with pytest.raises(ValueError, match=r"below what the RDP accountant can certify.*accountant='pld'"):
        mod.calibrate(case.config, case.sizes, (1e-3, case.target[1]))
