"""The paper's own margins over its baselines, from the official result files (no torch needed).

Usage: ``python -m experiments.paper_004.official_margins FIGURES_DIR`` where ``FIGURES_DIR`` is the
``Figures`` folder of the public repository devanshgupta160/Stochastic-Differentially-Private-and-
Fair-Learning (the user supplies it; nothing is downloaded). It reads, per dataset and epsilon,
DP-FERMI's points (``FERMI_Multiple_Models/.../final_eps_{e}_logistic-regression.pt``: per lambda the
test misclassification and the mean violation) and PF-LD's single point
(``PFLD/..._eps_{e}_old_logistic_regression.pt``), and prints the claim statistic of the study
(:func:`dpfair_jax.fairness.frontier.paired_violation_gap`, one "replicate": the published run) for

* PF-LD (Tran et al.): PF-LD's violation minus DP-FERMI's frontier read at PF-LD's error
  (``slack = 0``), mean over the paper's finite epsilons;
* DP-SGD (DP-FERMI's lambda = 0 point): its violation minus DP-FERMI's frontier at its error +
  ``slack`` (0.01, the study's), mean over the finite epsilons.

The numbers are written into ``config.py`` (``PAPER_MARGINS``). The ``.pt`` files are torch zip
pickles of dicts of floats and small tensors; :func:`load_pt` reads them with ``pickle`` and NumPy.
"""

from __future__ import annotations

import collections
import os
import pickle
import sys
import zipfile

import numpy as np
import pandas as pd

_DTYPES = {"FloatStorage": np.float32, "DoubleStorage": np.float64, "LongStorage": np.int64,
           "IntStorage": np.int32, "BoolStorage": np.bool_, "HalfStorage": np.float16}


_NUMPY_OK = {("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"), ("numpy", "dtype"),
             ("numpy.core.multiarray", "_reconstruct"), ("numpy", "ndarray"), ("_codecs", "encode")}


class _Storage:
    def __init__(self, name: str):
        self.name = name


def _rebuild_tensor_v2(storage, offset, size, stride, *_):
    if len(size) == 0:
        return storage[offset].item()
    return np.lib.stride_tricks.as_strided(storage[offset:], shape=size,
                                           strides=[s * storage.itemsize for s in stride]).copy()


def load_pt(path: str):
    """A ``torch.save`` zip file of plain containers, floats and tensors, as Python and NumPy
    objects (anything else is refused)."""
    z = zipfile.ZipFile(path)
    root = z.namelist()[0].split("/")[0]

    class Unpickler(pickle.Unpickler):
        def find_class(self, mod, name):
            if mod == "torch._utils" and name == "_rebuild_tensor_v2":
                return _rebuild_tensor_v2
            if mod == "torch" and name.endswith("Storage"):
                return _Storage(name)
            if mod == "collections" and name == "OrderedDict":
                return collections.OrderedDict
            if (mod, name) in _NUMPY_OK:  # NumPy scalars and dtypes inside the dicts
                return super().find_class(mod, name)
            raise pickle.UnpicklingError(f"refusing {mod}.{name}")

        def persistent_load(self, pid):
            _, st, key, _, _ = pid
            return np.frombuffer(z.read(f"{root}/data/{key}"), dtype=_DTYPES[st.name])

    return Unpickler(z.open(f"{root}/data.pkl")).load()


#: (fairness, the official dataset folder, the kit's experiment, the paper's finite epsilons)
SETTINGS = [
    ("dp", "adult", "fermi_adult_dp", [0.5, 1, 3, 9]),
    ("dp", "credit-card", "fermi_credit_dp", [0.5, 1, 3, 9]),
    ("dp", "parkinsons", "fermi_parkinsons_dp", [0.5, 1, 3, 9]),
    ("eo", "adult", "fermi_adult_eo", [0.5, 1, 3]),
    ("eo", "credit-card", "fermi_credit_eo", [0.5, 1, 3]),
]


def official_table(figures: str, fairness: str, dataset: str, epsilons) -> pd.DataFrame:
    """Rows (method, epsilon, lam, replicate = 0, error, violation) of the published run: DP-FERMI
    per lambda (``dpfermi``; its lambda = 0 point also as ``dpsgd``) and PF-LD (``pfld_epoch``)."""
    top = "Demographic Parity Experiments" if fairness == "dp" else "Equalized Odds Experiments"
    key = "demographic_parity" if fairness == "dp" else "equalized_odds"
    pkey = "Demographic Parity" if fairness == "dp" else "Equalized Odds"
    pdir = f"PFLD/{dataset}" if fairness == "dp" else "PFLD"
    rows = []
    for e in epsilons:
        f = load_pt(os.path.join(figures, top, "FERMI_Multiple_Models", dataset, f"final_eps_{e}_logistic-regression.pt"))
        for lam, v in f.items():
            row = {"epsilon": float(e), "lam": float(lam), "replicate": 0, "error": float(v["misclassification"]),
                   "violation": float(v[key]["mean"])}
            rows.append({"method": "dpfermi", **row})
            if float(lam) == 0.0:
                rows.append({"method": "dpsgd", **row})
        u = load_pt(os.path.join(figures, top, pdir, f"{dataset}_eps_{e}_old_logistic_regression.pt"))
        rows.append({"method": "pfld_epoch", "epsilon": float(e), "lam": 0.0, "replicate": 0,
                     "error": float(u["Misclassification Error"]), "violation": float(u[pkey])})
    return pd.DataFrame(rows)


def margins(figures: str, slack_dpsgd: float = 0.01) -> dict:
    from dpfair_jax.fairness.frontier import paired_violation_gap, violation_gap_readings

    out = {}
    for fairness, dataset, name, eps in SETTINGS:
        t = official_table(figures, fairness, dataset, eps)
        res = {}
        for b, slack in (("pfld_epoch", 0.0), ("dpsgd", slack_dpsgd)):
            g = paired_violation_gap(t, "dpfermi", b, slack=slack)
            rd = violation_gap_readings(t, "dpfermi", b, slack=slack)
            res[b] = {"margin": float(g["effect"].iloc[0]), "readings": int(g["readings"].iloc[0]),
                      "points": int(g["points"].iloc[0]),
                      "per_epsilon": {f"{e:g}": None if np.isnan(x) else round(float(x), 4)
                                      for e, x in zip(rd["epsilon"], rd["gap"])}}
        out[name] = res
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, res in margins(sys.argv[1]).items():
        for b, r in res.items():
            print(f"{name:22s} {b:11s} margin {r['margin']:.4f} ({r['readings']}/{r['points']} readings) "
                  f"per eps {r['per_epsilon']}")
