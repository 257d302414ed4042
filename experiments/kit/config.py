"""Quick and full configs of the kit's own checks (``CONFIGS[name] = {"quick": ..., "full": ...}``)."""

from __future__ import annotations

from typing import Any

__all__ = ["CONFIGS"]

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "kit_accounting": {
        "quick": {"seed": 0, "sigmas": [0.5, 1.0, 2.0, 4.0, 8.0], "num_seeds": 32, "seeds_per_chunk": 16,
                  "samples": 4096, "delta": 1e-5},
        "full": {"seed": 0, "sigmas": [0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0],
                 "num_seeds": 256, "seeds_per_chunk": 64, "samples": 65536, "delta": 1e-5},
    },
}
