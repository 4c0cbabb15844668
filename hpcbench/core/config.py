"""Typed experiment configs built from plain dicts.

Every experiment owns one ``@dataclass`` that subclasses :class:`Config`. A config
is built from a plain dict (papermill parameters, a suite's YAML, CLI ``-p k=v``)
with :meth:`Config.from_dict`, which

* rejects unknown keys and lists the valid ones,
* coerces each value to the field's declared type (``"4"`` -> ``4``,
  ``"1M"`` -> ``1048576`` for :data:`ByteSize`, ``"a,b"`` -> ``["a", "b"]``),
* validates ranges and choices declared in the field's metadata and raises
  :class:`~hpcbench.core.errors.ConfigError` naming the field and the allowed range.

Fields are declared with :func:`param` so that each carries its documentation::

    @dataclass
    class MyConfig(Config):
        iters: int = param(20, "timed iterations per size", min=1)

The notebook that runs an experiment has a ``parameters`` cell holding exactly
these fields with the same defaults (a test checks it).
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args, get_origin

from hpcbench.core.errors import ConfigError
from hpcbench.core.registry import did_you_mean
from hpcbench.core.tc import parse_rate

__all__ = ["Config", "BitRate", "ByteSize", "param", "parse_bytes", "parse_bit_rate"]


class ByteSize(int):
    """An ``int`` number of bytes that also accepts ``"64K"``, ``"1M"``, ``"2GiB"``.

    Suffixes are binary (K = 1024), as in nccl-tests' ``-b 8 -e 128M``.
    """


class BitRate(float):
    """A link rate: a ``float`` number of bits per second that also accepts tc's spelling (``"800mbit"``,
    ``"1gbit"``; tc's ``bps`` is *bytes* per second). One value from the command line to the link: tc's
    text is made only where tc runs (:func:`hpcbench.core.tc.format_rate`)."""

    def __new__(cls, value: Any) -> "BitRate":
        return super().__new__(cls, parse_bit_rate(value))

    def __str__(self) -> str:
        for factor, unit in ((1e9, "Gbit/s"), (1e6, "Mbit/s"), (1e3, "kbit/s")):
            if self >= factor:
                return f"{self / factor:.4g} {unit}"
        return f"{float(self):.4g} bit/s"


def parse_bit_rate(value: Any) -> float:
    """Bits per second from a number (bits per second) or a tc rate (``"100mbit"``); raises ``ValueError``."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a rate")
    if isinstance(value, (int, float)):
        out = float(value)
    else:
        text = str(value).strip()
        try:
            out = float(text)
        except ValueError:
            try:
                out = parse_rate(text)
            except ValueError:
                raise ValueError(f"{value!r} is not a rate (bits per second, or e.g. 100mbit, 1gbit)") from None
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{value!r} is not a rate (a finite number of bits per second, >= 0)")
    return out


_BYTE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_BYTES_RE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)
#: Decimal exponents above this are refused before ``int()`` builds the number: "1e999999999"
#: would otherwise take minutes and gigabytes, and no count or size here needs 300 digits.
_MAX_DIGITS = 300


def parse_bytes(text: str | int) -> int:
    """``"1M"`` -> 1048576, ``"1e6"`` -> 1000000; ints pass through. Raises ``ValueError`` when unreadable."""
    if isinstance(text, bool):
        raise ValueError(f"not a byte size: {text!r}")
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        if not math.isfinite(text):
            raise ValueError(f"not a byte size: {text!r}")
        # repr is the shortest text that reads back as this float: 1e30 stays 10**30, not 1e30's binary value
        text = repr(text)
    m = _BYTES_RE.match(str(text))
    if not m:
        raise ValueError(f"not a byte size: {text!r} (use e.g. 4096, 64K, 1M, 2G, 1e6)")
    number, unit = m.groups()
    # Decimal, not float: "1.5e3K" and 20-digit sizes stay exact
    return _whole(decimal.Decimal(number) * _BYTE_UNITS[unit.upper()], text, "a whole number of bytes")


def _whole(number: decimal.Decimal, text: Any, what: str) -> int:
    """``number`` as an exact int; ``ValueError`` naming ``text`` when it is not whole or too large."""
    if not number.is_finite():
        raise ValueError(f"{text!r} is not {what}")
    if number.adjusted() > _MAX_DIGITS:
        raise ValueError(f"{text!r} is too large (more than {_MAX_DIGITS} digits)")
    whole = int(number)  # truncates exactly; the comparison below is exact too
    if whole != number:
        raise ValueError(f"{text!r} is not {what}")
    return whole


