"""Every algorithm module offers the same trio: fit(key, data, hparams, config),
spend(config, sizes, hparams) -> PrivacySpend, calibrate(config, sizes, target, ...) -> hparams.
(Each module's own tests check that spend(calibrate(target)) hits the target and that fit's
recorded spend equals spend.)"""

import inspect

import pytest

import dpfair_jax.algorithms as A

SHAPES = {
    "fit": ["key", "data", "hparams", "config"],
    "spend": ["config", "sizes", "hparams"],
    "calibrate": ["config", "sizes", "target"],
}


@pytest.mark.parametrize("module", A.__all__)
def test_module_offers_the_trio(module):
    mod = getattr(A, module)
    for name, params in SHAPES.items():
        fn = getattr(mod, name, None)
        assert callable(fn), f"algorithms.{module} lacks {name}"
        got = list(inspect.signature(fn).parameters)[: len(params)]
        assert got == params, f"algorithms.{module}.{name}{tuple(got)} is not {name}{tuple(params)}"
        assert inspect.getdoc(fn), f"algorithms.{module}.{name} has no docstring"


def test_facade_lists_every_algorithm_module():
    import pathlib

    folder = pathlib.Path(A.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")} | {
        p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    helpers = {"fermi_theory"}  # closed forms beside an algorithm, not an algorithm
    assert set(A.__all__) == modules - helpers
