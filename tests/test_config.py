"""Config coercion and errors (hpcbench.core.config) on a purpose-built config and on the real ones."""

import json
from dataclasses import dataclass
from typing import Literal

import pytest

from hpcbench.experiments.collectives.config import CollectivesConfig
from hpcbench.core.config import ByteSize, Config, param, parse_bytes
from hpcbench.core.errors import ConfigError, HpcbenchError


@dataclass
class Demo(Config):
    iters: int = param(10, "timed iterations", min=1, max=100)
    rate: float = param(0.5, "a fraction", min=0.0, max=1.0)
    flag: bool = param(True, "a switch")
    size: ByteSize = param(ByteSize(1024), "bytes", min=1)
    mode: Literal["a", "b"] = param("a", "a literal")
    names: list[str] = param(["x", "y"], "names", choices=("x", "y", "z"))
    note: str | None = param(None, "optional text")


def test_defaults_and_types():
    cfg = Demo.from_dict({})
    assert cfg.to_dict() == {"iters": 10, "rate": 0.5, "flag": True, "size": 1024, "mode": "a",
                             "names": ["x", "y"], "note": None}


def test_strings_are_coerced_to_field_types():
    cfg = Demo.from_dict({"iters": "7", "rate": "0.25", "flag": "false", "size": "2M",
                          "names": "z,x", "note": "hello", "mode": "b"})
    assert cfg.iters == 7 and isinstance(cfg.iters, int)
    assert cfg.rate == 0.25
    assert cfg.flag is False
    assert cfg.size == 2 * 1024 * 1024 and isinstance(cfg.size, ByteSize)
    assert cfg.names == ["z", "x"]
    assert cfg.mode == "b"
    assert Demo.from_dict({"names": '["y"]', "note": "none"}).names == ["y"]
    assert Demo.from_dict({"note": "none"}).note is None


def test_unknown_key_lists_valid_ones():
    with pytest.raises(ConfigError) as exc:
        Demo.from_dict({"itres": 3})
    msg = str(exc.value)
    assert "itres" in msg and "iters" in msg and "names" in msg


@pytest.mark.parametrize("key,value,needle", [
    ("iters", 0, "between 1 and 100"),
    ("iters", "many", "not an integer"),
    ("iters", 2.5, "not an integer"),
    ("iters", True, "not an integer"),
    ("rate", 1.5, "between 0.0 and 1.0"),
    ("flag", "maybe", "not a boolean"),
    ("size", "12Q", "not a byte size"),
    ("mode", "c", "not one of"),
    ("names", "x,w", "one of ['x', 'y', 'z']"),
])
def test_invalid_values_name_field_and_range(key, value, needle):
    with pytest.raises(ConfigError) as exc:
        Demo.from_dict({key: value})
    assert f"Demo.{key}" in str(exc.value)
    assert needle in str(exc.value)
    assert exc.value.field == key
    assert isinstance(exc.value, HpcbenchError)


def test_byte_sizes():
    assert parse_bytes("64K") == 65536
    assert parse_bytes("1MiB") == 1 << 20
    assert parse_bytes("1.5K") == 1536
    assert parse_bytes(4096) == 4096
    with pytest.raises(ValueError):
        parse_bytes("1.3B")


def test_collectives_config_cross_field_checks():
    with pytest.raises(ConfigError, match="min_bytes.*larger than max_bytes"):
        CollectivesConfig.from_dict({"min_bytes": "1M", "max_bytes": "1K"})
    with pytest.raises(ConfigError, match="at least 2 ranks"):
        CollectivesConfig.from_dict({"nodes": 1, "ranks_per_node": 1})
    with pytest.raises(ConfigError, match="ops"):
        CollectivesConfig.from_dict({"ops": "all_reduce,alltoall"})
    cfg = CollectivesConfig.from_dict({"max_bytes": "16M", "ops": "all_reduce", "nodes": "2"})
    assert cfg.max_bytes == 16 << 20 and cfg.ops == ["all_reduce"] and cfg.nodes == 2


def test_describe_documents_every_field():
    rows = CollectivesConfig.describe()
    assert [r["name"] for r in rows] == CollectivesConfig.field_names()
    assert all(r["doc"] for r in rows)
    assert next(r for r in rows if r["name"] == "step_factor")["allowed"] == "between 2 and 1024"


def test_a_bit_rate_is_one_number_of_bits_per_second_whatever_its_spelling():
    from hpcbench.core.config import BitRate
    from hpcbench.core.tc import format_rate, parse_rate

    assert BitRate("800mbit") == BitRate(800e6) == BitRate("8e8") == 800e6
    assert BitRate("10mbps") == 80e6  # tc's bps is bytes per second
    assert str(BitRate(1e9)) == "1 Gbit/s" and str(BitRate(1333e6)) == "1.333 Gbit/s"
    assert json.loads(json.dumps(BitRate("1gbit"))) == 1e9  # a plain number in cluster.json and records
    assert parse_rate(format_rate(BitRate("123.4mbit"))) == 123.4e6  # tc's text only where tc runs
    for bad in ("fast", "-1", "inf", True, "1 gbit/s"):
        with pytest.raises(ValueError):
            BitRate(bad)