def _parse_int(value: Any) -> int:
    """``"1e3"`` -> 1000 and ``"2.5e3"`` -> 2500, exactly; ``"1.5"``, ``"1e-1"``, booleans refused."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not an integer")
        text = repr(value)  # YAML's 1.0e3 is a float; its shortest text keeps big values exact
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise ValueError(f"{value!r} is not an integer")
    try:
        number = decimal.Decimal(text)
    except decimal.InvalidOperation:
        raise ValueError(f"{value!r} is not an integer") from None
    return _whole(number, value, "an integer")


def param(default: Any, doc: str, *, min: float | None = None, max: float | None = None,
          choices: typing.Sequence[Any] | None = None, allowed: str | None = None) -> Any:
    """Declare a config field with its documentation and allowed values.

    Args:
        default: the default value (lists are copied per instance).
        doc: what the field means and why the default was chosen.
        min, max: inclusive bounds for numbers (for lists: for every element).
        choices: the allowed values (for lists: for every element).
        allowed: what the config's ``validate()`` checks beyond the bounds ("an existing
            directory", "no repeats"), shown by ``hpcbench params``; it is documentation only,
            so a field that ``validate()`` checks must say so here or the listing understates it.
    """
    meta = {"doc": doc, "min": min, "max": max, "choices": tuple(choices) if choices else None,
            "allowed": allowed}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: json.loads(json.dumps(d)), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(value: Any, tp: Any, name: str) -> Any:
    """Coerce ``value`` to type ``tp``; raise ``ValueError`` with a short reason."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null", "")):
            if type(None) in get_args(tp):
                return None
        last: Exception | None = None
        for arg in args:
            try:
                return _coerce(value, arg, name)
            except (ValueError, TypeError) as exc:
                last = exc
        raise ValueError(str(last))
    if origin is Literal:
        allowed = get_args(tp)
        for a in allowed:
            if value == a or (isinstance(value, str) and str(a) == value):
                return a
        raise ValueError(f"{value!r} is not one of {list(allowed)}")
    if origin in (list, tuple):
        (item_tp, *_) = get_args(tp) or (str,)
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                value = json.loads(text)
            else:
                value = [v.strip() for v in text.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            value = [value]
        items = [_coerce(v, item_tp, name) for v in value]
        return items if origin is list else tuple(items)
    if tp is ByteSize:
        return ByteSize(parse_bytes(value))
    if tp is BitRate:
        return BitRate(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"{value!r} is not a boolean (true/false)")
    if tp is int:
        return _parse_int(value)
    if tp is float:
        if isinstance(value, bool):
            raise ValueError(f"{value!r} is not a number")
        try:
            out = float(value)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"{value!r} is not a number") from None
        # NaN fails every comparison and inf passes every lower bound, so either would slip
        # through min/max checks and break the run later (a bucket of inf MiB).
        if math.isnan(out):
            raise ValueError("NaN is not allowed")
        if math.isinf(out):
            raise ValueError(f"{value!r}: infinity is not allowed")
        return out
    if tp is str:
        if isinstance(value, (dict, list)):
            raise ValueError(f"{value!r} is not a string")
        return str(value)
    if tp is dict or origin is dict:
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, dict):
            raise ValueError(f"{value!r} is not a mapping")
        return dict(value)
    return value


def _describe_range(meta: typing.Mapping[str, Any]) -> str:
    """The declared choices or bounds of a field (of each element, for lists); "" when none."""
    if meta.get("choices"):
        return f"one of {list(meta['choices'])}"
    lo, hi = meta.get("min"), meta.get("max")
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    if lo is not None:
        return f">= {lo}"
    if hi is not None:
        return f"<= {hi}"
    return ""


_PLURAL = {int: "integers", float: "numbers", str: "texts", bool: "booleans", ByteSize: "byte sizes",
           BitRate: "rates"}


def _describe_type(tp: Any, plural: bool = False) -> str:
    """What the coercion accepts for a type, for fields without declared bounds."""
    if plural and tp in _PLURAL:
        return _PLURAL[tp]
    if tp is ByteSize:
        return "a byte size like 4096, 64K, 1M or 1e6"
    if tp is BitRate:
        return "a rate in bit/s like 1e9, or 100mbit, 1gbit"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "any integer"
    if tp is float:
        return "any finite number"
    if tp is str:
        return "any text"
    origin = get_origin(tp)
    if origin is Literal:
        return f"one of {list(get_args(tp))}"
    if origin in (list, tuple):
        return f"a list of {_describe_type((get_args(tp) or (str,))[0], plural=True)}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe_type(a) if a is not type(None) else "none" for a in get_args(tp))
    if tp is dict or origin is dict:
        return "a mapping"
    return _type_name(tp)


