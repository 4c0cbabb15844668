"""The TFRecord wire format and the ``tf.train.Example`` message, without TensorFlow.

A TFRecord file is a sequence of records (tensorflow/core/lib/io/record_writer.cc)::

    uint64  length                   little endian
    uint32  masked_crc32c(length)    of the 8 length bytes
    byte    data[length]             here: a serialized tf.train.Example
    uint32  masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod 2^32) and CRC-32C
(Castagnoli). The Example message (tensorflow/core/example/{example,feature}.proto) is::

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }    // map entry: key = 1, value = 2
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                            Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }   Int64List { repeated int64 value = 1 [packed]; }

It is small and fixed, so it is encoded and decoded by hand here; the tests read our
files back with the PyPI ``tfrecord`` package (which uses the real protobuf classes).
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator, Mapping, Sequence

# AWS's common runtime: CRC-32C with the CPU's carry-less multiply (VPCLMULQDQ folding where there is
# AVX-512, else SSE4.2's crc32 or ARMv8's). On this project's VM 43 GB/s on 120 KB records against 20 GB/s
# for the crc32c package, and a TFRecord reader checks every byte it reads.
from awscrt.checksums import crc32c as _crc32c

from hpcbench.data.errors import CorruptRecordError

MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF
HEADER_BYTES = 12
FOOTER_BYTES = 4


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of ``data``."""
    crc = _crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & _U32) + MASK_DELTA) & _U32


def encode_record(data: bytes) -> bytes:
    """One framed TFRecord record holding ``data``."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data,
                     struct.pack("<I", masked_crc32c(data))))


def read_record(fh: BinaryIO, *, where: str = "") -> bytes | None:
    """Read the next record's data from ``fh``; ``None`` at a clean end of file.

    Raises:
        CorruptRecordError: a truncated record or a CRC mismatch (naming ``where``).
    """
    header = fh.read(HEADER_BYTES)
    if not header:
        return None
    if len(header) < HEADER_BYTES:
        raise CorruptRecordError(f"truncated record header ({len(header)} of {HEADER_BYTES} bytes)", path=where)
    length_bytes = header[:8]
    (length,) = struct.unpack("<Q", length_bytes)
    (length_crc,) = struct.unpack("<I", header[8:])
    if masked_crc32c(length_bytes) != length_crc:
        raise CorruptRecordError("record length fails its CRC-32C", path=where)
    body = fh.read(length + FOOTER_BYTES)
    if len(body) < length + FOOTER_BYTES:
        raise CorruptRecordError(f"truncated record ({len(body)} of {length + FOOTER_BYTES} bytes)", path=where)
    data = body[:length]
    (data_crc,) = struct.unpack("<I", body[length:])
    if masked_crc32c(data) != data_crc:
        raise CorruptRecordError("record data fails its CRC-32C", path=where)
    return data


def check_record(record: memoryview, length: int, *, where: str = "") -> None:
    """Check one whole framed record (header, ``length`` data bytes, footer) read into ``record``.

    Raises:
        CorruptRecordError: a CRC mismatch or another length than the index says (naming ``where``).
    """
    (got, length_crc) = struct.unpack_from("<QI", record, 0)
    if masked_crc32c(record[:8]) != length_crc:
        raise CorruptRecordError("record length fails its CRC-32C", path=where)
    if got != length or len(record) != HEADER_BYTES + length + FOOTER_BYTES:
        raise CorruptRecordError(f"record holds {got} bytes where the shard's index says {length}", path=where)
    (data_crc,) = struct.unpack_from("<I", record, HEADER_BYTES + length)
    if masked_crc32c(record[HEADER_BYTES:HEADER_BYTES + length]) != data_crc:
        raise CorruptRecordError("record data fails its CRC-32C", path=where)


def skip_record(fh: BinaryIO, *, where: str = "") -> bool:
    """Seek over the next record (its length is CRC-checked); ``False`` at end of file."""
    header = fh.read(HEADER_BYTES)
    if not header:
        return False
    if len(header) < HEADER_BYTES or masked_crc32c(header[:8]) != struct.unpack("<I", header[8:])[0]:
        raise CorruptRecordError("bad record header while seeking", path=where)
    (length,) = struct.unpack("<Q", header[:8])
    fh.seek(length + FOOTER_BYTES, 1)
    return True


# -- protobuf wire format -----------------------------------------------------------

_VARINT, _LEN = 0, 2


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 negatives are 10-byte two's complement varints
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _tag(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _len_field(field: int, payload: bytes) -> bytes:
    return _tag(field, _LEN) + _varint(len(payload)) + payload


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("truncated varint in an Example")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes in an Example")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a message: ints for varints, memoryviews for LEN."""
    for field, wire, value, _ in _fields_at(buf):
        yield field, wire, value


