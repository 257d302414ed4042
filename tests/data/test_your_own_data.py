"""docs/your_own_data.md runs as written: its Python blocks, in order, in a fresh folder."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

PAGE = Path(__file__).resolve().parents[2] / "docs" / "your_own_data.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)


def test_page_runs_from_csv_to_plot(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    blocks = _blocks()
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    env: dict = {}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{PAGE.name}[block {i}]", "exec"), env)  # noqa: S102
    assert (tmp_path / "loans.csv").exists() and (tmp_path / "loans_tradeoff.png").stat().st_size > 10_000
    table, study = env["table"], env["study"]
    assert len(table) == (2 + 1) * 2  # DP-FERMI at two lambdas and DP-SGD, two replicates, one epsilon
    assert (table["unit"] == "example-level").all()
    assert np.all(table["spend_epsilon"] <= 3.0) and np.all(table["spend_epsilon"] > 2.9)
    assert set(env["comparison"]["status"]) <= {"lower", "higher", "unresolved", "unreached", "baseline_unreached"}
    assert study.info["n_train"] + study.info["n_val"] + study.info["n_test"] == 1500
    assert env["data"].info.feature_names[:2] == ("income", "tenure")
    train_data, test_data = env["train_data"], env["test_data"]  # the fitted encoder's two frames
    assert test_data.n == 300 and test_data.info.feature_names == train_data.info.feature_names
    assert abs(float(np.asarray(train_data.x)[:, 0].mean())) < 1e-5  # z-scored with training moments
