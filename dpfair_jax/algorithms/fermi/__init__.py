"""DP-FERMI (paper 004, Algorithm 1): differentially private fair learning with the ERMI regularizer.

Lowy, Gupta, Razaviyayn (ICLR 2023). Solves the min-max form (eq. 4/6, Theorem 3.2)::

    min_theta max_{W in W}  (1/n) sum_i [ loss(theta; x_i, y_i) + lam * omega_i * psi_i(theta, W_{c_i}) ]

with noisy DP-SGDA (:func:`dpfair_jax.algorithms.sgda.dpsgda`). ``psi_i`` is
:func:`dpfair_jax.fairness.ermi.psi` on the soft predictions ``F(x_i, theta)``: ``[1 - p, p]`` for a
one-logit model, the softmax otherwise (binary or multi-class targets, any number of groups).

* Demographic parity (``fairness="dp"``): one ``W [k, l]``, group frequencies ``p_S``.
* Equalized odds (``fairness="eo"``, Appendix B eq. 5 / F.2.4): one ``W_y`` per label, each
  example uses ``W_{y_i}`` and ``p_{S|Y}(. | y_i)``; the plain average over examples equals eq. 5
  with its ``p_Y(y)`` weights (``eo_weighted=False``: the unweighted sum of the authors' code,
  per-example weight ``omega_i = 1 / p_Y(y_i)``).

Privacy units (``privacy_unit``; default ``"all_features"``, the unit under which subsampling
amplifies and DP-SGD is a baseline of the same unit):

* ``"sensitive_attribute"`` (the paper's Definition 2.2: neighbours differ in one ``s_i``, the
  substitution relation, recorded as ``relation="replace_one"``): only the part of ``psi_i`` that
  depends on ``s_i``, ``2 sum_j W_{s_i j} F_j / sqrt(p_S(s_i))``, is private. Its per-example
  gradients (in theta and W) are clipped to ``C_theta``, ``C_w``, summed, noised and scaled by
  ``lam``; the task loss and the s-free part ``-sum W^2 F - 1`` use exact gradients. Those exact
  gradients are *public but membership-revealing*: a record with a large task gradient shows in
  the output whether it was in the batch, so amplification by subsampling does not apply. In each
  step where a record is sampled, its s-dependent part is a plain Gaussian release at sensitivity
  ``2C`` (one clipped vector replaced by another). :func:`spend` and :func:`calibrate` therefore
  account this unit exactly as the membership-visible mixture
  ``delta(eps) = sum_k Bin(k; T, q) delta_G(eps; sqrt(k) mu)``
  (:func:`dpfair_jax.privacy.accounting.membership_visible_delta`; ``mu`` the per-step shift over
  the noise of both updates; shuffled batches: ``k`` = the number of epochs). Accounting it as a
  Poisson-subsampled Gaussian (the paper's Theorem 3.3 and earlier versions of this kit)
  understates epsilon several-fold; the audit keeps that as the planted bug
  ``"subsampled_accounting"``. At ``lam = 0`` nothing is noised and ``s`` is unused: such a run is
  not DP-SGD but a non-private model that ignores ``s``.
* ``"all_features"`` (Theorem 3.3's second part, Algorithm 2's view): the whole per-example
  gradient of ``loss + lam * psi`` is clipped in theta (``C_theta``) and ``lam * grad_W psi`` in W
  (``lam * C_w``); nothing unnoised depends on the batch, so Poisson sampling is accounted as the
  Poisson-subsampled Gaussian under add/remove (``q = batch_size / n``, ``n`` treated as public),
  fixed-size batches as sampling without replacement under replace-one (sensitivity ``2C``), and
  shuffled batches under replace-one *without* amplification: a record is in at most one batch per
  epoch, so the run is at most ``epochs`` composed Gaussians (the membership-visible curve at a
  point mass, exact; sampling-without-replacement accounting is not proven for shuffling).
  :func:`attribute_spend` accounts this run (Poisson) for a change of one ``s_i`` instead
  (:mod:`dpfair_jax.privacy.attribute`); :func:`theorem33_attribute_event` is the paper's
  amplified record of a run for that change, for comparison.

Group frequencies (``config.group_frequencies``): ``P_S`` (DP), ``P_{S|Y}`` and the ``1/p_Y``
weights (EO) enter every example's term, so computing them from the private data (the paper, notes
II.6) lets one record rescale every sampled term. Default ``"noisy"``: they come from one noisy
``[labels x groups]`` histogram (:func:`dpfair_jax.privacy.mechanisms.noisy_histogram`, noise
multiplier ``config.count_noise_multiplier`` under the run's relation, clamped at 1 count), charged
to the spend by :func:`spend`. ``"public"``: the caller passes public ``p_s`` (and ``p_y`` where
needed) to :func:`fit`; nothing is charged.

Corrected behaviour (default) vs the paper (notes II.5, II.10, II.11):

* W-noise scales with ``lam`` (``lam * V_t``); Algorithm 1 line 6 adds ``V_t`` unscaled, which is
  private only for ``lam <= 1`` (``variant="paper"`` reproduces it).
* Clipping acts on each example's gradient; ``clip_mode="official_batch"`` reproduces the public
  code (per-sample gradients divided by the batch size before clipping, i.e. threshold ``m C``)
  while its noise stays calibrated to ``C`` (NOT private as claimed; for comparison only).
* The full ERMI with ``F = [1 - p, p]``; ``ermi_form="one_cell"`` keeps only ``W[0, 1]`` (the
  code's logistic path, notes II.10-2).
* ``W_0 = 0`` (Algorithm 1); ``w_init="randn"`` is the code's standard-normal start.
* ``P_S`` is computed from the private ``s`` without noise in the paper (notes II.6); here it is a
  noisy, charged estimate by default, or public (see "Group frequencies").

The kit's trio: ``fit(key, data, hparams, config) -> FitResult`` (params the model; ``W`` and
the run's flags in its diagnostics), ``spend(config, n, hparams) -> PrivacySpend`` (at
``config.delta``) and ``calibrate(config, n, (epsilon, config.delta), *, hparams=None) -> hparams``
(noise multipliers set, ``noise_w = config.w_relative * noise_theta``).
Noise calibration: :func:`calibrate` (the kit's accountant, both noisy updates composed each step,
sampling as run), or the paper's closed forms in :mod:`dpfair_jax.algorithms.fermi.theory`
(``dpfermi_noise``: Theorem 3.3 / D.2; ``official_dpfermi_calibration``: the authors' code) turned
into :func:`fit`'s multipliers by :func:`theorem33_multipliers`, so the two can be compared.

Modules: :mod:`.config` (:class:`FermiConfig`, :class:`FermiHparams`, :func:`check_hparams`),
:mod:`.algorithm` (:func:`fit`: Algorithm 1 on DP-SGDA, the ERMI terms split by privacy unit, the
group frequencies), :mod:`.ledger` (:func:`spend`, :func:`calibrate`,
:func:`theorem33_multipliers`) and :mod:`.theory` (the paper's closed forms); the test-split
evaluation in :mod:`dpfair_jax.fairness.evaluation`.
"""

from dpfair_jax.algorithms.fermi.algorithm import fit, init_w, task_loss
from dpfair_jax.algorithms.fermi.config import (  # noqa: F401  (the choices, as fermi.UNITS etc.)
    CLIP_MODES,
    ERMI_FORMS,
    FAIRNESS,
    GROUP_FREQUENCIES,
    UNITS,
    VARIANTS,
    W_INITS,
    FermiConfig,
    FermiHparams,
    check_hparams,
)
from dpfair_jax.algorithms.fermi import theory  # noqa: F401  (fermi.theory, the paper's closed forms)
from dpfair_jax.algorithms.fermi.ledger import (
    attribute_change_rdp,
    attribute_spend,
    calibrate,
    spend,
    theorem33_attribute_event,
    theorem33_multipliers,
)

__all__ = [
    "FermiConfig",
    "FermiHparams",
    "check_hparams",
    "fit",
    "spend",
    "calibrate",
    "init_w",
    "theorem33_multipliers",
    "theorem33_attribute_event",
    "attribute_change_rdp",
    "attribute_spend",
    "task_loss",
]
