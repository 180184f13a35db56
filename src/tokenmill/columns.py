"""Arrow tables from Python rows without pa.array: the same table as pa.Table.from_pylist(rows, schema=...).

Any conversion of Python objects to Arrow (pa.array, pa.scalar, Table.from_pylist) first checks whether the
objects are pandas objects, which imports pandas: 0.15 CPU-s once per process, a quarter of the whole
decontaminate stage on benchmarks/bench_decontam.py (2,798 documents, 0.6 CPU-s). Arrays assembled from
buffers (Array.from_buffers over numpy arrays and bytes) skip that check. Only the column types of
schema.DECISION and CONTAMINATION are handled; tests/test_decontam.py compares with from_pylist.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import pyarrow as pa


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    valid = np.fromiter((v is not None for v in values), np.bool_, len(values))
    nulls = len(values) - int(valid.sum())
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


def _offsets(lengths: Sequence[int], large: bool) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(np.asarray(lengths, np.int64), out=out[1:])
    if not large and out[-1] >= 2**31:
        raise OverflowError("more than 2 GiB of strings in one column")
    return out if large else out.astype(np.int32)


def _strings(values: Sequence[str | None], type_: pa.DataType) -> pa.Array:
    data = [b"" if v is None else v.encode() for v in values]
    validity, nulls = _validity(values)
    offsets = _offsets([len(d) for d in data], pa.types.is_large_string(type_))
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))],
                                 null_count=nulls)


def _numbers(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    validity, nulls = _validity(values)
    if pa.types.is_boolean(type_):
        bits = np.packbits(np.fromiter((bool(v) for v in values), np.bool_, len(values)), bitorder="little")
        return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(bits)], null_count=nulls)
    dtype = np.int64 if pa.types.is_int64(type_) else np.float64
    data = np.fromiter((0 if v is None else v for v in values), dtype, len(values))
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(data)], null_count=nulls)


def _map(values: Sequence[Any], type_: pa.MapType) -> pa.Array:
    """values: per row, (key, value) pairs (a list or dict items) or None."""
    pairs = [[] if v is None else list(v.items() if isinstance(v, dict) else v) for v in values]
    keys = _column([k for p in pairs for k, _ in p], type_.key_type)
    items = _column([x for p in pairs for _, x in p], type_.item_type)
    entries = pa.StructArray.from_arrays([keys, items], fields=[type_.key_field, type_.item_field])
    validity, nulls = _validity(values)
    offsets = _offsets([len(p) for p in pairs], large=False)
    return pa.Array.from_buffers(type_, len(values), [validity, pa.py_buffer(offsets)], null_count=nulls,
                                 children=[entries])


def _column(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return _strings(values, type_)
    if pa.types.is_boolean(type_) or pa.types.is_int64(type_) or pa.types.is_float64(type_):
        return _numbers(values, type_)
    if pa.types.is_map(type_):
        return _map(values, type_)
    raise TypeError(f"no column of type {type_} here")


def table(rows: Sequence[dict], schema: pa.Schema) -> pa.Table:
    """pa.Table.from_pylist(rows, schema=schema) for string, int64, float64, bool and map columns."""
    return pa.Table.from_arrays([_column([r.get(f.name) for r in rows], f.type) for f in schema], schema=schema)
