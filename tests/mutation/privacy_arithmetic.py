"""Mutation check: one-line edits to the privacy arithmetic, each a genuine privacy bug.

Beside :mod:`halve_noise` (which halves each noise draw), :data:`MUTATIONS` holds one-line edits
to the arithmetic around the noise: sensitivity factors, composed counts, sampling rates, zCDP and
(epsilon, delta) conversions, the cost of private selection, noisy counts, and clipping and ghost
norms. Each edit makes a spend understate what its code path spends, or a release exceed its
declared sensitivity, while the code still compiles and runs. For each, the default-suite tests
that must catch it (whole files or node ids, each set under about a minute on one core).

The machinery is :mod:`_harness` (shared with ``halve_noise.py``): the working tree is copied to a
temporary directory, the covering tests are checked to pass there unmutated, then each edit is
applied in turn and its covering tests are re-run with ``-x -q -p no:cacheprovider`` (the
project's ``addopts`` keep ``-m 'not slow'``, so only default-suite tests count). The Markdown
table goes between the markers :data:`BEGIN` and ``<!-- end: table -->`` of ``--out FILE``
(``docs/privacy_mutants.md``). Exit status 0 when every edit is caught, 1 otherwise, 2 when a
patch no longer applies (the line was edited: update :data:`MUTATIONS`), 3 when the covering tests
fail unmutated.

Usage (from the repository root)::

    .venv/bin/python tests/mutation/privacy_arithmetic.py --out docs/privacy_mutants.md
    .venv/bin/python tests/mutation/privacy_arithmetic.py --only sensitivity conversion  # categories
    .venv/bin/python tests/mutation/privacy_arithmetic.py --only "sgda:"   # substrings of names
    .venv/bin/python tests/mutation/privacy_arithmetic.py --check   # every patch applies, no tests run
    .venv/bin/python tests/mutation/privacy_arithmetic.py --list
    .venv/bin/python tests/mutation/privacy_arithmetic.py --jobs 8 --out docs/privacy_mutants.md

``--only`` takes substrings of mutant names or whole category names (:data:`CATEGORIES`). On a
small machine run batches: ``--only ... --merge --out docs/privacy_mutants.md`` keeps the table's
rows of the mutants not in the batch; ``--from-log LOG ...`` rebuilds the table from the progress
lines of earlier runs' output (e.g. batches stopped before they wrote it), running nothing.
Not collected by pytest: the file name has no ``test_`` prefix (the default ``python_files``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _harness  # noqa: E402  (the shared machinery, beside this file)
from _harness import Mutation  # noqa: E402

BEGIN = "<!-- begin: table written by tests/mutation/privacy_arithmetic.py -->"
CATEGORIES = ("sensitivity", "count", "rate", "conversion", "selection", "noisy_count", "clipping")

REL = "dpfair_jax/privacy/relations.py"
REPL = "dpfair_jax/privacy/replace_rdp.py"
OL = "dpfair_jax/privacy/oracle_learner.py"
EVT = "dpfair_jax/privacy/events.py"
MEM = "dpfair_jax/privacy/membership.py"
ZCDP = "dpfair_jax/privacy/zcdp.py"
GAUS = "dpfair_jax/privacy/gaussian.py"
SMP = "dpfair_jax/privacy/sampling.py"
SEL = "dpfair_jax/privacy/selection.py"
CLIP = "dpfair_jax/privacy/clipping/__init__.py"
CLIP_VMAP = "dpfair_jax/privacy/clipping/vmap.py"
CLIP_GHOST = "dpfair_jax/privacy/clipping/ghost.py"
GHOST = "dpfair_jax/privacy/ghost.py"
BND = "dpfair_jax/privacy/bounding.py"
SGDA = "dpfair_jax/algorithms/sgda/ledger.py"
DPSGD = "dpfair_jax/algorithms/dpsgd/ledger.py"
MIT = "dpfair_jax/algorithms/mitigation/__init__.py"
MIT_PROG = "dpfair_jax/algorithms/mitigation/program.py"
FL = "dpfair_jax/algorithms/fermi/ledger.py"
PE = "dpfair_jax/algorithms/pfld_epoch/__init__.py"
OP = "dpfair_jax/algorithms/output_perturbation.py"
BTL = "dpfair_jax/algorithms/budget_tailoring/ledger.py"
MEL = "dpfair_jax/algorithms/mean_estimation/ledger.py"
SYN = "dpfair_jax/algorithms/synthesis/__init__.py"
RPB = "dpfair_jax/algorithms/reductions/problem.py"
RIF = "dpfair_jax/algorithms/reductions/interface.py"
RTH = "dpfair_jax/algorithms/reductions/theory.py"
RN = "dpfair_jax/privacy/release_noise.py"

T_ACC = "tests/privacy/test_accounting.py"
T_REL = "tests/privacy/test_relations.py"
T_SEL = "tests/privacy/test_selection.py"
T_CLIP = "tests/privacy/test_clipping.py"
T_BND = "tests/privacy/test_bounding.py"
T_PA = "tests/privacy/test_privacy_arithmetic.py"


def _ids(file: str, *names: str) -> tuple[str, ...]:
    return tuple(f"tests/{file}::{n}" for n in names)


T_SMP = _ids("privacy/test_sampling.py", "test_truncation_helpers_against_scipy", "test_accounting_for_each_scheme")
T_DPSGD = _ids("algorithms/test_dpsgd.py", "test_privacy_matches_dp_accounting")
T_DPSGD_CLIP = _ids("algorithms/test_dpsgd.py", "test_clipped_grad_sum_matches_manual_per_example_clipping",
                    "test_ghost_norms_equal_vmap_path")
T_GHOST = _ids("privacy/test_ghost.py", "test_dense_sequence_norms_match_vmap", "test_dense_weighted_grad_matches_weighted_vmap_sum",
               "test_embedding_norms_with_repeated_tokens", "test_conv2d_norms_match_vmap",
               "test_kit_cnn_first_layer_and_total_norm")
T_MIT = _ids("algorithms/test_mitigation.py", "test_privacy_composes_both_gaussians", "test_privacy_is_the_event_written_from_the_run",
             "test_privacy_truncation_at_the_trained_padding", "test_spend_of_calibrate_hits_the_target")
T_MIT_NOISE = _ids("algorithms/test_mitigation.py", "test_private_statistics_noise_scale", "test_update_noise_scale")
T_PE = _ids("algorithms/test_pfld_epoch.py", "test_calibrate_hits_target_and_spend_is_the_event",
            "test_spend_is_dp_accounting_on_the_run_written_out")
T_OP = _ids("algorithms/test_output_perturbation.py", "test_sensitivity_bounds_replace_one", "test_fit_calibrates_analytic_gaussian",
            "test_spend_of_calibrate_hits_the_target", "test_fit_adds_the_noise_its_spend_accounts",
            "test_fit_sweeps_multiplier_and_reg_under_jit_and_vmap", "test_traced_sensitivity_is_the_hand_formula")
T_BTP = _ids("algorithms/test_budget_tailoring_privacy.py", "test_add_remove_counts_are_noised_and_charged",
             "test_ledger_and_spend_state_what_is_spent")
T_MEP = _ids("algorithms/test_mean_estimation_privacy.py", "test_add_remove_spend_includes_the_default_counts",
             "test_gaussian_mean_add_remove_noise_and_counts", "test_coinpress_add_remove_one_step_noise_radius_and_counts",
             "test_explicit_count_rho_and_global_estimators", "test_stratum_proportions_noisy_counts_scale")
T_SYN = _ids("algorithms/test_synthesis.py", "test_noise_std_matches_sensitivity", "test_spend_of_calibrate_hits_the_target",
             "test_fit_spends_what_spend_records")
T_REDP = _ids("algorithms/test_reductions_privacy.py", "test_algorithm2_ledger_is_lemma_a4_written_out",
              "test_algorithm2_laplace_noise_scale_on_released_losses",
              "test_algorithm2_regression_laplace_and_dp_gd_noise_scales",
              "test_dp_gd_noise_std_hand_formula_and_dp_accounting", "test_private_cgoo_game_claims_the_ledger")
T_DPF = _ids("privacy/test_default_path_spends.py", "test_dpsgd_shuffle_spend_is_composed_gaussians",
             "test_fermi_all_features_shuffle_is_composed_gaussians",
             "test_fermi_fixed_size_keeps_sampling_without_replacement")
T_ST = _ids("algorithms/test_fermi_api.py", "test_sgda_spend_and_calibrate")
T_NS = _ids("privacy/test_noise_scales.py", "test_noisy_histogram_scale")
T_REPL = _ids("privacy/test_replace_rdp.py", "test_replace_pair_matches_adaptive_quadrature",
              "test_closed_forms_at_q_one_and_q_zero_and_the_convexity_cap",
              "test_event_walk_sums_the_composition_and_refuses_the_unknown")
T_JIN = _ids("algorithms/test_jagielski_in.py", "test_sensitivities_bound_every_neighbour_and_are_attained",
             "test_noise_scales_follow_the_released_counts", "test_bounds_against_independent_composition")
T_F = "tests/algorithms/test_fermi.py"
F_ROUND = f"{T_F}::test_calibrate_and_privacy_round_trip"
F_DPA = f"{T_F}::test_all_features_epsilon_matches_dp_accounting_called_directly"
F_SA = f"{T_F}::test_sensitive_attribute_spend_is_membership_visible_not_subsampled"
F_FREQ = f"{T_F}::test_noisy_group_frequencies_are_charged_and_exclusive"


def _acc(*names: str) -> tuple[str, ...]:
    """Targeted tests of privacy/test_accounting.py (the whole file runs in file order, several minutes
    on a loaded machine before reaching a late test)."""
    return _ids("privacy/test_accounting.py", *names)


def M(category: str, path: str, file: str, old: str, new: str, *tests: str | tuple[str, ...]) -> Mutation:
    assert category in CATEGORIES, category
    flat = [t for group in tests for t in ((group,) if isinstance(group, str) else group)]
    return Mutation(path, file, old, new, tuple(dict.fromkeys(flat)), category)


MUTATIONS: tuple[Mutation, ...] = (
    # ======================================================================== sensitivity factors
    M("sensitivity", "relations.replace_factor: replace-one factor 2 -> 1", REL,
      "return 1.0 if as_relation(relation) is ADD_REMOVE else 2.0",
      "return 1.0 if as_relation(relation) is ADD_REMOVE else 1.0",
      T_REL, T_SMP, T_DPSGD),
    M("sensitivity", "relations.clipped_sum_sensitivity: replace-one 2C -> C (scalar)", REL,
      "return Sensitivity(c if c.ndim else float(c), 2.0 * c if c.ndim else 2.0 * float(c))",
      "return Sensitivity(c if c.ndim else float(c), 2.0 * c if c.ndim else float(c))",
      T_REL, T_REDP),
    M("sensitivity", "relations.histogram_sensitivity: replace-one L2 sqrt(2) -> 1", REL,
      'return Sensitivity(1.0, math.sqrt(2.0) if norm == "l2" else 2.0)',
      'return Sensitivity(1.0, 1.0 if norm == "l2" else 2.0)',
      T_REL, T_NS),
    M("sensitivity", "replace_rdp._curve: replace-one shift 1/z -> 1/(2z) (the add/remove shift halved)", REPL,
      "    m = 1.0 / z", "    m = 0.5 / z", T_REPL),
    M("sensitivity", "replace_rdp._curve: unsampled replace-one alpha (2/z)^2 / 2 -> alpha (1/z)^2 / 2", REPL,
      "        return tuple(a * 2.0 / z**2)", "        return tuple(a * 0.5 / z**2)", T_REPL),
    M("sensitivity", "oracle_learner.cell_weights: the anchor's weight K-1 -> 1", OL,
      "    return jnp.concatenate([(k - 1) / m[..., :1, :], 1.0 / m[..., 1:, :]], axis=-2)",
      "    return jnp.concatenate([1.0 / m[..., :1, :], 1.0 / m[..., 1:, :]], axis=-2)", T_JIN),
    M("sensitivity", "oracle_learner.score_sensitivity: the error's 1/n dropped under the example unit", OL,
      '    err = 1.0 / n if unit == "example" else 0.0', "    err = 0.0", T_JIN),
    M("sensitivity", "relations.gram_sensitivity: replace-one sqrt(2) u^2 -> u^2 (scalar)", REL,
      "math.sqrt(2.0) * u2 if u2.ndim else math.sqrt(2.0) * float(u2))",
      "math.sqrt(2.0) * u2 if u2.ndim else float(u2))",
      T_REL),
    M("sensitivity", "relations.bounded_sum_sensitivity: replace-one b - a -> max(|a|, |b|)", REL,
      "rep = hi - lo", "rep = np.maximum(np.abs(lo), np.abs(hi))",
      T_REL, T_BND),
    M("sensitivity", "relations.bounded_sum_sensitivity: add/remove max(|a|, |b|) -> |b|", REL,
      "add = np.maximum(np.abs(lo), np.abs(hi))", "add = np.abs(hi)",
      T_REL, T_BND),
    M("sensitivity", "clipping.per_layer_sensitivity: first layer's C only", CLIP_VMAP,
      "return jnp.sqrt(sum(jnp.square(c) for c in leaves))",
      "return jnp.sqrt(sum(jnp.square(c) for c in leaves[:1]))",
      T_CLIP),
    M("sensitivity", "clipping.ClippedGradSum traced sensitivity: replace factor dropped", CLIP,
      "return clip_norm * _rel.replace_factor(relation)", "return clip_norm * 1.0",
      T_PA, T_CLIP),
    M("sensitivity", "sgda: effective multiplier without the relation's factor", SGDA,
      "return float(config.sensitivity_factor) / _rel.replace_factor(_relation(config))",
      "return float(config.sensitivity_factor)",
      T_ST),
    M("sensitivity", "dpsgd.spend: replace-one multiplier not halved (sensitivity 2C)", DPSGD,
      "z = float(noise_multiplier) / spec.sensitivity_factor", "z = float(noise_multiplier)",
      T_DPSGD, T_DPF),
    M("sensitivity", "release_noise.minimizer_sensitivity (output perturbation): 2L/(n reg) -> L/(n reg)", RN,
      "return 2.0 * lipschitz / (n * reg)", "return lipschitz / (n * reg)",
      T_OP),
    M("sensitivity", "output_perturbation traced Lipschitz constant (squared loss) halved", OP,
      "lip = 2.0 * r * (r * config.label_bound * jnp.sqrt(2.0 / reg) + config.label_bound)",
      "lip = r * (r * config.label_bound * jnp.sqrt(2.0 / reg) + config.label_bound)",
      T_OP),
    M("sensitivity", "release_noise.itemized_loss_sensitivity (reductions): l1 K/n -> sqrt(K)/n", RN,
      'return (math.sqrt(num_groups) if norm == "l2" else float(num_groups)) * per_coordinate / n',
      'return (math.sqrt(num_groups) if norm == "l2" else math.sqrt(num_groups)) * per_coordinate / n',
      T_REDP),
    M("sensitivity", "reductions spend: Laplace weight epsilon with the l2 sensitivity", RIF,
      'w_eps = _rn.laplace_epsilon(loss_sensitivity(n, config.problem.num_groups, norm="l1"), scale) if scale > 0 else 0.0',
      'w_eps = _rn.laplace_epsilon(loss_sensitivity(n, config.problem.num_groups, norm="l2"), scale) if scale > 0 else 0.0',
      T_REDP),
    M("sensitivity", "mitigation: statistics sensitivity sqrt(3) -> sqrt(2)", MIT_PROG,
      "STATS_SENSITIVITY = math.sqrt(3.0)", "STATS_SENSITIVITY = math.sqrt(2.0)",
      T_MIT_NOISE),
    # ======================================================================== composed counts
    M("count", "replace_rdp._walk: the first event of a composition dropped", REPL,
      "        return None if any(p is None for p in parts) else np.sum(parts, axis=0) if parts else np.zeros(a.shape)",
      "        return None if any(p is None for p in parts) else np.sum(parts[1:], axis=0) if parts else np.zeros(a.shape)",
      T_REPL),
    M("count", "oracle_learner_bounds: zCDP charges one round fewer", OL,
      "    rho = ec ** 2 / 2.0 + steps * (eo ** 2 / 8.0 + ea ** 2 / 2.0)",
      "    rho = ec ** 2 / 2.0 + (steps - 1) * (eo ** 2 / 8.0 + ea ** 2 / 2.0)", T_JIN),
    M("noisy_count", "oracle_learner_bounds: the count release left out of basic composition", OL,
      '        "basic": ec + steps * rnd,', '        "basic": steps * rnd,', T_JIN),
    M("count", "accounting.dpsgd_event: steps - 1 composed", EVT,
      "return dp_accounting.SelfComposedDpEvent(step, steps)",
      "return dp_accounting.SelfComposedDpEvent(step, max(1, steps - 1))",
      _acc("test_event_structure")),
    M("count", "accounting.shuffled_participations: one epoch fewer", EVT,
      "return math.ceil(steps / spe)", "return max(1, math.ceil(steps / spe) - 1)",
      T_DPF, T_ACC),
    M("count", "accounting.participation_distribution (Poisson): steps - 1 trials", MEM,
      "logp = stats.binom.logpmf(ks, steps, float(sample_rate))",
      "logp = stats.binom.logpmf(ks, max(1, steps - 1), float(sample_rate))",
      _acc("test_membership_visible_delta_matches_dp_accounting_pld")),
    M("count", "accounting.effective_noise_multiplier: the largest multiplier, not the composition", EVT,
      "return float(np.sum(z**-2.0) ** -0.5)", "return float(np.max(z))",
      _acc("test_several_mechanisms_equal_effective_gaussian")),
    M("count", "accounting: PLD simplification drops the self-composition count", EVT,
      "return None if z is None else (0.0 if z == 0 else z / math.sqrt(event.count))",
      "return None if z is None else (0.0 if z == 0 else z)",
      T_PA, T_ACC),
    M("count", "accounting.ZcdpLedger.total: counts of repeated charges dropped", ZCDP,
      "return self._broadcast(_fsum([r * c for _, r, c in self._history]))",
      "return self._broadcast(_fsum([r for _, r, c in self._history]))",
      _acc("test_ledger")),
    M("count", "sgda.spend: steps - 1 in the event", SGDA,
      'event = _acc.dpsgd_event(zt_e, m / n, T, sampling="poisson" if poisson else "without_replacement",',
      'event = _acc.dpsgd_event(zt_e, m / n, max(1, T - 1), sampling="poisson" if poisson else "without_replacement",',
      T_ST),
    M("count", "sgda.spend (shuffle): half the epochs", SGDA,
      'mu, config.delta, _acc.participation_distribution(T, "shuffle", steps_per_epoch=spe))',
      'mu, config.delta, _acc.participation_distribution(T, "shuffle", steps_per_epoch=2 * spe))',
      T_ST),
    M("count", "dpsgd.spend: steps - 1 in the event", DPSGD,
      "event = _acc.dpsgd_event(z, spec.sample_rate, steps, sampling=spec.sampling,",
      "event = _acc.dpsgd_event(z, spec.sample_rate, max(1, steps - 1), sampling=spec.sampling,",
      T_DPSGD),
    M("count", "fermi.spend (all features): steps - 1 in the event", FL,
      "float(noise_theta), config.batch_size / n, config.steps, sampling=config.accountant_sampling(),",
      "float(noise_theta), config.batch_size / n, config.steps - 1, sampling=config.accountant_sampling(),",
      F_ROUND, F_DPA, T_DPF),
    M("count", "pfld_epoch.run_event: steps - 1 in the event", PE,
      "steps = A.dpsgd_event(float(noise_theta), config.batch_size / n, config.steps(n))",
      "steps = A.dpsgd_event(float(noise_theta), config.batch_size / n, max(1, config.steps(n) - 1))",
      T_PE),
    M("count", "pfld_epoch.run_event: epochs - 1 violation releases", PE,
      "config.epochs)", "max(1, config.epochs - 1))",
      T_PE),
    M("count", "mitigation.spend: floor instead of ceil in the number of statistics releases", MIT,
      "releases = -(-steps // stats_every)", "releases = max(1, steps // stats_every)",
      T_MIT),
    M("count", "mitigation.spend: truncation charged for one step", MIT,
      "lambda e: _sampling.truncation_delta(n, q, width, steps, e))",
      "lambda e: _sampling.truncation_delta(n, q, width, 1, e))",
      T_MIT),
    M("count", "sampling.truncation_delta: steps dropped", SMP,
      "return float(min(1.0, (1.0 + math.exp(min(float(epsilon), 700.0))) * steps * p))",
      "return float(min(1.0, (1.0 + math.exp(min(float(epsilon), 700.0))) * p))",
      T_SMP),
    M("count", "reductions advanced composition: k eps (e^eps - 1) -> eps (e^eps - 1)", RTH,
      "return e * math.sqrt(2.0 * k * math.log(1.0 / delta_bar)) + k * e * math.expm1(e)",
      "return e * math.sqrt(2.0 * k * math.log(1.0 / delta_bar)) + e * math.expm1(e)",
      T_REDP),
    M("count", "reductions advanced composition: delta of one round, not k", RTH,
      "return advanced_composition_epsilon(epsilon, k, delta_bar), k * d + float(delta_bar)",
      "return advanced_composition_epsilon(epsilon, k, delta_bar), d + float(delta_bar)",
      T_REDP),
    M("count", "mean_estimation ledger: first COINPRESS step not charged", MEL,
      "for t, rt in enumerate(r):", "for t, rt in enumerate(r[1:]):",
      T_MEP),
    # ======================================================================== sampling rates
    M("rate", "sampling.accounting_for: q = b/(n+1)", SMP,
      "q = batch_size / n", "q = batch_size / (n + 1)",
      T_SMP, T_DPSGD),
    M("rate", "sgda.spend: q = m/(n+1) in the event", SGDA,
      'event = _acc.dpsgd_event(zt_e, m / n, T, sampling="poisson" if poisson else "without_replacement",',
      'event = _acc.dpsgd_event(zt_e, m / (n + 1), T, sampling="poisson" if poisson else "without_replacement",',
      T_ST),
    M("rate", "fermi.spend (all features): q halved in the event", FL,
      "float(noise_theta), config.batch_size / n, config.steps, sampling=config.accountant_sampling(),",
      "float(noise_theta), config.batch_size / (2 * n), config.steps, sampling=config.accountant_sampling(),",
      F_ROUND, F_DPA, T_DPF),
    M("rate", "pfld_epoch.run_event: q = b/(n+1)", PE,
      "steps = A.dpsgd_event(float(noise_theta), config.batch_size / n, config.steps(n))",
      "steps = A.dpsgd_event(float(noise_theta), config.batch_size / (n + 1), config.steps(n))",
      T_PE),
    M("rate", "mitigation.spend: q = b/(n+1)", MIT,
      "q = batch_size / n", "q = batch_size / (n + 1)",
      T_MIT),
    # ======================================================================== conversions
    M("conversion", "accounting zCDP -> DP: Bun-Steinke 2 sqrt(rho L) -> sqrt(rho L)", ZCDP,
      "bs = rho + 2.0 * math.sqrt(rho * L)", "bs = rho + math.sqrt(rho * L)",
      _acc("test_zcdp_closed_forms")),
    M("conversion", "accounting zCDP -> DP: CKS log(alpha) term doubled", ZCDP,
      "val = a * rho + (log_inv_delta + am1 * np.log1p(-1.0 / a) - np.log(a)) / am1",
      "val = a * rho + (log_inv_delta + am1 * np.log1p(-1.0 / a) - 2.0 * np.log(a)) / am1",
      _acc("test_cks_matches_dp_accounting_rdp_of_zcdp_event")),
    M("conversion", "accounting.pure_dp_to_rho: eps^2/2 -> eps^2/4", ZCDP,
      "return float(epsilon) ** 2 / 2.0", "return float(epsilon) ** 2 / 4.0",
      _acc("test_zcdp_closed_forms")),
    M("conversion", "accounting.gaussian_rho: D^2/(2 s^2) -> D^2/(4 s^2)", ZCDP,
      "return float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2)",
      "return float(sensitivity) ** 2 / (4.0 * float(sigma) ** 2)",
      _acc("test_zcdp_closed_forms")),
    M("conversion", "accounting.dp_to_rho (Bun-Steinke): L + eps -> L + 2 eps", ZCDP,
      "rho_bs = (math.sqrt(L + eps) - math.sqrt(L)) ** 2",
      "rho_bs = (math.sqrt(L + 2.0 * eps) - math.sqrt(L)) ** 2",
      _acc("test_zcdp_closed_forms", "test_dp_to_rho_round_trip")),
    M("conversion", "accounting Balle-Wang delta: second term's e^eps doubled", GAUS,
      "lb = float(epsilon + special.log_ndtr(-a - b))",
      "lb = float(epsilon + math.log(2.0) + special.log_ndtr(-a - b))",
      _acc("test_analytic_gaussian"), T_OP),
    M("conversion", "budget_tailoring spend: epsilon converted from rho / 4", BTL,
      "return PrivacySpend(epsilon=float(zcdp_to_dp(float(rho), delta, method=CONVERSION)), delta=delta,",
      "return PrivacySpend(epsilon=float(zcdp_to_dp(float(rho) / 4, delta, method=CONVERSION)), delta=delta,",
      "tests/algorithms/test_budget_tailoring.py::test_privacy_conversion_matches_closed_form", T_BTP),
    # ======================================================================== selection cost
    M("selection", "selection.repeat_and_select_event: mean number of runs halved", SEL,
      "return dp_accounting.dp_event.RepeatAndSelectDpEvent(event, float(law.mean), float(law.shape))",
      "return dp_accounting.dp_event.RepeatAndSelectDpEvent(event, float(law.mean) / 2.0, float(law.shape))",
      _ids("privacy/test_selection.py", "test_selection_epsilon_is_theorem_2"), T_SEL),
    M("selection", "selection.selection_epsilon: the selection's cost omitted (one run)", SEL,
      "full = event if law is None else repeat_and_select_event(event, law)",
      "full = event",
      _ids("privacy/test_selection.py", "test_selection_epsilon_is_theorem_2"), T_SEL),
    M("selection", "selection: truncated negative binomial mean halved (more runs drawn than accounted)", SEL,
      "return shape * (1.0 - gamma) / (gamma * (1.0 - gamma**shape))",
      "return shape * (1.0 - gamma) / (2.0 * gamma * (1.0 - gamma**shape))",
      T_SEL),
    M("selection", "selection.selection_epsilon: the run's curve under add/remove whatever the relation", SEL,
      "acc = _rdp_accountant(relation)", 'acc = _rdp_accountant("add_remove")',
      _ids("privacy/test_selection.py", "test_selection_epsilon_under_replace_one_is_theorem_2_on_that_relations_curve"), T_SEL),
    # ======================================================================== noisy counts
    M("noisy_count", "fermi: noisy histogram charged at twice its multiplier", FL,
      "return dp_accounting.GaussianDpEvent(float(config.count_noise_multiplier))",
      "return dp_accounting.GaussianDpEvent(2.0 * float(config.count_noise_multiplier))",
      F_ROUND, F_DPA, F_FREQ, T_DPF),
    M("noisy_count", "fermi: noisy histogram not composed (membership-visible)", FL,
      'return 1.0 / config.count_noise_multiplier if config.group_frequencies == "noisy" else 0.0',
      "return 0.0",
      F_ROUND, F_SA, F_FREQ),
    M("noisy_count", "accounting membership-visible: the fixed release (counts) dropped", MEM,
      "mu = np.sqrt(ks * float(mu_step) ** 2 + float(extra_mu) ** 2)",
      "mu = np.sqrt(ks * float(mu_step) ** 2)",
      _acc("test_membership_visible_full_participation_is_the_composed_gaussian")),
    M("noisy_count", "mitigation: per-step statistics Gaussian not composed", MIT,
      "rel = (1.0, zs / z) if include_statistics and not stats_every else (1.0,)",
      "rel = (1.0,)",
      T_MIT),
    M("noisy_count", "mitigation: full-data statistics charged at twice their multiplier", MIT,
      "[event, dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(zs), releases)])",
      "[event, dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0 * zs), releases)])",
      T_MIT),
    M("noisy_count", "mean_estimation ledger: noisy group counts charged at half", MEL,
      "c = float(c)", "c = 0.5 * float(c)",
      T_MEP),
    M("noisy_count", "synthesis.spend: stratum counts charged at half", SYN,
      'ledger.charge("stratum_counts", count_rho)', 'ledger.charge("stratum_counts", 0.5 * count_rho)',
      T_SYN),
    M("noisy_count", "release_noise.add_gaussian_for_rho_host (stratum counts): std 1/sqrt(4 rho), not 1/sqrt(2 rho)",
      RN, "return value + z / math.sqrt(2 * rho)", "return value + z / math.sqrt(4 * rho)",
      T_SYN, T_MEP),
    # ======================================================================== clipping and ghost norms
    M("clipping", "clipping.per_example_norms: squared norm (sqrt dropped)", CLIP_VMAP,
      "return jnp.sqrt(sum(_leaf_sq_norms(leaf) for leaf in leaves))",
      "return sum(_leaf_sq_norms(leaf) for leaf in leaves)",
      T_CLIP, T_DPSGD_CLIP),
    M("clipping", "clipping._scale_rows: sqrt of the clip factor", CLIP_VMAP,
      "return leaf * f", "return leaf * jnp.sqrt(f)",
      _ids("privacy/test_privacy_arithmetic.py", "test_clip_per_example_against_numpy_with_rows_below_and_above_the_bound"),
      T_CLIP, T_DPSGD_CLIP),
    M("clipping", "clipping.clip_per_layer: squared layer norms", CLIP_VMAP,
      "norms = [jnp.sqrt(_leaf_sq_norms(leaf)) for leaf in leaves]",
      "norms = [_leaf_sq_norms(leaf) for leaf in leaves]",
      T_CLIP),
    M("clipping", "clipping.glm_per_example_norms: intercept part dropped", CLIP_GHOST,
      "total = x_sq * g_sq + (g_sq if fit_intercept else 0.0)", "total = x_sq * g_sq",
      T_CLIP, T_DPSGD_CLIP),
    M("clipping", "clipping._sq_rows: largest logit gradient, not the sum over outputs", CLIP_GHOST,
      "return jnp.sum(jnp.square(a), axis=-1) if a.ndim > 1 else jnp.square(a)",
      "return jnp.max(jnp.square(a), axis=-1) if a.ndim > 1 else jnp.square(a)",
      T_CLIP),
    M("clipping", "ghost.dense_norm_sq: bias part dropped", GHOST,
      "return jnp.sum(jnp.square(a), 1) * g_sq + (g_sq if bias else 0.0)",
      "return jnp.sum(jnp.square(a), 1) * g_sq",
      _ids("privacy/test_privacy_arithmetic.py", "test_dense_ghost_norms_against_numpy_per_example_gradients"), T_CLIP, T_GHOST),
    M("clipping", "ghost.gram_norm_sq (Gram): norm returned, not its square", GHOST,
      "return jnp.sum(aa * gg, axis=(1, 2))", "return jnp.sqrt(jnp.sum(aa * gg, axis=(1, 2)))",
      _ids("privacy/test_privacy_arithmetic.py", "test_dense_ghost_norms_against_numpy_per_example_gradients"), T_GHOST),
    M("clipping", "ghost.bias_norm_sq: mean over positions instead of the sum", GHOST,
      "s = jnp.sum(g.reshape(g.shape[0], -1, g.shape[-1]), axis=1)",
      "s = jnp.mean(g.reshape(g.shape[0], -1, g.shape[-1]), axis=1)",
      T_GHOST),
    M("clipping", "ghost.total_norms: first layer only", GHOST,
      "return jnp.sqrt(sum(jnp.asarray(s) for s in norm_sqs))",
      "return jnp.sqrt(jnp.asarray(norm_sqs[0]))",
      _ids("privacy/test_privacy_arithmetic.py", "test_total_norms_combine_every_layer"), T_GHOST),
    M("clipping", "bounding.norm_clip_divisor: clipped to 2C", BND,
      "return jnp.maximum(1.0, norms / safe_clip_norm(clip_norm, size, dt))",
      "return jnp.maximum(1.0, norms / (2.0 * safe_clip_norm(clip_norm, size, dt)))",
      T_BND, T_OP),
    M("clipping", "bounding.clip_to_interval: upper bound doubled", BND,
      "return jnp.clip(values, lower, upper)", "return jnp.clip(values, lower, 2.0 * upper)",
      T_BND),
    M("clipping", "mitigation (separate clipping): penalty part left unclipped", MIT_PROG,
      "cfp = _clip.clip_factors(_clip.per_example_norms(pen), pclip, _clip.example_size(pen)) * mask",
      "cfp = mask",
      _ids("algorithms/test_mitigation.py", "test_noiseless_update_is_within_its_sensitivity_under_large_penalties"), T_MIT_NOISE),
)


def main(argv: list[str] | None = None) -> int:
    return _harness.main(MUTATIONS, description=__doc__.split("\n\n")[0], begin=BEGIN,
                         prefix="privacy_arithmetic_", first_column="mutant", show_category=True,
                         argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
