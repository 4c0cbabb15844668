"""The one results schema: round trip, atomic writes, clear errors on foreign files."""

import json
import math

import pandas as pd
import pytest

from hpcbench.core.errors import ResultsError
from hpcbench.core.results import COLUMNS, RecordContext, RecordWriter, find_record_files, read_records


def ctx(**kw):
    base = dict(run_id="r1", suite="demo", experiment="collectives", variant="v", task_id="t",
                repetition=1, params={"iters": 3, "ops": ["all_reduce"]}, node="n1", rank=2, world_size=4)
    base.update(kw)
    return RecordContext(**base)


def test_round_trip(tmp_path):
    path = tmp_path / "records" / "x-rank00002.parquet"
    with RecordWriter(path, ctx()) as w:
        w.add("time", 0.5, "s", step=0, labels={"op": "all_reduce", "size_bytes": 1024})
        w.add("time", 0.25, "s", step=1, labels={"op": "all_reduce", "size_bytes": 1024})
        w.add("busbw", None, "GB/s", text="not applicable: one node")
    df = read_records(path)
    assert list(df.columns) == COLUMNS
    assert len(df) == 3
    assert df["value"].iloc[:2].tolist() == [0.5, 0.25]
    assert math.isnan(df["value"].iloc[2]) and df["text"].iloc[2] == "not applicable: one node"
    assert json.loads(df["params"].iloc[0]) == {"iters": 3, "ops": ["all_reduce"]}
    assert json.loads(df["labels"].iloc[1]) == {"op": "all_reduce", "size_bytes": 1024}
    assert set(df["rank"]) == {2} and set(df["world_size"]) == {4} and set(df["node"]) == {"n1"}
    assert df["time"].dt.tz is not None


def test_rows_survive_an_exception_and_no_temp_files_remain(tmp_path):
    path = tmp_path / "a.parquet"
    with pytest.raises(RuntimeError):
        with RecordWriter(path, ctx()) as w:
            w.add("time", 1.0, "s")
            raise RuntimeError("boom")
    assert len(read_records(path)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["a.parquet"]


def test_parallel_writers_each_own_a_file(tmp_path):
    for rank in range(4):
        with RecordWriter(tmp_path / f"x-rank{rank}.parquet", ctx(rank=rank)) as w:
            w.add("time", float(rank), "s")
    files = find_record_files(tmp_path)
    df = pd.concat([read_records(p) for p in files])
    assert sorted(df["rank"]) == [0, 1, 2, 3]


def test_corrupt_and_foreign_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(ResultsError, match="bad.parquet.*not a readable Parquet"):
        read_records(bad)
    foreign = tmp_path / "foreign.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(foreign)
    with pytest.raises(ResultsError, match="foreign.parquet.*missing columns"):
        read_records(foreign)


def test_non_numeric_value_is_rejected(tmp_path):
    w = RecordWriter(tmp_path / "x.parquet", ctx())
    with pytest.raises(TypeError, match="metric 'time'"):
        w.add("time", "fast", "s")


def test_columns_built_from_buffers_equal_pyarrows_own_conversion(tmp_path):
    """The writer builds its columns from buffers (no pandas in a rank): the same table as pa.Table.from_pydict,
    with unicode, null texts, NaN values and an empty file."""
    import pyarrow as pa

    from hpcbench.core.results import SCHEMA, arrow_column

    columns = {"run_id": ["r", "r", "r"], "suite": ["", "", ""], "experiment": ["é", "é", "é"],
               "variant": ["v"] * 3, "task_id": ["t"] * 3, "repetition": [2] * 3, "params": ["{}"] * 3,
               "node": ["n1"] * 3, "rank": [1] * 3, "world_size": [4] * 3, "metric": ["a", "b∑", "c"],
               "value": [1.5, float("nan"), -2.0], "unit": ["s", "", "GB/s"], "step": [0, 1, 2 ** 40],
               "time": [0, 1764770000123456, 1], "labels": ['{"k": 1}', "{}", "{}"], "text": [None, "x", None]}
    for n in (3, 0):
        cols = {k: v[:n] for k, v in columns.items()}
        ours = pa.Table.from_arrays([arrow_column(f.type, cols[f.name]) for f in SCHEMA], schema=SCHEMA)
        ours.validate(full=True)
        theirs = pa.Table.from_pydict(cols, schema=SCHEMA)
        assert ours.schema.equals(theirs.schema, check_metadata=True)
        for name in SCHEMA.names:  # to_pylist: Arrow's equals() holds NaN unequal to itself
            got, want = ours[name].to_pylist(), theirs[name].to_pylist()
            assert [None if x != x else x for x in got] == [None if x != x else x for x in want], name
            assert ours[name].null_count == theirs[name].null_count, name
    with pytest.raises(KeyError, match="bool"):
        arrow_column(pa.bool_(), [True])
