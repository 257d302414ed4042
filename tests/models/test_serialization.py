"""Saving and loading parameters with the run's spend (dpfair_jax.serialization)."""

import math

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax.privacy.accounting import PrivacySpend
from dpfair_jax.serialization import FORMAT, event_from_dict, load_run, save_run


def _params():
    return {"dense": {"kernel": jnp.arange(6.0).reshape(2, 3), "bias": jnp.zeros(3)},
            "scale": (jnp.float32(2.5), jnp.ones(2, jnp.int32))}


def _spend():
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 500)
    return PrivacySpend(epsilon=1.234, delta=1e-5, event=event, relation="replace_one",
                        unit="sensitive_attribute", accountant="rdp", notes="test")


def test_round_trip_keeps_params_spend_and_metadata(tmp_path):
    p = save_run(tmp_path / "run.msgpack", _params(), _spend(), metadata={"lam": 1.0, "seed": 3})
    run = load_run(p, target=_params())
    for a, b in zip(jax.tree_util.tree_leaves(run.params), jax.tree_util.tree_leaves(_params())):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert jax.tree_util.tree_structure(run.params) == jax.tree_util.tree_structure(_params())
    assert run.spend == _spend()  # the event is rebuilt as the same dp-accounting object
    assert run.metadata == {"lam": 1.0, "seed": 3}
    # the rebuilt event accounts to the same epsilon
    acc = dp_accounting.rdp.RdpAccountant()
    acc.compose(run.spend.event)
    ref = dp_accounting.rdp.RdpAccountant()
    ref.compose(_spend().event)
    assert acc.get_epsilon(1e-5) == ref.get_epsilon(1e-5)


def test_without_target_and_without_spend(tmp_path):
    save_run(tmp_path / "a.msgpack", _params())
    run = load_run(tmp_path / "a.msgpack")
    assert run.spend is None and run.metadata == {}
    np.testing.assert_array_equal(run.params["dense"]["kernel"], np.arange(6.0).reshape(2, 3))


def test_bad_files_and_inputs(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_run(tmp_path / "missing.msgpack")
    junk = tmp_path / "junk.msgpack"
    junk.write_bytes(b"not msgpack at all \x00\x01")
    with pytest.raises(ValueError, match="dpfair_jax run file|format"):
        load_run(junk)
    with pytest.raises(ValueError, match="JSON"):
        save_run(tmp_path / "b.msgpack", _params(), metadata={"f": object()})
    with pytest.raises(ValueError, match="refusing"):
        event_from_dict({"module_name": "os", "class_name": "system"})
    assert FORMAT.startswith("dpfair_jax.run")


def test_infinite_epsilon_round_trips(tmp_path):
    spend = PrivacySpend(epsilon=math.inf, delta=0.0, notes="non-private")
    save_run(tmp_path / "np.msgpack", _params(), spend)
    assert math.isinf(load_run(tmp_path / "np.msgpack").spend.epsilon)
