"""Paper 002, findings about the paper (rows of ``reductions_sample_complexity``): Lemma 5.8
audited on the printed Algorithm 2, Fig. 2's G-mean and H-mean formulas (Sec. 8.1) and Cor. B.5's
round count against Lemma B.4.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: The Lemma 5.8 audit instance: itemized group losses ``[M = 2, K = 2]`` of two decisions, ``A``
#: (group 1 at the public threshold) and ``C`` (good for group 0, bad for group 1). One record of
#: group 1 with loss 0 under both decisions (``D0``) or 1 under both (``D1``) moves group 1's loss
#: by ``1/n``; the public threshold sits half a record above ``A``'s group-1 loss in ``D0``, so the
#: indicator ``1[g(ell(A, D)) >= 0]`` of line 10 is off in ``D0`` and on in ``D1``.
LEMMA58_LOSSES = np.array([[0.30, 0.20], [0.05, 0.45]])


#: Sizes of the Lemma 5.8 audit (``config["lemma58"]`` overrides): trials per world, rounds ``T``,
#: private ``n``, and whether to audit the kit's corrected Algorithm 2 on the same pair as a control.
LEMMA58_DEFAULTS = {"trials": 1000, "steps": 10, "n": 2000, "control": False}


def lemma58_audit(*, epsilon: float = 1.0, delta: float = 1e-6, steps: int = 10, n: int = 2000,
                  trials: int = 2000, seed: int = 0, variant: str = "paper") -> dict[str, Any]:
    """Audit Algorithm 2 as printed (``PrivateCGOOConfig(variant="paper")``: line 10 reads the
    private losses without noise) against Lemma 5.8's claim, through the public audit entry point
    (:class:`~dpfair_jax.audit.FitSpendGame` on ``reductions.fit``, :func:`~dpfair_jax.audit.audit_mechanism`).

    Instance :data:`LEMMA58_LOSSES`, ``f = sum``, ``g(l) = l_1 - eta_1`` (a bounded group loss on
    group 1, ``eta`` public), ``init_index = 0`` (``A``). The run uses the paper's per-round budget
    ``eps' = epsilon / (2 sqrt(2 T log(1/delta)))`` (lines 4-5, pure LOPT) and the claim is the
    paper's ``(epsilon, delta)``. Statistic: the number of rounds that pick ``A`` (the weight
    ``grad f + 1[g >= 0] grad g`` turns toward ``A`` once the indicator is on, which one record
    decides). ``variant="corrected"`` runs the kit's default (Laplace-released losses, the budget of
    ``reductions.calibrate``) on the same pair as a control. Returns the audit row plus the claim's
    ``paper_epsilon`` and the ledger's ``spend_epsilon`` (``inf`` for the printed algorithm)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from dpfair_jax.algorithms import reductions as R
    from dpfair_jax.audit import FitSpendGame, audit_mechanism

    K, L0 = 2, jnp.asarray(LEMMA58_LOSSES, jnp.float32)
    eta1 = float(LEMMA58_LOSSES[0, 1]) + 0.5 / n
    prob = R.CGOO(R.sum_objective(K), R.GroupFunction(lambda l: l[..., 1] - eta1, 1.0, 0.0, "group1_loss"), K)
    G = 1.0
    canary = jnp.asarray([[0.0, 1.0], [0.0, 1.0]], jnp.float32) / n
    config = R.PrivateCGOOConfig(problem=prob, steps=int(steps), delta=float(delta), point="last", init_index=0)
    if variant == "paper":
        b = R.algorithm2_budget(epsilon, delta, steps, n=n, num_groups=K, privatize_weights=False, variant="paper")
        config = dataclasses.replace(config, variant="paper")
        hp = R.PrivateCGOOHparams(G=G, oracle_epsilon=float(b.oracle_epsilon), laplace_scale=0.0)
        paper_eps = float(epsilon)  # Lemma 5.8's claim (the ledger's oracle-only figure is below it)
    else:
        hp = R.calibrate(config, n, (epsilon, delta), hparams=R.PrivateCGOOHparams(G=G))
        paper_eps = float(R.spend(config, n, hp).epsilon)
    game = FitSpendGame(algorithm=R, config=config, hparams=hp,
                        neighbours=lambda flag: R.GridData(L0 + flag.astype(jnp.float32) * canary, n),
                        statistic=lambda res: jnp.sum(res.params[0] == 0).astype(jnp.float32),
                        sizes=(n, n), relation="replace_one", claimed_epsilon=paper_eps)
    fn, info = game.build()
    row = audit_mechanism(fn, jax.random.key(seed), mechanism=f"algorithm2_{variant}", claimed_epsilon=paper_eps,
                          delta=float(info["delta"]), num_trials=int(trials))
    row.update(paper_epsilon=paper_eps, spend_epsilon=float(info["spend_epsilon"]), steps=int(steps), n=int(n),
               oracle_epsilon=float(hp.oracle_epsilon))
    return row