def _describe_allowed(meta: typing.Mapping[str, Any], tp: Any) -> str:
    """The allowed values as ``hpcbench params`` shows them: bounds, else the type, plus ``allowed=`` text."""
    bounds = _describe_range(meta)
    if bounds and get_origin(tp) in (list, tuple):
        bounds = f"a list, each {bounds}"
    extra = meta.get("allowed")
    if bounds:
        return f"{bounds}; {extra}" if extra else bounds
    # The allowed= text is more precise than the type ("an existing directory" vs "any text").
    return extra or _describe_type(tp)


@dataclass
class Config:
    """Base of every experiment config: dict in, validated typed dataclass out."""

    #: Shown in error messages; subclasses may override (defaults to the class name).
    config_name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            try:
                value = _coerce(value, hints[f.name], f.name)
            except (ValueError, TypeError, json.JSONDecodeError) as exc:
                raise self._error(f.name, f"{exc}; expected {_type_name(hints[f.name])}") from None
            object.__setattr__(self, f.name, value)
            self._check_range(f, value)
        self.validate()

    # -- subclass hook --------------------------------------------------------
    def validate(self) -> None:
        """Cross-field checks; raise ``self._error(field, message)``."""

    def worker_env(self) -> dict[str, str]:
        """Environment variables the worker ranks need before ``torch.distributed`` starts.

        The launcher sets them in the ranks' environment (locally and through ``srun``),
        e.g. NCCL settings, which NCCL reads once when its communicator is created.
        """
        return {}

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_dict(cls, values: typing.Mapping[str, Any] | None = None, **overrides: Any):
        """Build from a plain dict; unknown keys are rejected with the valid ones."""
        merged = {**(values or {}), **overrides}
        valid = cls.field_names()
        # key=str: a YAML key may be an int (``1: x``), and ints and strs do not sort together
        unknown = sorted((k for k in merged if k not in valid), key=str)
        if unknown:
            hint = did_you_mean(unknown, valid)
            raise ConfigError(
                f"unknown parameter(s) {unknown}" + (f" ({hint})" if hint else "") + f"; valid parameters: {valid}",
                config=cls._name(),
            )
        return cls(**merged)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """The default value of every field, as ``from_dict({})`` would resolve it."""
        return cls().to_dict()

    @classmethod
    def describe(cls) -> list[dict[str, Any]]:
        """One row per field: name, type, default, allowed values, documentation."""
        hints = typing.get_type_hints(cls)
        rows = []
        defaults = cls.defaults()
        for f in dataclasses.fields(cls):
            rows.append({
                "name": f.name,
                "type": _type_name(hints[f.name]),
                "default": defaults[f.name],
                "allowed": _describe_allowed(f.metadata, hints[f.name]),
                "doc": f.metadata.get("doc", ""),
            })
        return rows

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly values (ByteSize becomes a plain int)."""
        out = {}
        for f in dataclasses.fields(self):
            out[f.name] = _plain(getattr(self, f.name))
        return out

    # -- helpers --------------------------------------------------------------
    @classmethod
    def _name(cls) -> str:
        return cls.config_name or cls.__name__

    def _error(self, field: str, message: str) -> ConfigError:
        return ConfigError(message, field=field, config=self._name())

    def _check_range(self, f: dataclasses.Field, value: Any) -> None:
        meta = f.metadata
        if not meta:
            return
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            bad = False
            if meta.get("choices") and item not in meta["choices"]:
                bad = True
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                if meta.get("min") is not None and item < meta["min"]:
                    bad = True
                if meta.get("max") is not None and item > meta["max"]:
                    bad = True
            if bad:
                raise self._error(f.name, f"{item!r} is out of range; allowed: {_describe_range(meta)}")


def _plain(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, ByteSize):
        return int(value)
    if isinstance(value, BitRate):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _type_name(tp: Any) -> str:
    if tp is ByteSize:
        return "byte size (e.g. 4096, 64K, 1M, 1e6)"
    if tp is BitRate:
        return "rate in bit/s (e.g. 1e9, 100mbit, 1gbit)"
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (list, tuple):
        return f"list of {_type_name((get_args(tp) or (str,))[0])}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) if a is not type(None) else "none" for a in get_args(tp))
    return getattr(tp, "__name__", str(tp))



@dataclass
class DistributedConfig(Config):
    """What every distributed experiment shares: its layout and backend, first in its notebook's parameters.

    ``nodes > 1`` on one machine without SLURM is an emulated split of the local ranks
    (all traffic on one loopback); under SLURM or on the emulated cluster, real nodes.
    """

    nodes: int = param(1, "nodes; on one machine more than 1 is an emulated split of the local ranks",
                       min=1, max=4096)
    ranks_per_node: int = param(2, "ranks (GPUs, or CPU processes) per node", min=1, max=64,
                                allowed="an exchange between ranks (collectives, DDP) needs nodes x ranks_per_node "
                                        ">= 2")
    backend: str = param("auto", "auto: NCCL with a GPU per rank, else gloo", choices=("auto", "gloo", "nccl"))
