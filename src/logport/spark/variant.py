"""Stored record values -> Spark VARIANT (value, metadata) binaries, as Spark's common/variant README lays them out.

A VARIANT travels in an Arrow batch as struct<value: binary, metadata: binary> with the field
metadata {"variant": "true"} on `metadata` (pyspark.sql.pandas.types.to_arrow_type). The input
is what the source unpacks from msgpack (ext_hook=slice): every value maps to the variant type
closest to it, and the JSON text of the result (`to_json(record)`) is the JSON `logport cat`
prints, apart from number formatting: bin is BINARY (JSON: base64), an EventTime inside a
record is the array [seconds, nanoseconds], any other ext the string the JSON form has.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import msgpack
import pyarrow as pa

from logport.batch import ext_hook
from logport.errors import LogportError

VARIANT_TYPE = pa.struct([
    pa.field("value", pa.binary(), nullable=False),
    pa.field("metadata", pa.binary(), nullable=False, metadata={b"variant": b"true"}),
])
# Spark refuses a variant whose value or metadata is this size or more (VariantUtil.SIZE_LIMIT, 16 MiB).
SIZE_LIMIT = 16 * 1024 * 1024

_VERSION = 1
_PRIMITIVE, _SHORT_STR, _OBJECT, _ARRAY = 0, 1, 2, 3
_NULL = bytes([0 << 2])
_TRUE = bytes([1 << 2])
_FALSE = bytes([2 << 2])
_INT1, _INT2, _INT4, _INT8, _DOUBLE, _DECIMAL16, _BINARY, _LONG_STR = 3, 4, 5, 6, 7, 10, 15, 16
_MAX_SHORT_STR = 0x3F
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
_DOUBLE_STRUCT = struct.Struct("<d")
_U32 = struct.Struct("<I")


class VariantTooLarge(LogportError, ValueError):
    """A value whose variant form Spark would refuse (value or metadata of SIZE_LIMIT bytes or more)."""


def _primitive(type_id: int) -> int:
    return type_id << 2 | _PRIMITIVE


def _int_size(value: int) -> int:
    """Bytes (1-4) of the smallest unsigned little-endian integer that holds `value`."""
    return 1 if value <= 0xFF else 2 if value <= 0xFFFF else 3 if value <= 0xFFFFFF else 4


class VariantEncoder:
    """Encodes one value at a time; the metadata's dictionary holds the keys of that value's objects."""

    def __init__(self) -> None:
        self._keys: dict[str, int] = {}
        self._encoders: dict[type, Callable[[Any], bytes]] = {
            type(None): lambda _: _NULL,
            bool: lambda v: _TRUE if v else _FALSE,
            int: self._int,
            float: lambda v: bytes([_primitive(_DOUBLE)]) + _DOUBLE_STRUCT.pack(v),
            str: self._str,
            bytes: lambda v: bytes([_primitive(_BINARY)]) + _U32.pack(len(v)) + v,
            tuple: self._array,
            list: self._array,
            dict: self._object,
            slice: lambda v: self._value(ext_hook(v.start, v.stop)),  # an ext, as batch.ext_hook makes it
        }

    def encode(self, value: Any) -> tuple[bytes, bytes]:
        """(value, metadata) of `value`; VariantTooLarge when Spark would refuse either."""
        self._keys = {}
        encoded = self._value(value)
        metadata = self._metadata()
        if len(encoded) >= SIZE_LIMIT or len(metadata) >= SIZE_LIMIT:
            raise VariantTooLarge(f"variant of {len(encoded)} value and {len(metadata)} metadata bytes reaches "
                                  f"Spark's limit of {SIZE_LIMIT} bytes")
        return encoded, metadata

    def _value(self, value: Any) -> bytes:
        encoder = self._encoders.get(type(value))
        if encoder is None:
            return self._other(value)
        return encoder(value)

    def _other(self, value: Any) -> bytes:
        """Subclasses and the rest: as eventjson.json_default prints them (bytes-like, tuples, else str)."""
        for kind in (bool, int, float, str, dict, list, tuple):
            if isinstance(value, kind):
                return self._encoders[kind](value)
        if isinstance(value, bytes | bytearray | memoryview):
            return self._encoders[bytes](bytes(value))
        return self._str(str(value))

    def _int(self, value: int) -> bytes:
        if -0x80 <= value <= 0x7F:
            return bytes([_primitive(_INT1)]) + value.to_bytes(1, "little", signed=True)
        if -0x8000 <= value <= 0x7FFF:
            return bytes([_primitive(_INT2)]) + value.to_bytes(2, "little", signed=True)
        if -0x80000000 <= value <= 0x7FFFFFFF:
            return bytes([_primitive(_INT4)]) + value.to_bytes(4, "little", signed=True)
        if _I64_MIN <= value <= _I64_MAX:
            return bytes([_primitive(_INT8)]) + value.to_bytes(8, "little", signed=True)
        # msgpack's uint64 above int64: an exact decimal(38, 0).
        return bytes([_primitive(_DECIMAL16), 0]) + value.to_bytes(16, "little", signed=True)

    def _str(self, value: str) -> bytes:
        data = value.encode("utf-8", "replace")
        if len(data) <= _MAX_SHORT_STR:
            return bytes([len(data) << 2 | _SHORT_STR]) + data
        return bytes([_primitive(_LONG_STR)]) + _U32.pack(len(data)) + data

    def _array(self, items: list[Any] | tuple[Any, ...]) -> bytes:
        values = [self._value(item) for item in items]
        return self._container(_ARRAY, [], values)

    def _object(self, mapping: dict[Any, Any]) -> bytes:
        fields: dict[str, Any] = {}
        for key, value in mapping.items():  # keys as orjson's OPT_NON_STR_KEYS writes them; the last one wins
            fields[key if type(key) is str else _key_text(key)] = value
        names = sorted(fields)
        if not all(map(str.isascii, names)):  # Spark orders field names as Java strings: UTF-16 code units
            names.sort(key=lambda name: name.encode("utf-16-be", "surrogatepass"))
        keys = self._keys
        ids = [keys.setdefault(name, len(keys)) for name in names]
        values = [self._value(fields[name]) for name in names]
        return self._container(_OBJECT, ids, values)

    def _container(self, basic_type: int, ids: list[int], values: list[bytes]) -> bytes:
        """An object (field ids sorted by name, values in the same order) or an array (no ids)."""
        n = len(values)
        offsets = [0]
        total = 0
        for value in values:
            total += len(value)
            offsets.append(total)
        offset_size = _int_size(total)
        large = n > 0xFF
        if basic_type == _OBJECT:
            id_size = _int_size(max(ids, default=0))
            header = (large << 4 | (id_size - 1) << 2 | (offset_size - 1)) << 2 | _OBJECT
            id_bytes = b"".join(i.to_bytes(id_size, "little") for i in ids)
        else:
            header = (large << 2 | (offset_size - 1)) << 2 | _ARRAY
            id_bytes = b""
        count = n.to_bytes(4 if large else 1, "little")
        offset_bytes = b"".join(o.to_bytes(offset_size, "little") for o in offsets)
        return b"".join((bytes([header]), count, id_bytes, offset_bytes, *values))

    def _metadata(self) -> bytes:
        names = [name.encode("utf-8", "replace") for name in self._keys]
        offsets = [0]
        for name in names:
            offsets.append(offsets[-1] + len(name))
        offset_size = _int_size(max(offsets[-1], len(names)))
        header = (offset_size - 1) << 6 | _VERSION  # dictionary in first-use order: not sorted
        return b"".join((bytes([header]), len(names).to_bytes(offset_size, "little"),
                         *(o.to_bytes(offset_size, "little") for o in offsets), *names))


def _key_text(key: Any) -> str:
    """A non-str map key as orjson (OPT_NON_STR_KEYS) and json_default write it."""
    if key is None:
        return "null"
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int | float):
        return str(key)
    if isinstance(key, bytes | bytearray | memoryview):
        import base64

        return base64.b64encode(bytes(key)).decode()
    if isinstance(key, tuple):
        return str(list(key))
    return str(key)


def encode_variant(value: Any) -> tuple[bytes, bytes]:
    """(value, metadata) of one value (see VariantEncoder)."""
    return VariantEncoder().encode(value)


def record_msgpack(record: Any) -> bytes:
    """A record unpacked with ext_hook=slice, packed again (for a record too large to be a variant)."""
    def default(value: Any) -> Any:
        if type(value) is slice:
            return msgpack.ExtType(value.start, value.stop)
        raise TypeError(f"cannot pack {type(value).__name__}")

    return msgpack.packb(record, default=default, use_bin_type=True)