def figure2_check(classes: tuple[int, ...] = (2, 3, 4, 5, 6)) -> dict[str, Any]:
    """Sec. 8.1's G-mean and H-mean formulas (as printed; :func:`figure2_means`) on Figure 2's two
    families of confusion matrices: uniform (a) and row-major geometric with ratio 1/3 (b).
    The figure's text says H-mean > G-mean in both panels; returns the values, ``h_minus_g`` per
    panel and ``contradicts`` (the formulas never give H-mean > G-mean on these classes)."""
    from dpfair_jax.algorithms import reductions as R

    out: dict[str, Any] = {"classes": list(classes)}
    for panel, w in (("a_uniform", "uniform"), ("b_geometric", "geometric")):
        vals = [R.figure2_means(L, w) for L in classes]
        out[panel] = {"g_mean": [v["g_mean"] for v in vals], "h_mean": [v["h_mean"] for v in vals],
                      "h_minus_g": [v["h_mean"] - v["g_mean"] for v in vals]}
    worst = max(max(out[p]["h_minus_g"]) for p in ("a_uniform", "b_geometric"))
    out["max_h_minus_g"] = worst
    out["contradicts"] = bool(worst <= 1e-6)  # float32 ties in panel (a)
    return out


def corollary_b5_check(cs: tuple[float, ...] = (12.0, 100.0, 1.0e4)) -> dict[str, Any]:
    """Cor. B.5's round count ``T = c log c`` (``c = 2K(beta_f + G beta_g)/alpha``) against Lemma
    B.4's bound ``alpha c log(T)/T``: ``bound_over_alpha = c log(T)/T`` at the printed ``T`` (it must
    be <= 1 for the corollary to follow) and the smallest ``T`` that makes it so (Lambert W)."""
    from dpfair_jax.analysis import sample_complexity as S

    rows = []
    for c in cs:
        # K = 1, beta_f = c/2, beta_g = 0, alpha = 1 gives c = 2K(beta_f + G beta_g)/alpha
        tp = float(S.frank_wolfe_steps(1, 1.0, c / 2.0, 0.0, G=1.0, variant="paper"))
        tc = float(S.frank_wolfe_steps(1, 1.0, c / 2.0, 0.0, G=1.0))
        rows.append({"c": c, "T_paper": tp, "bound_over_alpha_at_T_paper": c * math.log(tp) / tp,
                     "T_sufficient": tc, "bound_over_alpha_at_T_sufficient": c * math.log(tc) / tc})
    return {"cells": rows, "paper_T_suffices": bool(all(r["bound_over_alpha_at_T_paper"] <= 1.0 for r in rows))}


