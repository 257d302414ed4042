"""The five papers the kit reproduces: titles, authors, venues and links, in one place.

The report (:mod:`dpfair_jax.runner.report`) heads each paper's section with its entry; the
README can cite from the same table. Keys are the paper ids runs record (``config.json``'s
``paper``); ``"kit"`` is the kit's own checks (no paper).
"""

from __future__ import annotations

from typing import TypedDict

__all__ = ["PAPERS", "Paper", "citation"]


class Paper(TypedDict):
    """One paper: ``title``, ``authors``, ``venue``, ``link`` (empty when none is public), ``topic``
    (what the kit takes from it, one line) and ``study`` (the experiments folder)."""

    title: str
    authors: str
    venue: str
    link: str
    topic: str
    study: str


PAPERS: dict[str, Paper] = {
    "000": Paper(
        title="Privacy Budget Tailoring in Private Data Analysis",
        authors="Anonymous authors",
        venue="Under double-blind review",
        link="",
        topic="group-aware zCDP budget allocation from private standard errors (DPSE vs DPNoSE), fair regression "
              "with bounded group loss",
        study="paper_000",
    ),
    "001": Paper(
        title="Differentially Private Empirical Risk Minimization under the Fairness Lens",
        authors="Cuong Tran, My H. Dinh, Ferdinando Fioretto",
        venue="NeurIPS 2021",
        link="https://arxiv.org/abs/2106.02674",
        topic="why output perturbation and DP-SGD hurt some groups (Hessian traces, gradient norms, clipping) and "
              "a mitigation",
        study="paper_001",
    ),
    "002": Paper(
        title="The Cost of a Reductions Approach to Private Fair Optimization",
        authors="Daniel Alabi",
        venue="arXiv preprint, 2019",
        link="https://arxiv.org/abs/1906.09613",
        topic="constrained group-objective optimization (CGOO): exponential sampling, private linear optimization "
              "oracles, sample complexity",
        study="paper_002",
    ),
    "003": Paper(
        title="A Simple and Practical Method for Reducing the Disparate Impact of Differential Privacy",
        authors="Lucas Rosenblatt, Julia Stoyanovich, Christopher Musco",
        venue="AAAI 2024",
        link="https://arxiv.org/abs/2312.11712",
        topic="stratified private mean estimation (COINPRESS vs StratCOINPRESS) and stratified private synthetic data",
        study="paper_003",
    ),
    "004": Paper(
        title="Stochastic Differentially Private and Fair Learning",
        authors="Andrew Lowy, Devansh Gupta, Meisam Razaviyayn",
        venue="ICLR 2023",
        link="https://arxiv.org/abs/2210.08781",
        topic="DP-FERMI: the ERMI regularizer solved by noisy stochastic gradient descent-ascent; DP and EO tradeoffs",
        study="paper_004",
    ),
}


def citation(paper_id: str) -> str:
    """``Authors. *Title*. Venue. <link>`` (Markdown) for a paper id of :data:`PAPERS`."""
    if paper_id not in PAPERS:
        raise ValueError(f"unknown paper id {paper_id!r}; known: {', '.join(PAPERS)}.")
    p = PAPERS[paper_id]
    link = f" [arXiv:{p['link'].rsplit('/', 1)[-1]}]({p['link']})" if p["link"] else ""
    return f"{p['authors']}. *{p['title']}*. {p['venue']}.{link}"
