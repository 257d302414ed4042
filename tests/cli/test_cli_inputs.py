"""A catalogue of bad ``dpfair`` inputs: each exits with status 2 and one line naming the key the user
gave, before any compute (the experiment never starts)."""

from __future__ import annotations

import math

import pytest

from dpfair_jax import cli
from dpfair_jax.runner import context, registry
from dpfair_jax.runner.registry import Constraint, Experiment


@pytest.fixture(autouse=True)
def _no_compute(monkeypatch):
    """Any run that starts fails the test: the errors below must come first."""
    def started(*args, **kwargs):
        raise AssertionError("the experiment started; the input should have been refused before compute")

    monkeypatch.setattr(context, "run_experiment", started)


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("dpfair: warning: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("dpfair: error: ")
    return lines[0]


CASES = [
    # (experiment, --set item, fragments of the one-line error)
    ("fermi_adult_dp", "lams=[NaN]", ["--set lams=[NaN]", "lams[0] must be a finite number, got NaN"]),
    ("fermi_adult_dp", "lams=[0, Infinity]", ["lams[1] must be finite"]),
    ("fermi_adult_dp", "lams=[\"a\"]", ["lams[0] must be a number"]),
    ("fermi_adult_dp", "lams=[-1.0]", ["lams[0] must be a number >= 0, got -1.0"]),
    ("fermi_adult_dp", "batch_size=0", ["--set batch_size=0", "batch_size must be a whole number > 0, got 0"]),
    ("fermi_adult_dp", "epochs=-1", ["--set epochs=-1", "epochs must be a whole number > 0, got -1"]),
    ("fermi_adult_dp", "epochs=2.5", ["epochs must be a whole number"]),
    ("lens_dpsgd", "seeds=0", ["seeds must be a whole number > 0"]),
    ("lens_dpsgd", "learning_rate=-0.1", ["learning_rate must be a number > 0"]),
    ("lens_dpsgd", "learning_rate=NaN", ["learning_rate must be a finite number, got NaN"]),
    ("fermi_adult_dp", "epsilons=[0.0]", ["epsilons[0] must be a number > 0"]),
    ("fermi_adult_dp", "epsilons=3", ["epsilons must be a JSON list"]),
    ("fermi_adult_dp", "delta=1.5", ["delta must be a number in [0, 1)"]),
    ("lens_dpsgd", "clip_norm=0", ["clip_norm must be a number > 0"]),
    ("fermi_adult_dp", "path=/no/such/adult.csv", ["path", "'/no/such/adult.csv' does not exist"]),
    ("fermi_adult_dp", "seed=-3", ["seed must be a whole number >= 0"]),
    ("kit_accounting", "sigmas=[1.0, -2.0]", ["sigmas[1] must be a number > 0, got -2.0"]),
    ("kit_accounting", "num_seeds=0", ["num_seeds must be a whole number > 0"]),
    ("paper_003", "gamma=1.0", ["gamma must be a number in (0, 1)", "Prop. 8's failure probability"]),
    ("paper_003", "relation=\"swap\"", ["relation must be one of 'add_remove', 'replace_one'"]),
    ("paper_003", "adult_path=\"/no/adult.data\"", ["adult_path", "does not exist"]),
    ("reductions_adult_eo", "public_fraction=0", ["public_fraction must be a number in (0, 1)"]),
    ("reductions_adult_eo", "fermi={\"epochs\": 0}", ["fermi.epochs must be a whole number > 0"]),
    ("lens_dpsgd", "path=\"/no/adult.csv\"", ["does not exist"]),
    ("lens_dpsgd", "noise_multiplier=-1", ["noise_multiplier must be a number >= 0"]),
    ("fermi_adult_dp", "replicates=-3", ["--set replicates=-3", "replicates must be a whole number > 0, got -3"]),
    ("fermi_parkinsons_dp", "replicates=0", ["replicates must be a whole number > 0"]),
    ("fermi_adult_dp", "replicates=2.5", ["replicates must be a whole number"]),
    ("fermi_parkinsons_dp", "path=\"/no/such/parkinsons.csv\"", ["path", "'/no/such/parkinsons.csv' does not exist"]),
]


@pytest.mark.parametrize("name, item, fragments", CASES, ids=[f"{n}:{i}" for n, i, _ in CASES])
def test_bad_set_value_exits_2_naming_the_key(name, item, fragments, tmp_path, capsys):
    assert cli.main(["run", name, "--quick", "--set", item, "--out", str(tmp_path)]) == 2
    line = _error_line(capsys)
    for fragment in fragments:
        assert fragment in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("item", ["replicates=-3", "pilot_replicates=1", "epochs=0", "lr_grid=[-0.1]",
                                  "runs_mean=0.5", "fermi_radius_grid=[0.0]",
                                  "path=\"/no/such/file.csv\""])
def test_range_checked_before_any_data_loads(item, tmp_path, capsys, monkeypatch):
    """The range check comes before the data loader and the run: the loaders are replaced by ones
    that fail the test, and ``run_experiment`` is left real (only the loaders guard it here)."""
    from dpfair_jax.data import tabular

    monkeypatch.undo()  # the real run_experiment: nothing but the range check may stop it

    def loaded(*args, **kwargs):
        raise AssertionError("data loaded before the config was range-checked")

    monkeypatch.setattr(tabular, "load", loaded)
    monkeypatch.setattr(tabular, "load_frame", loaded)
    assert cli.main(["run", "fermi_adult_dp", "--quick", "--set", item, "--out", str(tmp_path)]) == 2
    line = _error_line(capsys)
    assert f"--set {item.split('=')[0]}=" in line, line
    assert not (tmp_path / "runs").exists()


def test_missing_out_for_report_exits_2(tmp_path, capsys):
    assert cli.main(["report", "--out", str(tmp_path / "nowhere")]) == 2
    assert "no such directory" in _error_line(capsys)


def test_processes_must_be_positive(capsys):
    assert cli.main(["run", "kit_accounting", "--quick", "--processes", "0"]) == 2
    assert "--processes must be >= 1" in _error_line(capsys)


# ---------------------------------------------------------------------------------------------
# the checks themselves (registry.resolve_config)


def _exp(configs, constraints=None):
    return Experiment("t_inputs", "kit", "inputs", configs, lambda c, x: None, module="tests.test_cli_inputs",
                      constraints=constraints or {})


def test_defaults_by_key_name_and_declared_constraints():
    exp = _exp({"quick": {"steps": 3, "eps": [1.0, math.inf], "share": 0.5, "name": "a", "opt": None, "val_size": 0.15,
                          "pairs": [[-1.0, 1.0]], "sub": {"lr": 0.1, "n_rows": 4}}},
               {"share": Constraint(0, 1, high_open=True, doc="a share"), "name": Constraint(choices=("a", "b"))})
    ok = registry.resolve_config(exp, "quick", {"eps": [0.5, math.inf], "share": 0, "name": "b", "opt": 3.5,
                                                "pairs": [[-5, 2.0]], "sub": {"lr": 1e-3}, "val_size": 0.3})
    assert ok["share"] == 0 and ok["eps"] == [0.5, math.inf]
    bad = [({"steps": 0}, "steps must be a whole number > 0"),
           ({"steps": True}, "steps must be a whole number"),
           ({"eps": [1.0, math.nan]}, "eps[1] must be a finite number"),
           ({"share": 1.0}, "share must be a number in [0, 1), got 1.0 (a share)"),
           ({"name": "c"}, "name must be one of 'a', 'b'"),
           ({"opt": math.nan}, "opt must be a finite number"),
           ({"pairs": [[1.0, "x"]]}, "pairs[0][1] must be a number"),
           ({"pairs": [[1.0, math.inf]]}, "pairs[0][1] must be finite"),
           ({"sub": {"lr": 0.0}}, "sub.lr must be a number > 0"),
           ({"sub": {"n_rows": -1}}, "sub.n_rows must be a whole number > 0"),
           ({"sub": {"max_rows": -1}}, "sub.max_rows must be a whole number >= 0"),
           ({"val_size": 0.0}, "val_size must be a number > 0, got 0.0")]  # a fraction default: not whole
    for override, message in bad:
        with pytest.raises(ValueError) as err:
            registry.resolve_config(exp, "quick", override)
        key = next(iter(override))
        assert str(err.value).startswith(f"--set {key}=") and message in str(err.value), str(err.value)
    with pytest.raises(ValueError, match="constraints must be a dict"):
        _exp({"quick": {}}, {"x": (0, 1)})


@pytest.mark.parametrize("key, rule", [
    ("batch_size", "a whole number > 0"), ("num_seeds", "a whole number > 0"),
    ("steps_per_checkpoint", "a whole number > 0"),
    ("n_train", "a whole number > 0"), ("learning_rate", "a number > 0"), ("real_lr", "a number > 0"),
    ("thm1_min_epsilon", "a number > 0 (inf allowed)"), ("clip_norms", "a number > 0 (inf allowed)"),
    ("synth_delta", "a number in [0, 1)"), ("batch_frac", "a number in (0, 1]"), ("lams", "a number >= 0"),
    ("split_seed", "a whole number >= 0"), ("replicates", "a whole number > 0"),
    ("exact_epsilon_points", "a whole number > 0"), ("bootstrap", "a whole number > 0"),
    ("fermi_lr_w_grid", "a number > 0"), ("pfld_box_grid", "a number > 0"),
    ("exact_epsilon_range", "a number > 0 (inf allowed)"), ("penalty_clip_norm", "a number > 0 (inf allowed)"),
    ("stats_bound_x", "a number > 0"), ("level", "a number in (0, 1)"), ("rho_split", "a number in (0, 1)"),
    ("max_last_interval_share", "a number in [0, 1]"), ("noise_var", "a number >= 0"),
    ("converge_tol", "a number > 0"), ("runs_mean", "a number >= 1"), ("runs_shape", "a number >= 0 (inf allowed)"),
])
def test_default_constraint_names(key, rule):
    assert registry.default_constraint(key).describe() == rule
    assert registry.default_constraint("slope_pairs") is None and registry.default_constraint("dataset") is None


def test_every_study_config_satisfies_its_constraints():
    """The studies' own quick and full configs pass the checks every ``--set`` value goes through."""
    found = registry.discover()
    assert not found.errors, found.errors
    for exp in found.experiments:
        for size in exp.configs:
            config = registry.resolve_config(exp, size)
            registry.check_config(exp, config, prefix=f"{exp.name} ({size}) ")


def test_parkinsons_csv_variable_naming_no_file_fails_the_run(tmp_path, capsys, monkeypatch):
    """Absent-by-default data skips with a reason; a ``$DPFAIR_PARKINSONS_CSV`` that names no file is
    the user's mistake: the run fails (exit 1) with an error naming the variable and the path."""
    from dpfair_jax.data import tabular

    monkeypatch.undo()
    monkeypatch.setenv(tabular.PARKINSONS_ENV, "/no/such/parkinsons_updrs.data")
    assert cli.main(["run", "fermi_parkinsons_dp", "--quick", "--out", str(tmp_path)]) == 1
    line = _error_line(capsys)
    assert "$DPFAIR_PARKINSONS_CSV='/no/such/parkinsons_updrs.data' names no file" in line, line


def test_run_experiment_range_checks_before_loading(tmp_path, monkeypatch):
    """The programmatic path checks the overrides first too: no loader call, no run folder."""
    from dpfair_jax.data import tabular

    monkeypatch.undo()

    def loaded(*args, **kwargs):
        raise AssertionError("data loaded before the config was range-checked")

    monkeypatch.setattr(tabular, "load", loaded)
    registry.discover()
    with pytest.raises(ValueError, match=r"--set replicates=-3: replicates must be a whole number > 0, got -3"):
        context.run_experiment(registry.get("fermi_adult_dp"), size="quick", overrides={"replicates": -3},
                               root=tmp_path)
    assert not (tmp_path / "runs").exists()
