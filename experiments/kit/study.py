"""The kit's own experiments: checks of its primitives against closed forms.

``kit_accounting``
  1. Claim: Gaussian noise (``privacy.mechanisms.gaussian_mechanism``): over a grid of noise
     stds ``sigma`` and many seeds, the mean of the per-seed sample variances matches ``sigma^2``
     within 3 standard errors (the SE is the seed-to-seed standard deviation over sqrt(#seeds)).
     Written with ``ctx.map_chunks`` over (sigma, seed block), so interrupting and rerunning
     resumes. If ``privacy.mechanisms`` does not import, the claim is a FAIL row with the import
     error as its reason (no substitute noise is measured in its place).
  2. Formula checks (deterministic, ``ctx.add_check``): for the Gaussian mechanism with
     sensitivity 1 (one step, sampling rate 1), the kit's PLD epsilon matches the exact curve of
     Balle & Wang (2018, Thm. 8), solved here independently with SciPy; the RDP and zCDP (CKS)
     epsilons are valid upper bounds of it; ``gaussian_rho`` and the Bun-Steinke conversion
     equal their closed forms. If ``privacy.accounting`` does not import, each of these is a FAIL
     row with the import error as its reason.

Privacy: these checks touch no data; nothing is spent.
"""

from __future__ import annotations

import math
from typing import Any

from dpfair_jax.runner import Experiment, register

from .config import CONFIGS

__all__ = ["ACCOUNTING_CHECKS", "exact_gaussian_epsilon", "run_kit_accounting"]


def exact_gaussian_epsilon(sigma: float, delta: float) -> float:
    """Smallest epsilon at which N(0, sigma^2) with sensitivity 1 is (epsilon, delta)-DP.

    Solves Balle & Wang (2018), Thm. 8, ``Phi(1/(2s) - eps s) - e^eps Phi(-1/(2s) - eps s) = delta``
    for eps (the left side decreases in eps) with Brent's method on the log scale.
    """
    from scipy import optimize, special

    def log_delta(eps: float) -> float:
        a, b = 1.0 / (2.0 * sigma), eps * sigma
        la, lb = special.log_ndtr(a - b), eps + special.log_ndtr(-a - b)
        return -math.inf if lb >= la else float(la + math.log(-math.expm1(lb - la)))

    target = math.log(delta)
    if log_delta(0.0) <= target:
        return 0.0
    hi = 1.0
    while log_delta(hi) > target:
        hi *= 2.0
    return float(optimize.brentq(lambda e: log_delta(e) - target, 0.0, hi, xtol=1e-13, rtol=1e-13))


def _import(module: str) -> tuple[Any, str | None]:
    """``(module, None)``, or ``(None, "<error>")`` when ``module`` does not import."""
    import importlib

    try:
        return importlib.import_module(module), None
    except Exception as err:  # noqa: BLE001 - reported as a FAIL row by the caller
        return None, f"{module} failed to import ({type(err).__name__}: {err})"


def _noise_fn(gaussian_mechanism: Any):
    """A jitted ``(key, seed_ids, sigma, samples) -> per-seed sample variances`` (sigma traced)
    of ``gaussian_mechanism`` on zeros."""
    import jax
    import jax.numpy as jnp

    def one_seed(key, sigma, samples):
        noise = gaussian_mechanism(key, jnp.zeros((samples,), jnp.float32), sigma)
        return jnp.var(noise, ddof=1)

    def variances(base_key, seed_ids, sigma, samples):
        keys = jax.vmap(lambda i: jax.random.fold_in(base_key, i))(seed_ids)
        return jax.vmap(one_seed, in_axes=(0, None, None))(keys, sigma, samples)

    return jax.jit(variances, static_argnums=3)


#: The accountant's formula checks (id, statement), reported as FAIL rows when it does not import.
ACCOUNTING_CHECKS = (
    ("kit_pld_matches_exact_gaussian", "The PLD accountant's epsilon for one Gaussian mechanism equals the exact "
                                       "Balle-Wang epsilon (relative error <= 1%) at every sigma"),
    ("kit_rdp_upper_bound", "The RDP accountant epsilon is a valid upper bound of the exact Gaussian epsilon at "
                            "every sigma"),
    ("kit_zcdp_cks_upper_bound", "The zCDP (CKS) conversion epsilon is a valid upper bound of the exact Gaussian "
                                 "epsilon at every sigma"),
    ("kit_zcdp_closed_forms", "gaussian_rho(1, sigma) = 1/(2 sigma^2) and the Bun-Steinke conversion = rho + "
                              "2 sqrt(rho log(1/delta))"),
)