def finding_rows(config: dict[str, Any], ctx: Any) -> None:
    """Lemma 5.8 (audit of the printed Algorithm 2), Fig. 2's means and Cor. B.5's T (rows)."""
    aud = dict(LEMMA58_DEFAULTS, **config.get("lemma58", {}))
    kw = {"trials": int(aud["trials"]), "steps": int(aud["steps"]), "n": int(aud["n"])}
    row = lemma58_audit(seed=ctx.seed, **kw)
    keep = ("claimed_epsilon", "delta", "epsilon_lower_bound", "confidence", "trials", "threshold")
    measured = {"printed": {k: row[k] for k in keep}, "ledger_epsilon": row["spend_epsilon"],
                "oracle_epsilon": row["oracle_epsilon"]}
    control = ""
    if aud["control"]:  # the kit's corrected Algorithm 2 on the same pair (full config)
        ctl = lemma58_audit(seed=ctx.seed + 1, variant="corrected", **kw)
        measured["control_corrected"] = {k: ctl[k] for k in keep}
        control = (f"; the kit's corrected Algorithm 2 (Laplace-released losses, charged) on the same pair gives "
                   f"{ctl['epsilon_lower_bound']:.3g} <= {ctl['claimed_epsilon']:.4g}")
    lb, claim = row["epsilon_lower_bound"], row["paper_epsilon"]
    ctx.add_claim("p002_lemma58_alg2_privacy",
                  "Lemma 5.8: Algorithm 2 as printed (line 10's weight r_t from the private losses, no noise; only "
                  f"the T = {row['steps']} LOPT calls charged, eps' = eps/(2 sqrt(2T log(1/delta)))) is (eps, delta)-DP; "
                  f"audited through the public audit entry point (FitSpendGame on reductions.fit, variant='paper', "
                  f"n = {row['n']}, one record flips line 10's indicator), 95% lower bound on epsilon",
                  measured=measured,
                  target=f"epsilon lower bound <= the paper's epsilon {claim:.4g}", passed=bool(lb <= claim),
                  reason=(f"the printed algorithm leaks the data through line 10's unnoised weight: the audit's 95% "
                          f"lower bound {lb:.3g} ({row['trials']} trials per world) exceeds the claimed epsilon "
                          f"{claim:.4g}; the ledger gives no finite epsilon ({row['spend_epsilon']}){control}"))
    fig = figure2_check()
    a, b = fig["a_uniform"], fig["b_geometric"]
    ctx.add_claim("p002_fig2_means",
                  "Sec. 8.1 / Fig. 2: 'the H-mean performance measure is larger than the G-mean' for balanced (a, "
                  "uniform C) and unbalanced (b, entries decreasing by 1/3, row-major) confusion matrices; "
                  "measured: the paper's printed G-mean and H-mean formulas on both families, L = "
                  f"{fig['classes'][0]}..{fig['classes'][-1]} (exact)",
                  measured=fig, target="H-mean > G-mean in both panels", passed=not fig["contradicts"],
                  kind="formula",
                  reason=(f"the printed formulas contradict the figure (a finding about the paper, not a coding "
                          f"error): uniform C gives G = H = 1/L exactly (L = 2: {a['g_mean'][0]:.3g} vs "
                          f"{a['h_mean'][0]:.3g}), geometric C gives H far below G (L = 2: G {b['g_mean'][0]:.3g}, "
                          f"H {b['h_mean'][0]:.3g}; L = 3: G {b['g_mean'][1]:.3g}, H {b['h_mean'][1]:.2g}); the "
                          "figure used other definitions or orderings (footnote 16 calls it an illustration)"))
    b5 = corollary_b5_check()
    c12 = b5["cells"][0]
    ctx.add_claim("p002_corB5_rounds",
                  "Cor. B.5: T >= c log c rounds (c = 2K(beta_f + G beta_g)/alpha) make Lemma B.4's objective bound "
                  "alpha c log(T)/T at most alpha; measured: c log(T)/T at the printed T, exact",
                  measured=b5, target="c log(T)/T <= 1 at T = ceil(c log c)", passed=b5["paper_T_suffices"],
                  kind="formula",
                  reason=(f"the printed T is too small (a finding about the paper): at c = {c12['c']:g} it gives T = "
                          f"{c12['T_paper']:.0f} and a bound of {c12['bound_over_alpha_at_T_paper']:.3f} alpha; the "
                          f"smallest sufficient T is {c12['T_sufficient']:.0f} (about c log c + c log log c, Lambert "
                          "W); log(T)/T > 1/c at T = c log c for every c > e"))
