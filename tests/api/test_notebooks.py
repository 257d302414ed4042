"""Every notebook in notebooks/ runs in a Jupyter kernel at its small size, shows figures, no errors.

Each notebook reads ``DPFAIR_NOTEBOOK_SMALL=1`` (fewer trials, seeds and sizes; the same code
paths) and is executed top to bottom with nbclient in a kernel of this interpreter. The test then
requires at least one ``image/png`` output (a figure that is shown, not only built) and no error
output, and runs a last cell of checks on the numbers the notebook shows (:data:`CHECKS`), so a
notebook that runs but shows nonsense fails too. The kernels compile with XLA's backend
optimization level 0 (``XLA_FLAGS``): the same programs, compiled in about half the CPU time,
which is most of a small notebook's cost. Skipped, with the reason, when nbclient, nbformat or
ipykernel are not installed (``pip install -e ".[dev]"`` installs them).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (pip install -e '.[dev]')")
nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (pip install -e '.[dev]')")
pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install -e '.[dev]')")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
KERNEL = "dpfair-notebook-test"

#: Checks run in each notebook's kernel after its cells (the names are the notebook's own).
CHECKS = {
    "paper_000_allocation": """
shares = df[(df.method == "dpse") & (df.epsilon == max(EPSILONS))].set_index("group").share
assert abs(shares.sum() - 1) < 1e-4, shares                    # s_1^2 + s_2^2 = 1
assert shares[2] > 0.5, shares                                   # the misfit smallest group gets more
assert len(df) == (len(EPSILONS) + 1) * len(allocation.PRIVATE_METHODS) * len(SIZES)
assert (wide.loc[2, "dpse vs dpnose"] > 0.2).all()              # opposite slopes: the smallest group gains
""",
    "paper_001_fairness_lens": """
small_noise = df[df.epsilon >= 1.0]
assert (abs(small_noise.mc - small_noise.thm1) <= 0.1 * small_noise.thm1).all(), df   # Theorem 1 tracks MC
larger = int(df.groupby("group").trace.first().idxmax())
assert (df.pivot(index="epsilon", columns="group", values="mc").idxmax(axis=1) == larger).all(), df
assert np.isfinite(np.asarray(dec.r_clip)).all() and np.isfinite(np.asarray(dec.r_noise)).all()
""",
    "paper_002_reductions": """
assert lp.status == 0 and lp.fun > 0
assert len(df) == len(configs) * len(EPSILONS) * SEEDS and np.isfinite(df.h_excess).all()
assert (df.h_excess >= -1e-6).all()                              # nothing beats the grid's best h
assert (within >= 1 - RHO - 3 * np.sqrt(RHO * (1 - RHO) / SEEDS)).all(), within      # Thm 3.6
assert all(s["epsilon"] <= e * (1 + 1e-6) for s, e in zip(spends, EPSILONS * 2)), spends
""",
    "paper_003_stratification": """
assert len(df) == len(NS) * RUNS and np.isfinite(df[list(methods)].to_numpy()).all()
assert summary[("coinpress", "mean")].iloc[-1] < summary[("coinpress", "mean")].iloc[0]   # error falls with n
assert abs(spend.rho - RHO) < 1e-9                               # parallel composition: RHO, not K x RHO
""",
    "paper_004_tradeoff": """
assert len(df) == 2 * len(LAMS) * SEEDS and np.isfinite(df[["error", "violation"]].to_numpy()).all()
assert spend.unit == "example" and spend.epsilon <= EPSILON * (1 + 1e-6)
nonprivate = df[df.epsilon == math.inf].groupby("lam").violation.mean()
assert nonprivate.iloc[-1] < nonprivate.iloc[0], nonprivate      # lambda lowers the DP violation
""",
}


@pytest.fixture(scope="module")
def kernel_dir(tmp_path_factory) -> Path:
    """A kernelspec that starts this interpreter (not whatever ``python3`` a user's Jupyter finds)."""
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "dpfair_jax test kernel", "language": "python"}))
    return root


def test_every_notebook_has_checks():
    assert {p.stem for p in NOTEBOOKS} == set(CHECKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_small_and_shows_figures(path, kernel_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("DPFAIR_NOTEBOOK_SMALL", "1")
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        monkeypatch.setenv("XLA_FLAGS", f"{flags} --xla_backend_optimization_level=0".strip())
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # only this run's outputs count
    nb.cells.append(nbformat.v4.new_code_cell(CHECKS[path.stem]))
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError (with the traceback) on an error, checks included
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [o for o in outputs if o.output_type == "error"] == []
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert images, f"{path.name} showed no figure (image/png output)"
