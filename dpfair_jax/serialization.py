"""Save and load a trained model's parameters together with what the run spent.

One file per run, in flax's msgpack format (``flax.serialization``): the parameters as a state dict,
the run's :class:`~dpfair_jax.privacy.accounting.PrivacySpend` (epsilon, delta, rho, the
``DpEvent`` it was accounted from, the neighbouring relation and the privacy unit) and free-form
JSON metadata (hyperparameters, dataset, code version). Nothing is pickled, so loading a file runs
no code; the ``DpEvent`` is rebuilt only from dp-accounting's own event classes.

    save_run("model.msgpack", result.params, spend, metadata={"lam": 1.0})
    run = load_run("model.msgpack", target=init_params)   # run.params has init_params' structure
    run.spend.epsilon, run.spend.relation, run.spend.unit
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import dp_accounting
from dp_accounting import dp_event as _dp_event
from flax import serialization as _flax_ser

from dpfair_jax.privacy.accounting import PrivacySpend

__all__ = ["FORMAT", "LoadedRun", "save_run", "load_run", "spend_to_dict", "spend_from_dict",
           "event_from_dict"]

#: Format tag written into every file; ``load_run`` refuses other formats.
FORMAT = "dpfair_jax.run.v1"


@dataclasses.dataclass(frozen=True)
class LoadedRun:
    """What ``load_run`` returns: ``params`` (the target's structure when given, else nested dicts
    of NumPy arrays), ``spend`` (None if none was saved) and ``metadata``."""

    params: Any
    spend: PrivacySpend | None
    metadata: dict[str, Any]


def spend_to_dict(spend: PrivacySpend) -> dict[str, Any]:
    """JSON-ready dict of a spend (the event as dp-accounting's named-tuple form)."""
    if not isinstance(spend, PrivacySpend):
        raise ValueError(f"spend must be a PrivacySpend, got {type(spend).__name__}.")
    return spend.to_dict()


def event_from_dict(value: Any) -> Any:
    """Rebuild a ``DpEvent`` from the dict form ``PrivacySpend.to_dict`` writes (classes of
    ``dp_accounting.dp_event`` only)."""
    if isinstance(value, list):
        return [event_from_dict(v) for v in value]
    if not isinstance(value, dict) or "class_name" not in value:
        return value
    if value.get("module_name") != "dp_accounting.dp_event":
        raise ValueError(f"refusing to rebuild an event from module {value.get('module_name')!r}.")
    cls = getattr(_dp_event, str(value["class_name"]), None)
    if not (isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent)):
        raise ValueError(f"unknown DpEvent class {value['class_name']!r}.")
    fields = {k: event_from_dict(v) for k, v in value.items() if k not in ("module_name", "class_name")}
    return cls(**fields)


def spend_from_dict(d: dict[str, Any]) -> PrivacySpend:
    """Inverse of :func:`spend_to_dict`."""
    d = dict(d)
    event = d.pop("event", None)
    return PrivacySpend(event=None if event is None else event_from_dict(event), **d)


def save_run(path: str | os.PathLike, params: Any, spend: PrivacySpend | None = None, *,
             metadata: dict[str, Any] | None = None) -> Path:
    """Write ``params``, ``spend`` and ``metadata`` to ``path`` atomically (a temporary file in the
    same folder, then a rename: an interrupted save never leaves a truncated file)."""
    path = Path(path)
    meta = {} if metadata is None else metadata
    try:
        meta_json = json.dumps(meta, sort_keys=True, allow_nan=True)
    except TypeError as err:
        raise ValueError(f"metadata must be JSON-serializable: {err}") from None
    payload = {
        "format": FORMAT,
        "params": _flax_ser.to_state_dict(params),
        "spend": "" if spend is None else json.dumps(spend_to_dict(spend), sort_keys=True),
        "metadata": meta_json,
    }
    blob = _flax_ser.msgpack_serialize(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_run(path: str | os.PathLike, target: Any = None) -> LoadedRun:
    """Read a file written by :func:`save_run`. With ``target`` (a params pytree of the same
    structure, e.g. the model's init), the parameters come back in that structure."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no saved run at {path}.")
    try:
        payload = _flax_ser.msgpack_restore(path.read_bytes())
    except Exception as err:  # noqa: BLE001 - any decoding failure means "not our file"
        raise ValueError(f"{path} is not a dpfair_jax run file ({err}).") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        got = payload.get("format") if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"{path} has format {got!r}; expected {FORMAT!r}.")
    params = payload["params"]
    if target is not None:
        params = _flax_ser.from_state_dict(target, params)
    spend = spend_from_dict(json.loads(payload["spend"])) if payload["spend"] else None
    return LoadedRun(params=params, spend=spend, metadata=json.loads(payload["metadata"]))
