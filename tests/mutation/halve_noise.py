"""Mutation check: halve one noise path at a time and re-run the tests that should pin its scale.

For every noise path of the library (a Gaussian, Laplace or exponential-mechanism draw, or the
line that sets its scale) :data:`MUTATIONS` holds a one-line textual patch (file, the exact line
as it stands, its replacement) that makes that path add half its noise (for the exponential
mechanism: logits doubled, i.e. the temperature halved), and the default-suite tests that pin the
path's scale. The script copies the working tree (tracked and untracked, non-ignored files) to a
temporary directory, checks that the covering tests pass there unmutated, then for each mutation
patches the copy, runs the covering tests with ``-x -q -p no:cacheprovider`` (the project's
``addopts`` keep ``-m 'not slow'``, so only default-suite tests count), records whether at least
one failed, and restores the file. The result is a Markdown table; ``--out FILE`` writes it there,
or, when FILE holds the markers :data:`BEGIN` and :data:`END`, between them (``docs/noise_paths.md``).
Exit status 0 when every mutation is caught, 1 otherwise, 2 when a patch no longer applies (the
line was edited: update :data:`MUTATIONS`), 3 when the covering tests fail unmutated.

Usage (from the repository root)::

    .venv/bin/python tests/mutation/halve_noise.py --out docs/noise_paths.md
    .venv/bin/python tests/mutation/halve_noise.py --only "fermi:" "sgda:"   # substrings of path names
    .venv/bin/python tests/mutation/halve_noise.py --check   # every patch applies, no tests run
    .venv/bin/python tests/mutation/halve_noise.py --list
    .venv/bin/python tests/mutation/halve_noise.py --jobs 8 --out docs/noise_paths.md  # 8 copies at once

Not collected by pytest: the file name has no ``test_`` prefix (the default ``python_files``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402  (the shared machinery, beside this file)
from _harness import END, ROOT, Mutation  # noqa: E402,F401

BEGIN = "<!-- begin: table written by tests/mutation/halve_noise.py -->"
NS = "tests/privacy/test_noise_scales.py"


M = Mutation
MECH = "dpfair_jax/privacy/mechanisms.py"
AGG = "dpfair_jax/privacy/aggregation.py"
EVT = "dpfair_jax/privacy/events.py"
MEM = "dpfair_jax/privacy/membership.py"
ZCDP = "dpfair_jax/privacy/zcdp.py"
GAUS = "dpfair_jax/privacy/gaussian.py"
PF = "dpfair_jax/algorithms/fermi/theory.py"
SGDA = "dpfair_jax/algorithms/sgda/steps.py"
MMN = "dpfair_jax/privacy/minmax_noise.py"
FERMI = "dpfair_jax/algorithms/fermi/algorithm.py"
FERMI_CFG = "dpfair_jax/algorithms/fermi/config.py"
FERMI_LEDGER = "dpfair_jax/algorithms/fermi/ledger.py"
DPSGD = "dpfair_jax/algorithms/dpsgd/ledger.py"
MIT = "dpfair_jax/algorithms/mitigation/__init__.py"
MIT_PROG = "dpfair_jax/algorithms/mitigation/program.py"
OP = "dpfair_jax/algorithms/output_perturbation.py"
BT = "dpfair_jax/algorithms/budget_tailoring/core.py"
BT1 = "dpfair_jax/algorithms/budget_tailoring/stage1.py"
BT2 = "dpfair_jax/algorithms/budget_tailoring/stage2.py"
ME_COUNTS = "dpfair_jax/algorithms/mean_estimation/groups.py"
ME_CLIPPED = "dpfair_jax/algorithms/mean_estimation/clipped.py"
ME_COINPRESS = "dpfair_jax/algorithms/mean_estimation/coinpress.py"
SYN = "dpfair_jax/algorithms/synthesis/marginals.py"
RED = "dpfair_jax/algorithms/reductions/cgoo.py"
RED_OR = "dpfair_jax/algorithms/reductions/oracles.py"
RED_PB = "dpfair_jax/algorithms/reductions/problem.py"
DEC = "dpfair_jax/analysis/decomposition.py"
RN = "dpfair_jax/privacy/release_noise.py"
OL = "dpfair_jax/privacy/oracle_learner.py"
T_JIN = "tests/algorithms/test_jagielski_in.py"

MUTATIONS: tuple[Mutation, ...] = (
    # ---------------------------------------------------------------- privacy.mechanisms
    M("mechanisms.gaussian_mechanism", MECH,
      "return leaf.astype(dt) + jnp.asarray(std, dt) * jax.random.normal(k, leaf.shape, dt)",
      "return leaf.astype(dt) + 0.5 * jnp.asarray(std, dt) * jax.random.normal(k, leaf.shape, dt)",
      ("tests/privacy/test_mechanisms.py::test_gaussian_mechanism_std_and_mean",)),
    M("mechanisms.laplace_mechanism", MECH,
      "return leaf.astype(dt) + jnp.asarray(scale, dt) * jax.random.laplace(k, leaf.shape, dt)",
      "return leaf.astype(dt) + 0.5 * jnp.asarray(scale, dt) * jax.random.laplace(k, leaf.shape, dt)",
      ("tests/privacy/test_mechanisms.py::test_laplace_mechanism_scale",)),
    M("mechanisms.symmetric_gaussian_noise", MECH,
      "return jnp.asarray(std, dtype) * (upper + jnp.triu(z, 1).T)",
      "return 0.5 * jnp.asarray(std, dtype) * (upper + jnp.triu(z, 1).T)",
      ("tests/privacy/test_mechanisms.py::test_symmetric_gaussian_noise",)),
    M("mechanisms.noisy_sufficient_statistics (X^T X)", MECH,
      "xtx_noisy = xtx + symmetric_gaussian_noise(k_xx, x.shape[1], sigma_xx, dt)",
      "xtx_noisy = xtx + symmetric_gaussian_noise(k_xx, x.shape[1], 0.5 * sigma_xx, dt)",
      (f"{NS}::test_noisy_sufficient_statistics_scales",)),
    M("mechanisms.noisy_sufficient_statistics (X^T y)", MECH,
      "xty_noisy = xty + jnp.asarray(sigma_xy, dt) * jax.random.normal(k_xy, xty.shape, dt)",
      "xty_noisy = xty + 0.5 * jnp.asarray(sigma_xy, dt) * jax.random.normal(k_xy, xty.shape, dt)",
      (f"{NS}::test_noisy_sufficient_statistics_scales",)),
    M("mechanisms.noisy_histogram (draw)", MECH,
      "return counts + std * jax.random.normal(key, counts.shape, jnp.float32)",
      "return counts + 0.5 * std * jax.random.normal(key, counts.shape, jnp.float32)",
      (f"{NS}::test_noisy_histogram_scale",)),
    M("mechanisms.histogram_sensitivity (replace-one)", MECH,
      'return _rel.histogram_sensitivity("l2").under(relation)',
      'return (0.5 if _rel.as_relation(relation) is _rel.REPLACE_ONE else 1.0) * _rel.histogram_sensitivity("l2").under(relation)',
      (f"{NS}::test_noisy_histogram_scale",)),
    M("mechanisms.exponential_mechanism (logits)", MECH,
      "return sign * eps * scores.astype(dt) / (2.0 * sens)",
      "return sign * eps * scores.astype(dt) / (1.0 * sens)",
      ("tests/privacy/test_mechanisms.py::test_exponential_mechanism_probs_closed_form",
       "tests/privacy/test_mechanisms.py::test_exponential_mechanism_frequencies_chi_square")),
    # ---------------------------------------------------------------- privacy.aggregation
    M("aggregation.private_sum / private_mean / dp_aggregate", AGG,
      "std = _noise_std(noise_multiplier, clip_norm, norms.dtype)",
      "std = 0.5 * _noise_std(noise_multiplier, clip_norm, norms.dtype)",
      ("tests/privacy/test_aggregation.py::test_noise_on_zero_gradient_sum_has_configured_std",)),
    M("aggregation.group_weighted_noisy_sums (draw)", AGG,
      "out.append(leaf + _mech.gaussian_noise(kk, leaf.shape, sd, leaf.dtype))",
      "out.append(leaf + _mech.gaussian_noise(kk, leaf.shape, 0.5 * sd, leaf.dtype))",
      ("tests/privacy/test_aggregation.py::test_per_group_noise_std_matches_configured_sigmas",)),
    M("aggregation.group_weighted_private_mean (per-group stds)", AGG,
      "stds = _noise_std(noise_multipliers, clip_norm, jnp.float32)",
      "stds = 0.5 * _noise_std(noise_multipliers, clip_norm, jnp.float32)",
      (f"{NS}::test_group_weighted_private_mean_scale",)),
    M("aggregation.group_weighted_private_mean (clip norm dropped, C = 3)", AGG,
      "stds = _noise_std(noise_multipliers, clip_norm, jnp.float32)",
      "stds = jnp.asarray(noise_multipliers, jnp.float32)",
      (f"{NS}::test_group_weighted_private_mean_scale",)),
    # ---------------------------------------------------------------- accounting (calibration)
    M("accounting.gaussian_sigma_for_rho", ZCDP,
      "return float(sensitivity) / math.sqrt(2.0 * float(rho))",
      "return 0.5 * float(sensitivity) / math.sqrt(2.0 * float(rho))",
      ("tests/privacy/test_accounting.py::test_zcdp_closed_forms",)),
    M("accounting.analytic_gaussian_sigma", GAUS,
      "return _step_out(math.exp(u), lambda s: _delta_meets(s, eps, sens, dlt))",
      "return 0.5 * _step_out(math.exp(u), lambda s: _delta_meets(s, eps, sens, dlt))",
      ("tests/privacy/test_accounting.py::test_analytic_gaussian",)),
    M("accounting.classical_gaussian_sigma", GAUS,
      "return math.sqrt(2.0 * math.log(1.25 / delta)) * float(sensitivity) / float(epsilon)",
      "return 0.5 * math.sqrt(2.0 * math.log(1.25 / delta)) * float(sensitivity) / float(epsilon)",
      (f"{NS}::test_classical_gaussian_sigma_closed_form",)),
    M("accounting.calibrate_noise_multiplier", EVT,
      "return float(z)", "return 0.5 * float(z)",
      ("tests/privacy/test_accounting.py::test_calibration_round_trip",)),
    M("accounting.calibrate_membership_visible (shift doubled = noise halved)", MEM,
      "return float(mu)", "return 2.0 * float(mu)",
      ("tests/privacy/test_accounting.py::test_membership_visible_full_participation_is_the_composed_gaussian",)),
    M("fermi.theory.dpfermi_noise (Theorem 3.3 stds)", PF,
      "return FermiNoise(math.sqrt(factor * var_t), math.sqrt(factor * var_w))",
      "return FermiNoise(0.5 * math.sqrt(factor * var_t), 0.5 * math.sqrt(factor * var_w))",
      ("tests/algorithms/test_fermi.py::test_theorem33_noise_matches_hand_computation",
       "tests/papers/test_paper_formulas.py::test_theorem33_is_the_moments_recipe_with_the_proof_sensitivities")),
    M("fermi.theory.dpsgda_noise (Theorem E.1 stds)", PF,
      "base = 8.0 * steps * math.log(1.0 / delta) / (float(epsilon) ** 2 * n**2)",
      "base = 0.25 * 8.0 * steps * math.log(1.0 / delta) / (float(epsilon) ** 2 * n**2)",
      ("tests/papers/test_paper_formulas.py::test_dpsgda_theorem_e1",)),
    # ---------------------------------------------------------------- DP-SGDA (sgda)
    M("sgda: theta noise std", SGDA,
      "std_theta = _mm.clipped_sum_std(hparams.noise_theta, hparams.clip_theta, fct)",
      "std_theta = 0.5 * _mm.clipped_sum_std(hparams.noise_theta, hparams.clip_theta, fct)",
      ("tests/algorithms/test_sgda.py::test_added_noise_has_calibrated_std",)),
    M("sgda: W noise std", SGDA,
      "std_w = _mm.clipped_sum_std(hparams.noise_w, hparams.clip_w, fct)",
      "std_w = 0.5 * _mm.clipped_sum_std(hparams.noise_w, hparams.clip_w, fct)",
      ("tests/algorithms/test_sgda.py::test_added_noise_has_calibrated_std",)),
    M("minmax_noise.clipped_sum_std (multiplier x clip x factor)", MMN,
      "return jnp.where(z == 0, 0.0, z * jnp.asarray(clip_norm, jnp.float32) * sensitivity_factor)",
      "return jnp.where(z == 0, 0.0, 0.5 * z * jnp.asarray(clip_norm, jnp.float32) * sensitivity_factor)",
      ("tests/algorithms/test_sgda.py::test_added_noise_has_calibrated_std",)),
    M("sgda: theta draw (privacy.mechanisms.gaussian_mechanism)", SGDA,
      "s_th = _mech.gaussian_mechanism(k1, sums.theta, std_theta)",
      "s_th = _mech.gaussian_mechanism(k1, sums.theta, 0.5 * std_theta)",
      ("tests/algorithms/test_sgda.py::test_added_noise_has_calibrated_std",)),
    # ---------------------------------------------------------------- DP-FERMI (fermi)
    M("fermi: sensitivity factor (replace_factor of the run's relation)", FERMI_CFG,
      "return replace_factor(self.relation())", "return 0.5 * replace_factor(self.relation())",
      ("tests/algorithms/test_fermi.py::test_added_noise_has_calibrated_std_scaled_by_lambda",
       "tests/algorithms/test_fermi.py::test_all_features_noise_std")),
    M("fermi: theta noise multiplier", FERMI,
      "noise_theta = jnp.asarray(hparams.noise_theta, jnp.float32) / batch_scale",
      "noise_theta = 0.5 * jnp.asarray(hparams.noise_theta, jnp.float32) / batch_scale",
      ("tests/algorithms/test_fermi.py::test_added_noise_has_calibrated_std_scaled_by_lambda",
       "tests/algorithms/test_fermi.py::test_all_features_noise_std")),
    M("fermi: W noise multiplier", FERMI,
      "noise_w = jnp.asarray(hparams.noise_w, jnp.float32) / batch_scale",
      "noise_w = 0.5 * jnp.asarray(hparams.noise_w, jnp.float32) / batch_scale",
      ("tests/algorithms/test_fermi.py::test_added_noise_has_calibrated_std_scaled_by_lambda",
       "tests/algorithms/test_fermi.py::test_all_features_noise_std")),
    M("fermi.calibrate: sensitive-attribute / shuffle multiplier", FERMI_LEDGER,
      "z = MM.multiplier_for_shift(mu, w)", "z = 0.5 * MM.multiplier_for_shift(mu, w)",
      ("tests/algorithms/test_fermi.py::test_calibrate_and_privacy_round_trip",)),
    M("fermi.calibrate: all-features multiplier", FERMI_LEDGER,
      "z = A.calibrate_noise_multiplier(", "z = 0.5 * A.calibrate_noise_multiplier(",
      ("tests/algorithms/test_fermi.py::test_calibrate_and_privacy_round_trip",)),
    M("fermi: noisy [labels x groups] histogram", FERMI,
      'key, data["y"] * k + data["s"], l * k, noise_multiplier=config.count_noise_multiplier,',
      'key, data["y"] * k + data["s"], l * k, noise_multiplier=0.5 * config.count_noise_multiplier,',
      (f"{NS}::test_fermi_noisy_frequencies_histogram_scale",)),
    # ---------------------------------------------------------------- DP-SGD (dpsgd)
    M("aggregation.noised_mean (dpsgd.fit, mitigation.fit, private_mean): gradient noise", AGG,
      "noisy = noisy_sum(key, clipped_sum, gaussian_std(noise_multiplier, sensitivity, dt))",
      "noisy = noisy_sum(key, clipped_sum, 0.5 * gaussian_std(noise_multiplier, sensitivity, dt))",
      ("tests/algorithms/test_dpsgd.py::test_noise_has_configured_scale_and_generic_pytree_loss",)),
    # ---------------------------------------------------------------- mitigation
    M("mitigation: update noise", MIT_PROG,
      "sensitivity = clip_norm + pclip if separate else clip_norm",
      "sensitivity = 0.5 * (clip_norm + pclip if separate else clip_norm)",
      ("tests/algorithms/test_mitigation.py::test_update_noise_scale",)),
    M("mitigation: group statistics noise", MIT_PROG,
      "stats_std = _agg.gaussian_std(stats_noise_multiplier, STATS_SENSITIVITY, dt)",
      "stats_std = 0.5 * _agg.gaussian_std(stats_noise_multiplier, STATS_SENSITIVITY, dt)",
      ("tests/algorithms/test_mitigation.py::test_private_statistics_noise_scale",)),
    M("mitigation: statistics sensitivity sqrt(3)", MIT_PROG,
      "STATS_SENSITIVITY = math.sqrt(3.0)", "STATS_SENSITIVITY = 0.5 * math.sqrt(3.0)",
      ("tests/algorithms/test_mitigation.py::test_private_statistics_noise_scale",)),
    # ---------------------------------------------------------------- output perturbation
    M("release_noise.gaussian_release (output perturbation's draw)", RN,
      "return value + gaussian_noise(key, value.shape, jnp.asarray(std, value.dtype), value.dtype), std",
      "return value + gaussian_noise(key, value.shape, 0.5 * jnp.asarray(std, value.dtype), value.dtype), std",
      (f"{NS}::test_output_perturbation_perturb_scale",)),
    M("output_perturbation.fit Gaussian release (std z Delta)", OP,
      "released, std = _rn.gaussian_release(key, theta_star, sens, hparams.noise_multiplier)",
      "released, std = _rn.gaussian_release(key, theta_star, sens, 0.5 * hparams.noise_multiplier)",
      (f"{NS}::test_output_perturbation_fit_noise_by_hand",)),
    M("output_perturbation.noise_std (analytic Gaussian, the lower-level helper)", OP,
      "return _acc.analytic_gaussian_sigma(epsilon, delta, sens)",
      "return 0.5 * _acc.analytic_gaussian_sigma(epsilon, delta, sens)",
      (f"{NS}::test_output_perturbation_fit_noise_by_hand",)),
    M("release_noise.minimizer_sensitivity (2L / (n reg))", RN,
      "return 2.0 * lipschitz / (n * reg)",
      "return 1.0 * lipschitz / (n * reg)",
      (f"{NS}::test_output_perturbation_fit_noise_by_hand",)),
    M("release_noise.gaussian_release (std = z Delta)", RN,
      "std = noise_multiplier * sensitivity", "std = 0.5 * noise_multiplier * sensitivity",
      ("tests/algorithms/test_output_perturbation.py::test_fit_adds_the_noise_its_spend_accounts",)),
    M("output_perturbation Monte Carlo of the release (analysis)", OP,
      "noise = gaussian_noise(k, theta_star.shape, std, theta_star.dtype)",
      "noise = gaussian_noise(k, theta_star.shape, 0.5 * std, theta_star.dtype)",
      ("tests/algorithms/test_output_perturbation.py",)),
    # ---------------------------------------------------------------- budget tailoring (paper 000)
    M("budget_tailoring stage 1: std_xx", BT1,
      "std_xx = gaussian_std(sens.gram * ux**2, tau_k / 2.0)  # tau_k / 2 each (lines 8-9)",
      "std_xx = 0.5 * gaussian_std(sens.gram * ux**2, tau_k / 2.0)  # tau_k / 2 each (lines 8-9)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring stage 1: std_xy", BT1,
      "std_xy = gaussian_std(sens.vector * ux * uy, tau_k / 2.0)",
      "std_xy = 0.5 * gaussian_std(sens.vector * ux * uy, tau_k / 2.0)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring stage 1: std_res", BT1,
      "std_res = gaussian_std(sens.bounded * bound, tau_k)",
      "std_res = 0.5 * gaussian_std(sens.bounded * bound, tau_k)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring stage 1: X^T X release (draw)", BT1,
      "xtx_n = xtx + std_xx * z", "xtx_n = xtx + 0.5 * std_xx * z",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring stage 1: X^T y release (draw)", BT1,
      "xty_n = xty + std_xy * z_all[p * p: p * p + p]",
      "xty_n = xty + 0.5 * std_xy * z_all[p * p: p * p + p]",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring stage 1: residual sums release (draw)", BT1,
      "s_sum = clean + std_res * z_all[p * p + p:]  # line 17",
      "s_sum = clean + 0.5 * std_res * z_all[p * p + p:]  # line 17",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring stage 2: gradient std per group", BT2,
      "return gaussian_stds_at_rho(per_release, sens.vector * clip, sens.bounded * clip**2)",
      "return gaussian_stds_at_rho(per_release, 0.5 * sens.vector * clip, sens.bounded * clip**2)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage2_noise_stds_by_hand",)),
    M("budget_tailoring stage 2: loss std per group (fairness)", BT2,
      "return gaussian_stds_at_rho(per_release, sens.vector * clip, sens.bounded * clip**2)",
      "return gaussian_stds_at_rho(per_release, sens.vector * clip, 0.5 * sens.bounded * clip**2)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage2_noise_stds_by_hand",)),
    M("budget_tailoring stage 2: default scaling (noise / n_k)", BT2,
      "gscale, gstd = 1.0 / n_k, grad_std / n_k  # clip, sum, noise, then normalise",
      "gscale, gstd = 1.0 / n_k, 0.5 * grad_std / n_k  # clip, sum, noise, then normalise",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage2_noise_stds_by_hand",)),
    M("budget_tailoring stage 2: gradient release (draw)", BT2,
      "m1 = gsum * rel.gscale + rel.gstd * zg", "m1 = gsum * rel.gscale + 0.5 * rel.gstd * zg",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage2_noise_stds_by_hand",)),
    M("budget_tailoring stage 2: loss release (draw)", BT2,
      "m2 = lsum * rel.lscale + rel.lstd * zl", "m2 = lsum * rel.lscale + 0.5 * rel.lstd * zl",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage2_noise_stds_by_hand",)),
    M("budget_tailoring pooled (DPNoSE) gradient std", BT2,
      "grad_std = gaussian_std_per_step(sens * hp.clip, mu, cfg.steps) * jnp.ones((1,), dtype)",
      "grad_std = 0.5 * gaussian_std_per_step(sens * hp.clip, mu, cfg.steps) * jnp.ones((1,), dtype)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_pooled_noise_std_by_hand",)),
    M("budget_tailoring noisy counts (add/remove)", BT,
      "std = gaussian_std_or_zero(sens, rho_c)",
      "std = 0.5 * gaussian_std_or_zero(sens, rho_c)",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_add_remove_counts_are_noised_and_charged",)),
    M("budget_tailoring clipped-sum sensitivity per unit (stage 2, pooled)", BT,
      "return _Sens(clipped_sum_sensitivity(1.0).under(rel), gram_sensitivity(1.0).under(rel),",
      "return _Sens(0.5 * clipped_sum_sensitivity(1.0).under(rel), gram_sensitivity(1.0).under(rel),",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage2_noise_stds_by_hand",)),
    M("budget_tailoring Gram sensitivity per unit (stage 1 X^T X)", BT,
      "return _Sens(clipped_sum_sensitivity(1.0).under(rel), gram_sensitivity(1.0).under(rel),",
      "return _Sens(clipped_sum_sensitivity(1.0).under(rel), 0.5 * gram_sensitivity(1.0).under(rel),",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    M("budget_tailoring bounded-sum sensitivity per unit (residuals, losses)", BT,
      "bounded_sum_sensitivity(0.0, 1.0).under(rel))",
      "0.5 * bounded_sum_sensitivity(0.0, 1.0).under(rel))",
      ("tests/algorithms/test_budget_tailoring_privacy.py::test_stage1_noise_stds_by_hand",)),
    # ---------------------------------------------------------------- mean estimation (paper 003)
    M("mean_estimation noisy counts", ME_COUNTS,
      "sigma = gaussian_std(delta, jnp.asarray(count_rho, jnp.float32))",
      "sigma = 0.5 * gaussian_std(delta, jnp.asarray(count_rho, jnp.float32))",
      ("tests/algorithms/test_mean_estimation.py::test_noisy_counts_variance",)),
    M("mean_estimation Laplace mean", ME_CLIPPED,
      "noise = laplace_noise(key, sums.shape, scale[:, None])",
      "noise = laplace_noise(key, sums.shape, 0.5 * scale[:, None])",
      ("tests/algorithms/test_mean_estimation.py::test_laplace_mean_noise_variance",)),
    M("mean_estimation Gaussian mean", ME_CLIPPED,
      "noisy = sums + gaussian_noise(key, sums.shape, sigma[:, None])",
      "noisy = sums + gaussian_noise(key, sums.shape, 0.5 * sigma[:, None])",
      ("tests/algorithms/test_mean_estimation.py::test_multivariate_laplace_and_gaussian_noise",)),
    M("mean_estimation Laplace sensitivity factor (replace-one 2C)", ME_CLIPPED,
      "sens = d * rel.replace_factor(relation) * hw",
      "sens = d * 1.0 * hw",
      ("tests/algorithms/test_mean_estimation.py::test_laplace_mean_noise_variance",)),
    M("mean_estimation COINPRESS step noise (draw)", ME_COINPRESS,
      "noise = gaussian_noise(k_t, sums.shape, sigma_sum[:, None])",
      "noise = gaussian_noise(k_t, sums.shape, 0.5 * sigma_sum[:, None])",
      ("tests/algorithms/test_mean_estimation_privacy.py::test_coinpress_add_remove_one_step_noise_radius_and_counts",)),
    M("mean_estimation COINPRESS step std (noise and radius)", ME_COINPRESS,
      "sigma_sum = gaussian_std(factor * C, rho_t)  # noise std on the centred clipped sum",
      "sigma_sum = 0.5 * gaussian_std(factor * C, rho_t)  # noise std on the centred clipped sum",
      ("tests/algorithms/test_mean_estimation_privacy.py::test_coinpress_add_remove_one_step_noise_radius_and_counts",)),
    M("mean_estimation reference-code COINPRESS (reproduction only)", ME_COINPRESS,
      "sigma = gaussian_std(REFERENCE_FACTOR * C / n, jnp.asarray(rhos, jnp.float32)[t])",
      "sigma = 0.5 * gaussian_std(REFERENCE_FACTOR * C / n, jnp.asarray(rhos, jnp.float32)[t])",
      (f"{NS}::test_reference_code_coinpress_noise_by_hand",)),
    # ---------------------------------------------------------------- synthesis
    M("release_noise.zcdp_gaussian_std (synthesis marginal_sigma)", RN,
      "return jnp.asarray(sensitivity, jnp.float32) / jnp.sqrt(2.0 * jnp.asarray(rho, jnp.float32))",
      "return 0.5 * jnp.asarray(sensitivity, jnp.float32) / jnp.sqrt(2.0 * jnp.asarray(rho, jnp.float32))",
      ("tests/algorithms/test_synthesis.py::test_noise_std_matches_sensitivity",)),
    M("synthesis marginal tables (draw)", SYN,
      "noisy = jnp.maximum(grams + sigma * noise, 0.0)",
      "noisy = jnp.maximum(grams + 0.5 * sigma * noise, 0.0)",
      ("tests/algorithms/test_synthesis.py::test_noise_std_matches_sensitivity",)),
    M("release_noise.add_gaussian_for_rho_host (synthesis stratum counts)", RN,
      "z = np.asarray(gaussian_noise(key, value.shape, 1.0), np.float64) * sensitivity",
      "z = np.asarray(gaussian_noise(key, value.shape, 1.0), np.float64) * (0.5 * sensitivity)",
      ("tests/algorithms/test_mean_estimation_privacy.py::test_stratum_proportions_noisy_counts_scale",)),
    # ---------------------------------------------------------------- reductions (paper 002)
    M("reductions Alg. 2 Laplace on released losses (grid)", RED,
      "released = _mech.laplace_mechanism(k_noise, L[m_prev], scale)  # l1 sensitivity K/n",
      "released = _mech.laplace_mechanism(k_noise, L[m_prev], 0.5 * scale)  # l1 sensitivity K/n",
      ("tests/algorithms/test_reductions_privacy.py::test_algorithm2_laplace_noise_scale_on_released_losses",)),
    M("reductions Alg. 2 Laplace scale (K/n)/eps_w", RED,
      'scale = _rn.laplace_scale(loss_sensitivity(n, K, norm="l1"), w_eps)  # K/n: l1 sensitivity',
      'scale = 0.5 * _rn.laplace_scale(loss_sensitivity(n, K, norm="l1"), w_eps)  # K/n: l1 sensitivity',
      ("tests/algorithms/test_reductions_privacy.py::test_algorithm2_laplace_noise_scale_on_released_losses",)),
    M("reductions Alg. 2 Laplace on released losses (regression)", RED,
      "released = _mech.laplace_mechanism(k_noise, clipped_group_losses(prev, x, y, s, K, loss_bound), scale)",
      "released = _mech.laplace_mechanism(k_noise, clipped_group_losses(prev, x, y, s, K, loss_bound), 0.5 * scale)",
      ("tests/algorithms/test_reductions_privacy.py::test_algorithm2_regression_laplace_and_dp_gd_noise_scales",)),
    M("reductions DP-GD oracle noise (draw)", RED_OR,
      "noisy = _mech.gaussian_mechanism(k, grads, std)  # l2 sensitivity 2C (replace-one)",
      "noisy = _mech.gaussian_mechanism(k, grads, 0.5 * std)  # l2 sensitivity 2C (replace-one)",
      ("tests/algorithms/test_reductions_privacy.py::test_algorithm2_regression_laplace_and_dp_gd_noise_scales",)),
    M("reductions dp_gd_noise_std (2C sensitivity)", RED_OR,
      "sens = _rn.normalized_clipped_sum_sensitivity(clip_norm).under(as_relation(relation))",
      "sens = 0.5 * _rn.normalized_clipped_sum_sensitivity(clip_norm).under(as_relation(relation))",
      ("tests/algorithms/test_reductions_privacy.py::test_dp_gd_noise_std_hand_formula_and_dp_accounting",)),
    M("reductions Alg. 1 exponential sampling (Delta_h)", RED_PB,
      "return _rn.lipschitz_image_sensitivity(s, problem.f.lipschitz + G * problem.g.lipschitz)",
      "return _rn.lipschitz_image_sensitivity(0.5 * s, problem.f.lipschitz + G * problem.g.lipschitz)",
      ("tests/algorithms/test_reductions.py::test_exponential_sampling_matches_em_probabilities_chi_square",
)),
    M("reductions LOPT exponential mechanism (sensitivity passed)", RED_OR,
      "sensitivity=jnp.asarray(loss_sens, jnp.float32))",
      "sensitivity=0.5 * jnp.asarray(loss_sens, jnp.float32))",
      ("tests/algorithms/test_reductions.py::test_lopt_private_draw_frequencies_are_the_exponential_mechanism",)),
    M("release_noise.itemized_loss_sensitivity sqrt(K)/n", RN,
      'return (math.sqrt(num_groups) if norm == "l2" else float(num_groups)) * per_coordinate / n',
      'return 0.5 * (math.sqrt(num_groups) if norm == "l2" else float(num_groups)) * per_coordinate / n',
      ("tests/algorithms/test_reductions.py::test_exponential_sampling_matches_em_probabilities_chi_square",)),
    # ---------------------------------------------------------------- Jagielski et al.'s oracle learner
    M("oracle_learner group-label counts Laplace (2/eps)", OL,
      "return _mech.add_laplace(key, counts, _COUNT_L1, relation, eps).reshape((num_groups, 2))",
      "return _mech.add_laplace(key, counts, _COUNT_L1, relation, 2.0 * eps).reshape((num_groups, 2))",
      (f"{T_JIN}::test_count_noise_is_laplace_at_its_scale",
       f"{T_JIN}::test_add_remove_run_draws_at_its_scales_and_records_its_relation")),
    M("oracle_learner Auditor's rate-difference Laplace", OL,
      "return d + _mech.laplace_noise(key, d.shape, scale), scale",
      "return d + _mech.laplace_noise(key, d.shape, 0.5 * scale), scale",
      (f"{T_JIN}::test_auditor_noise_is_laplace_at_its_scale",)),
    M("oracle_learner Learner's exponential mechanism", OL,
      "drawn = _mech.exponential_mechanism(key, scores, epsilon=jnp.where(finite, eps, 1.0), sensitivity=sens)",
      "drawn = _mech.exponential_mechanism(key, scores, epsilon=2.0 * jnp.where(finite, eps, 1.0), sensitivity=sens)",
      (f"{T_JIN}::test_oracle_draw_frequencies_are_the_exponential_mechanism",)),
    # ---------------------------------------------------------------- analysis
    M("analysis.decomposition one-step Monte Carlo noise", DEC,
      'std = zc / batch_size if variant == "sum" else zc',
      'std = 0.5 * (zc / batch_size if variant == "sum" else zc)',
      ("tests/analysis/test_decomposition.py",)),
)


# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    return _harness.main(MUTATIONS, description=__doc__.split("\n\n")[0], begin=BEGIN,
                         prefix="halve_noise_", argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