def _noise_claim(ctx: Any, fn: Any, sigmas: list[float], num_seeds: int, per_chunk: int, samples: int) -> None:
    """Part 1: the Monte Carlo noise-scale claim (module docstring)."""
    import time

    import jax
    import numpy as np
    import pandas as pd

    from dpfair_jax.runner import plots

    base = jax.random.key(ctx.seed)
    compiled = {}

    def noise_chunk(chunk: dict) -> pd.DataFrame:
        ids = np.arange(chunk["first_seed"], min(chunk["first_seed"] + per_chunk, num_seeds), dtype=np.int32)
        t0 = time.perf_counter()
        key = jax.random.fold_in(base, chunk["sigma_index"])  # independent draws per sigma
        var = np.asarray(fn(key, ids, np.float32(chunk["sigma"]), samples), dtype=np.float64)
        if not compiled:
            compiled["s"] = time.perf_counter() - t0
        return pd.DataFrame({"sigma": chunk["sigma"], "seed": ids.astype(np.int64), "samples": samples,
                             "variance": var, "std": np.sqrt(var), "std_ratio": np.sqrt(var) / chunk["sigma"]})

    chunks = [{"sigma": s, "sigma_index": i, "first_seed": b}
              for i, s in enumerate(sigmas) for b in range(0, num_seeds, per_chunk)]
    noise = ctx.map_chunks(chunks, noise_chunk, desc="gaussian_noise")
    if compiled:
        ctx.record_compile_time(compiled["s"])
    ctx.save_table(noise, "gaussian_noise")

    stats = noise.groupby("sigma")["variance"].agg(["mean", "std", "count"]).reset_index()
    stats["se"] = stats["std"] / np.sqrt(stats["count"])
    stats["z"] = (stats["mean"] - stats["sigma"] ** 2) / stats["se"]
    worst = stats.loc[stats["z"].abs().idxmax()]
    ctx.add_claim(
        "kit_gaussian_noise_variance",
        "Gaussian noise (privacy.mechanisms.gaussian_mechanism) "
        f"has variance sigma^2: mean per-seed sample variance within 3 SE of sigma^2 for every sigma in "
        f"{sigmas} ({num_seeds} seeds x {samples} draws)",
        measured={"max_abs_z": float(stats["z"].abs().max()), "at_sigma": float(worst["sigma"]),
                  "std_hat": float(math.sqrt(worst["mean"]))},
        target="max |z| <= 3",
        passed=bool(stats["z"].abs().max() <= 3.0),
        reason="a sample variance more than 3 standard errors from sigma^2: a noise-scale error in "
               "privacy.mechanisms, or a 0.3% chance draw per sigma",
    )
    ctx.save_figure(
        plots.tradeoff(noise, "sigma", "std_ratio", logx=True, reference=1.0, reference_label="1 (the exact sigma)",
                       xlabel="noise std sigma", ylabel="sample std / sigma (mean, 95% CI)",
                       title="Gaussian mechanism noise scale"),
        "noise_std_ratio",
    )


