"""Catalogue of bad inputs across the public API.

Every entry must raise ``ValueError`` on the host, before anything is traced or computed, with a
message naming the offending field. "Before any compute" is checked by running each call under a
``jax.jit``/``jax.random`` spy that fails if the library starts numeric work first (only for the
entries whose validation precedes every array operation by contract). The CLI entries must exit
non-zero with one ``dpfair: error:`` line and no traceback (more CLI cases: tests/cli/test_cli.py).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpfair_jax import cli, models, montecarlo
from dpfair_jax.algorithms import budget_tailoring, dpsgd, fermi, mean_estimation, output_perturbation, reductions
from dpfair_jax.audit import lower_bounds as LB
from dpfair_jax.data import dataset as D
from dpfair_jax.data import synthetic
from dpfair_jax.fairness import metrics
from dpfair_jax.privacy import accounting as A
from dpfair_jax.privacy import aggregation as agg
from dpfair_jax.privacy import clipping, mechanisms, sampling
from _sgd_keywords import dpsgd_fit_kw, dpsgd_spend_kw

KEY = jax.random.key(0)
X = np.ones((6, 2), np.float32)
Y = np.array([0, 1, 0, 1, 0, 1], np.int32)
S = np.array([0, 0, 0, 1, 1, 1], np.int32)
NAN_X = X.copy()
NAN_X[0, 0] = np.nan


def _dataset():
    return D.make_dataset(X, Y, S)


def _dpsgd(**kw):
    args = dict(clip_norm=1.0, noise_multiplier=1.0, learning_rate=0.1, batch_size=2, steps=2)
    args.update(kw)
    data = args.pop("data", (X, Y))
    key = args.pop("key", KEY)
    return dpsgd_fit_kw(key, models.logistic(input_dim=2), {"w": jnp.zeros((2, 1)), "b": jnp.zeros((1,))},
                       data, **args)


def _fermi_config(**kw):
    base = dict(model=models.logistic(input_dim=2), num_groups=2, steps=2, batch_size=2)
    base.update(kw)
    return fermi.FermiConfig(**base).validate(6)


def _cgoo():
    return reductions.CGOO(reductions.max_objective(), reductions.bounded_group_loss(jnp.asarray([1.0, 1.0])), 2)


CATALOGUE = [
    # ---- data
    ("dataset_nan_x", lambda: D.make_dataset(NAN_X, Y, S).validate(), "x"),
    ("dataset_length_mismatch", lambda: D.make_dataset(X, Y[:5], S), "y"),
    ("dataset_group_out_of_range", lambda: D.make_dataset(X, Y, S, num_groups=1), "s"),
    ("dataset_float_groups", lambda: D.make_dataset(X, Y, S.astype(np.float32) + 0.5), "s"),
    ("dataset_label_out_of_range", lambda: D.make_dataset(X, Y + 5, S, num_classes=2), "y"),
    ("synthetic_bad_alpha", lambda: synthetic.dirichlet_log_proportions(KEY, -1.0, 3), "alpha"),
    # ---- accounting
    ("epsilon_zero", lambda: A.calibrate_noise_multiplier(0.0, 1e-5, 0.01, 100), "epsilon"),
    ("epsilon_nan", lambda: A.calibrate_noise_multiplier(float("nan"), 1e-5, 0.01, 100), "epsilon"),
    ("delta_one", lambda: A.dpsgd_epsilon(1.0, 0.01, 100, 1.0), "delta"),
    ("delta_negative", lambda: A.analytic_gaussian_sigma(1.0, -1e-5), "delta"),
    ("sample_rate_above_one", lambda: A.dpsgd_epsilon(1.0, 1.5, 100, 1e-5), "sample_rate"),
    ("steps_zero", lambda: A.dpsgd_epsilon(1.0, 0.1, 0, 1e-5), "steps"),
    ("noise_multiplier_negative", lambda: A.dpsgd_epsilon(-1.0, 0.1, 10, 1e-5), "noise_multiplier"),
    ("rho_negative", lambda: A.zcdp_to_dp(-0.1, 1e-5), "rho"),
    ("accountant_unknown", lambda: A.dpsgd_epsilon(1.0, 0.1, 10, 1e-5, accountant="moments"), "accountant"),
    ("gaussian_rho_zero_sigma", lambda: A.gaussian_rho(1.0, 0.0), "sigma"),
    # ---- mechanisms / sampling / clipping / aggregation
    ("gaussian_negative_std", lambda: mechanisms.gaussian_mechanism(KEY, jnp.zeros(3), -1.0), "std"),
    ("laplace_negative_scale", lambda: mechanisms.laplace_mechanism(KEY, jnp.zeros(3), -1.0), "scale"),
    ("exponential_epsilon_zero",
     lambda: mechanisms.exponential_mechanism(KEY, jnp.zeros(3), epsilon=0.0, sensitivity=1.0), "epsilon"),
    ("exponential_scores_nan",
     lambda: mechanisms.exponential_mechanism(KEY, jnp.array([0.0, jnp.nan]), epsilon=1.0, sensitivity=1.0),
     "scores"),
    ("rbg_key", lambda: mechanisms.gaussian_mechanism(jax.random.key(0, impl="rbg"), jnp.zeros(3), 1.0), "key"),
    ("raw_int_key", lambda: mechanisms.gaussian_mechanism(np.array([1, 2, 3]), jnp.zeros(3), 1.0), "key"),
    ("poisson_rate_zero", lambda: sampling.poisson_batch(KEY, 10, 0.0, 5), "sample_rate"),
    ("shuffle_batch_too_big", lambda: sampling.shuffled_batches(KEY, 4, 8), "batch_size"),
    ("clip_norm_zero", lambda: clipping.clip_per_example(jnp.ones((3, 2)), 0.0), "clip_norm"),
    ("private_mean_denominator_zero",
     lambda: agg.private_mean(KEY, jnp.ones((3, 2)), clip_norm=1.0, noise_multiplier=1.0, denominator=0.0),
     "denominator"),
    ("group_sums_bad_group",
     lambda: agg.group_clipped_sums(jnp.ones((3, 2)), jnp.array([0, 1, 5]), 2, 1.0), "s"),
    ("group_stds_wrong_shape",
     lambda: agg.group_weighted_noisy_sums(KEY, jnp.ones((2, 3)), jnp.ones(3)), "stds"),
    # ---- algorithms
    ("dpsgd_nan_features", lambda: _dpsgd(data=(NAN_X, Y)), "x"),
    ("dpsgd_batch_larger_than_n", lambda: _dpsgd(batch_size=100), "batch_size"),
    ("dpsgd_negative_lr", lambda: _dpsgd(learning_rate=-0.1), "learning_rate"),
    ("dpsgd_unknown_sampling", lambda: _dpsgd(sampling="bernoulli"), "sampling"),
    ("dpsgd_negative_clip", lambda: _dpsgd(clip_norm=-1.0), "clip_norm"),
    ("dpsgd_privacy_bad_delta",
     lambda: dpsgd_spend_kw(1.0, n=100, batch_size=10, delta=0.0, steps=10), "delta"),
    ("fermi_one_group", lambda: _fermi_config(num_groups=1), "num_groups"),
    ("fermi_unknown_unit", lambda: _fermi_config(privacy_unit="group"), "privacy_unit"),
    ("fermi_calibrate_epsilon_negative",
     lambda: fermi.calibrate(_fermi_config(), 6, (-1.0, 1e-5)), "epsilon"),
    ("fermi_negative_lam",
     lambda: fermi.fit(KEY, _dataset(), fermi.FermiHparams(lam=-1.0), _fermi_config()), "lam"),
    ("output_perturbation_epsilon_zero",
     lambda: output_perturbation.noise_std(0.0, 1e-5, 1.0), "epsilon"),
    ("laplace_mean_negative_R",
     lambda: mean_estimation.laplace_mean(KEY, jnp.ones(5), R=-1.0, gamma=0.1, epsilon=1.0), "R"),
    ("budget_tailoring_nan_x",
     lambda: budget_tailoring.fit(KEY, D.make_dataset(NAN_X, Y.astype(np.float32), S, num_classes=0),
                                   budget_tailoring.Hyperparams(), budget_tailoring.Config()), "x"),
    ("budget_tailoring_spend_rho_zero", lambda: budget_tailoring.spend(budget_tailoring.Config(), (3, 3),
                                                                     budget_tailoring.Hyperparams(rho=0.0)), "rho"),
    ("coinpress_nan_x", lambda: mean_estimation.coinpress_mean(KEY, jnp.asarray(NAN_X)), "x"),
    ("coinpress_negative_radius", lambda: mean_estimation.coinpress_mean(KEY, jnp.ones((5, 2)), radius=-1.0), "radius"),
    ("gaussian_mean_rho_zero",
     lambda: mean_estimation.gaussian_mean(KEY, jnp.ones((5, 2)), center=0.0, clip=1.0, rho=0.0), "rho"),
    ("stratified_weights_wrong_shape",
     lambda: mean_estimation.stratified_gaussian_mean(KEY, jnp.ones((6, 2)), jnp.asarray(S), 2, center=0.0, clip=1.0,
                                                     rho=1.0, weights=jnp.asarray([0.5, 0.5, 0.5])), "weights"),
    ("mean_unknown_relation",
     lambda: mean_estimation.gaussian_mean(KEY, jnp.ones((5, 2)), center=0.0, clip=1.0, rho=1.0, relation="swap"),
     "relation"),
    ("exponential_sampling_losses_outside_unit",
     lambda: reductions.exponential_sampling(KEY, jnp.full((3, 2), 2.0), _cgoo(), G=0.0, epsilon=1.0, n=10), "losses"),
    ("exponential_sampling_negative_epsilon",
     lambda: reductions.exponential_sampling(KEY, jnp.full((3, 2), 0.5), _cgoo(), G=0.0, epsilon=-1.0, n=10),
     "epsilon"),
    ("output_perturbation_fit_epsilon_zero",
     lambda: output_perturbation.calibrate(output_perturbation.OutputPerturbationConfig(), 10, (0.0, 1e-5)), "epsilon"),
    ("output_perturbation_fit_no_radius",
     lambda: output_perturbation.fit(KEY, _dataset(), output_perturbation.OutputPerturbationHparams(radius=None),
                                     output_perturbation.OutputPerturbationConfig()), "radius"),
    ("group_weighted_dp_aggregate_no_denominators",
     lambda: agg.group_weighted_dp_aggregate(clip_norm=1.0, noise_multipliers=jnp.ones(2),
                                             group_weights=jnp.ones(2), num_groups=2, key=0), "denominators"),
    ("ols_mixture_negative_noise",
     lambda: synthetic.ols_mixture(KEY, (5, 5), (1.0, 2.0), noise_sd=-1.0), "noise_sd"),
    ("gaussian_mixture_zero_groups", lambda: synthetic.gaussian_mixture(KEY, 10, 0, 1.0), "k"),
    ("sweep_grid_not_1d",
     lambda: montecarlo.sweep(lambda k, a: {"v": a}, KEY, {"a": [[1.0, 2.0]]}, 2), "grid['a']"),
    # ---- metrics
    ("metric_groups_out_of_range",
     lambda: metrics.demographic_parity_pairwise(jnp.array(Y), jnp.array(S) + 3, 2), "s"),
    # ---- Monte Carlo
    ("run_trials_zero_trials", lambda: montecarlo.run_trials(lambda k: 0.0, KEY, 0), "num_trials"),
    ("run_trials_zero_chunk", lambda: montecarlo.run_trials(lambda k: 0.0, KEY, 4, chunk_size=0), "chunk_size"),
    ("sweep_empty_grid_axis",
     lambda: montecarlo.sweep(lambda k, a: {"v": a}, KEY, {"a": []}, 2), "a"),
    ("summarize_bad_confidence", lambda: montecarlo.summarize(np.ones(5), confidence=1.5), "confidence"),
    # ---- audit
    ("clopper_pearson_k_above_n", lambda: LB.clopper_pearson(5, 3), "successes"),
    ("audit_scores_nan", lambda: LB.epsilon_lower_bound_from_scores([0.0, np.nan], [0.0, 1.0]), "scores_in"),
]

# entries known to lack host validation in their (other engineers') modules; kept visible
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("name, call, field", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_bad_input_raises_value_error_naming_field(name, call, field):
    if name in KNOWN_GAPS:
        pytest.xfail(KNOWN_GAPS[name])
    with pytest.raises(ValueError) as err:
        call()
    assert field.lower() in str(err.value).lower(), f"{name}: message {str(err.value)!r} does not name {field!r}"


def test_catalogue_size():
    assert len(CATALOGUE) >= 30
    assert len({c[0] for c in CATALOGUE}) == len(CATALOGUE)


# validation must come before compute: a call that is refused never reaches the noise sampler
@pytest.mark.parametrize("name", ["gaussian_negative_std", "laplace_negative_scale", "dpsgd_negative_clip",
                                  "dpsgd_batch_larger_than_n", "private_mean_denominator_zero"])
def test_refused_before_sampling(name, monkeypatch):
    calls = []
    for fn in ("normal", "laplace", "bernoulli", "uniform", "permutation", "choice"):
        orig = getattr(jax.random, fn)
        monkeypatch.setattr(jax.random, fn, lambda *a, _o=orig, _n=fn, **k: calls.append(_n) or _o(*a, **k))
    call = dict((c[0], c[1]) for c in CATALOGUE)[name]
    with pytest.raises(ValueError):
        call()
    assert calls == [], f"{name} sampled noise ({calls}) before refusing its input"


@pytest.mark.parametrize("argv, fragment", [
    (["run", "kit_accounting", "--quick", "--set", "num_seeds=notanumber"], "num_seeds"),
    (["run", "kit_accounting", "--quick", "--set", "unknown_key=3"], "unknown_key"),
    (["reproduce", "--only", "banana"], "--only"),
    (["audit", "--frobnicate"], "unrecognized"),
])
def test_cli_bad_input_one_line(argv, fragment, capsys, tmp_path):
    code = cli.main(argv + (["--out", str(tmp_path)] if argv[0] == "run" else []))
    assert code != 0
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip() and not ln.startswith("dpfair: warning: ")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("dpfair: error: ") and fragment in lines[0], err
    assert math.isfinite(code)