def _fields_at(buf: memoryview) -> Iterator[tuple[int, int, object, int]]:
    """:func:`_fields` with where each value starts in ``buf``."""
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        start = pos
        if wire == _VARINT:
            value, pos = _read_varint(buf, pos)
        elif wire == _LEN:
            n, pos = _read_varint(buf, pos)
            start = pos
            if pos + n > len(buf):
                raise CorruptRecordError("length-delimited field runs past the end of an Example")
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        else:
            raise CorruptRecordError(f"unsupported protobuf wire type {wire} in an Example")
        yield field, wire, value, start


Feature = Sequence[bytes] | Sequence[int]


def encode_example(features: Mapping[str, bytes | int | Feature]) -> bytes:
    """Serialize a ``tf.train.Example``: ``bytes`` values become BytesList, ``int`` Int64List."""
    entries = []
    for key, value in features.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        if all(isinstance(v, (bytes, bytearray, memoryview)) for v in values):
            inner = b"".join(_len_field(1, bytes(v)) for v in values)
            feature = _len_field(1, inner)                                   # bytes_list
        elif all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            packed = b"".join(_varint(v) for v in values)
            feature = _len_field(3, _len_field(1, packed))                   # int64_list, packed
        else:
            raise TypeError(f"feature {key!r}: only bytes or int values are supported")
        entries.append(_len_field(1, _len_field(1, key.encode()) + _len_field(2, feature)))
    return _len_field(1, b"".join(entries))


def _int64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_example(data: bytes) -> dict[str, list[bytes] | list[int]]:
    """Parse a serialized ``tf.train.Example`` into {name: list of bytes or ints}."""
    out: dict[str, list] = {}
    for field, _, features in _fields(memoryview(data)):
        if field != 1:
            continue
        for efield, _, entry in _fields(features):
            if efield != 1:
                continue
            key, feature = "", memoryview(b"")
            for f, _, v in _fields(entry):
                if f == 1:
                    key = bytes(v).decode()
                elif f == 2:
                    feature = v
            values: list = []
            for kind, _, lst in _fields(feature):
                for f, wire, v in _fields(lst):
                    if f != 1:
                        continue
                    if kind == 1:
                        values.append(bytes(v))
                    elif kind == 3 and wire == _LEN:          # packed int64
                        pos = 0
                        while pos < len(v):
                            n, pos = _read_varint(v, pos)
                            values.append(_int64(n))
                    elif kind == 3:
                        values.append(_int64(v))
                    elif kind == 2 and wire == _LEN:          # packed floats
                        values.extend(struct.unpack(f"<{len(v) // 4}f", v))
            out[key] = values
    return out


def bytes_feature_span(data: bytes | memoryview, name: str) -> tuple[int, int] | None:
    """(offset, length) in a serialized Example of bytes feature ``name``'s first value; None without one.

    What lets a reader that indexed a shard once copy the value straight out of each record.
    """
    buf = memoryview(data)
    for field, _, features, at_features in _fields_at(buf):
        if field != 1:
            continue
        for efield, _, entry, at_entry in _fields_at(features):
            if efield != 1:
                continue
            key, feature, at_feature = "", memoryview(b""), 0
            for f, _, v, at in _fields_at(entry):
                if f == 1:
                    key = bytes(v).decode()
                elif f == 2:
                    feature, at_feature = v, at
            if key != name:
                continue
            for kind, _, lst, at_list in _fields_at(feature):
                if kind != 1:
                    return None
                for f, _, v, at in _fields_at(lst):
                    if f == 1:
                        return at_features + at_entry + at_feature + at_list + at, len(v)
    return None
