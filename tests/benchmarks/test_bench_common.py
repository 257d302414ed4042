"""benchmarks/common.py's interleaved A/B timing helpers (no JAX work, no timing asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

COMMON = Path(__file__).resolve().parents[2] / "benchmarks" / "common.py"


def _common():
    spec = importlib.util.spec_from_file_location("bench_common", COMMON)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_interleaved_runs_rounds_in_order():
    common = _common()
    log = []
    calls = {"a": lambda: log.append("a"), "b": lambda: log.append("b")}
    t = common.interleaved(calls, repeats=5, min_rep_s=0.0)
    assert t.inner == {"a": 1, "b": 1}
    assert log == ["a", "b"] + ["a", "b"] * 5  # one sizing call each, then A, B rounds
    assert all(len(v) == 5 for v in t.seconds.values())
    assert t.load_at_start is None or t.load_at_start >= 0


def test_paired_ratio_is_median_of_within_round_ratios():
    common = _common()
    t = common.Interleaved({"fast": (1.0, 1.0, 2.0, 1.0, 1.0), "slow": (2.0, 3.0, 2.0, 4.0, 2.5)},
                           {"fast": 1, "slow": 1}, 1.5)
    r = common.paired_ratio(t, "fast", "slow")
    assert r["ratio"] == pytest.approx(2.5) and r["ratio_min"] == 1.0 and r["ratio_max"] == 4.0
    assert r["ratio_q1"] == pytest.approx(2.0) and r["ratio_q3"] == pytest.approx(3.0)
    assert r["repeats"] == 5
    with pytest.raises(ValueError):
        common.interleaved({"a": lambda: None}, repeats=0)


def test_study_throughput_counts_every_candidate_of_a_nonprivate_study():
    import sys
    from pathlib import Path

    import pandas as pd

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import study_throughput as ST

    class Study:
        info = {"grid_sizes": {"dpfermi": 64, "dpsgd": 8}}
        table = pd.DataFrame({"method": ["dpfermi"] * 6 + ["dpsgd"] * 3})

    assert ST.count_models(Study()) == 6 * 64 + 3 * 8
    data = ST.synthetic_adult_like(400, 5)
    assert data.x.shape == (400, 5) and set(map(int, data.s)) == {0, 1}


def test_gpu_suite_names_only_files_that_exist():
    """The GPU suite runs in one call on a machine lent for minutes: a moved test or script path
    must fail here, not there."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = (root / "benchmarks" / "gpu_suite.sh").read_text()
    paths = set(re.findall(r"\b((?:tests|benchmarks)/[\w/]+\.py)\b", text))
    assert len(paths) >= 10
    missing = sorted(p for p in paths if not (root / p).is_file())
    assert not missing, f"gpu_suite.sh names files that do not exist: {missing}"