def run_kit_accounting(config: dict[str, Any], ctx: Any) -> None:
    """Run the ``kit_accounting`` checks (see module docstring)."""
    import numpy as np
    import pandas as pd

    from dpfair_jax.runner import plots

    sigmas = [float(s) for s in config["sigmas"]]
    num_seeds, per_chunk = int(config["num_seeds"]), int(config["seeds_per_chunk"])
    samples, delta = int(config["samples"]), float(config["delta"])
    if not sigmas or min(sigmas) <= 0:
        raise ValueError("sigmas must be a non-empty list of positive noise stds.")
    if num_seeds < 2 or per_chunk < 1 or samples < 2:
        raise ValueError("num_seeds must be >= 2, seeds_per_chunk >= 1 and samples >= 2.")
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}.")

    mechanisms, err = _import("dpfair_jax.privacy.mechanisms")
    if mechanisms is None:
        ctx.log(f"{err}; the noise-scale claim fails.")
        ctx.add_claim("kit_gaussian_noise_variance",
                      "Gaussian noise (privacy.mechanisms.gaussian_mechanism) has variance sigma^2",
                      measured=None, target="max |z| <= 3", passed=False, reason=err)
    else:
        _noise_claim(ctx, _noise_fn(mechanisms.gaussian_mechanism), sigmas, num_seeds, per_chunk, samples)

    acc, err = _import("dpfair_jax.privacy.accounting")
    if acc is None:
        ctx.log(f"{err}; the accountant's formula checks fail.")
        for cid, statement in ACCOUNTING_CHECKS:
            ctx.add_check(cid, statement, measured=None, target="accountant importable", passed=False, reason=err)
        return

    def acc_chunk(chunk: dict) -> pd.DataFrame:
        s, d = chunk["sigma"], chunk["delta"]
        rho = acc.gaussian_rho(1.0, s)
        return pd.DataFrame([{
            "sigma": s, "delta": d,
            "eps_exact": exact_gaussian_epsilon(s, d),
            "eps_pld": acc.dpsgd_epsilon(s, 1.0, 1, d, accountant="pld"),
            "eps_rdp": acc.dpsgd_epsilon(s, 1.0, 1, d, accountant="rdp"),
            "rho": rho,
            "eps_zcdp_cks": acc.zcdp_to_dp(rho, d, method="cks"),
            "eps_zcdp_bun_steinke": acc.zcdp_to_dp(rho, d, method="bun_steinke"),
        }])

    table = ctx.map_chunks([{"sigma": s, "delta": delta} for s in sigmas], acc_chunk, desc="accounting")
    ctx.save_table(table, "accounting")
    exact = table["eps_exact"].to_numpy()

    statements = dict(ACCOUNTING_CHECKS)
    rel = np.abs(table["eps_pld"].to_numpy() - exact) / np.maximum(exact, 1e-12)
    ctx.add_check(
        "kit_pld_matches_exact_gaussian", statements["kit_pld_matches_exact_gaussian"],
        measured=float(rel.max()), target="<= 0.01", passed=bool(rel.max() <= 0.01),
    )
    for col, cid in (("eps_rdp", "kit_rdp_upper_bound"), ("eps_zcdp_cks", "kit_zcdp_cks_upper_bound")):
        slack = table[col].to_numpy() - exact
        ctx.add_check(
            cid, statements[cid],
            measured=float(slack.min()), target="min(eps - eps_exact) >= -1e-9",
            passed=bool(slack.min() >= -1e-9),
        )
    sig = table["sigma"].to_numpy()
    rho_err = np.abs(table["rho"].to_numpy() - 1.0 / (2.0 * sig**2)) * 2.0 * sig**2
    rho = 1.0 / (2.0 * sig**2)
    bs = rho + 2.0 * np.sqrt(rho * math.log(1.0 / delta))
    bs_err = np.abs(table["eps_zcdp_bun_steinke"].to_numpy() - bs) / bs
    worst_cf = float(max(rho_err.max(), bs_err.max()))
    ctx.add_check(
        "kit_zcdp_closed_forms", statements["kit_zcdp_closed_forms"],
        measured=worst_cf, target="relative error <= 1e-12", passed=bool(worst_cf <= 1e-12),
    )
    long = table.melt(id_vars=["sigma"], value_vars=["eps_exact", "eps_pld", "eps_rdp", "eps_zcdp_cks"],
                      var_name="method", value_name="epsilon")
    ctx.save_figure(
        plots.tradeoff(long, "sigma", "epsilon", hue="method", band=None, logx=True, logy=True,
                       xlabel="noise multiplier sigma", ylabel=f"epsilon at delta={delta:g}",
                       title="Gaussian mechanism: accountants vs exact"),
        "epsilon_vs_sigma",
    )


register(Experiment(
    name="kit_accounting",
    paper="kit",
    description="Gaussian noise scale by Monte Carlo, and the kit's accountants against the exact Gaussian curve",
    configs=CONFIGS["kit_accounting"],
    run=run_kit_accounting,
))
