"""The examples run as written (slow: each compiles its training programs): the README's
quickstart, and examples/nnx_module.py at a tiny size."""

import pathlib
import runpy

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quickstart_runs(capsys):
    runpy.run_path(str(ROOT / "examples" / "quickstart.py"), run_name="__main__")
    out = capsys.readouterr().out
    # both private runs are evaluated on the held-out split and state their spend (at the target)
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith(("DP-SGD ", "DP-FERMI "))}
    assert set(lines) == {"DP-SGD", "DP-FERMI"}, out
    for ln in lines.values():
        assert "test error" in ln and "DP violation" in ln and "epsilon 1.00 (add_remove, unit example)" in ln
    assert "abs_error" in out  # the Monte Carlo sweep's summary


@pytest.mark.slow
def test_nnx_module_example_trains_puts_back_saves_and_loads(tmp_path, capsys):
    """examples/nnx_module.py at a tiny size: the module holds the trained parameters, the saved
    file gives them (and the spend) back into a fresh module, the spend is within the target."""
    import numpy as np
    from flax import nnx

    ns = runpy.run_path(str(ROOT / "examples" / "nnx_module.py"), run_name="example")
    out = ns["main"](n=400, d=3, hidden=4, batch_size=32, steps=10, epsilon=2.0, path=tmp_path / "run.msgpack")
    result, run, test = out["result"], out["run"], out["test"]
    assert (tmp_path / "run.msgpack").is_file() and "same outputs: True" in capsys.readouterr().out
    assert result.spend.epsilon <= 2.0 * (1 + 1e-6) and run.spend == result.spend
    assert run.metadata["steps"] == 10
    trained = nnx.to_pure_dict(nnx.state(out["net"], nnx.Param))
    for a, b in zip(jax.tree_util.tree_leaves(trained), jax.tree_util.tree_leaves(result.params)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(out["fresh"](test.x)), np.asarray(out["net"](test.x)))
