"""The long connection's frames: protobuf `pbbp2.Frame`, as lark-oapi's `ws/pb/pbbp2.proto`
defines it, encoded here by hand so the emulator needs neither protobuf nor the SDK (whose
import takes seconds).

    message Header { required string key = 1; required string value = 2; }
    message Frame {
      required uint64 SeqID = 1; required uint64 LogID = 2;
      required int32 service = 3; required int32 method = 4;   // 0 control, 1 data
      repeated Header headers = 5;
      optional string payload_encoding = 6; optional string payload_type = 7;
      optional bytes payload = 8; optional string LogIDNew = 9;
    }
"""

from __future__ import annotations

from dataclasses import dataclass, field

CONTROL, DATA = 0, 1
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_U64 = (1 << 64) - 1


@dataclass
class Frame:
    seq_id: int = 0
    log_id: int = 0
    service: int = 0
    method: int = CONTROL
    headers: list[tuple[str, str]] = field(default_factory=list)
    payload_encoding: str | None = None
    payload_type: str | None = None
    payload: bytes | None = None
    log_id_new: str | None = None

    def header(self, key: str) -> str | None:
        return next((value for k, value in self.headers if k == key), None)

    def encode(self) -> bytes:
        out = bytearray()
        for number, value in enumerate(
            (self.seq_id, self.log_id, self.service, self.method), start=1
        ):
            out += _key(number, _VARINT) + _varint(value & _U64)  # required: always written
        for name, text in self.headers:
            out += _bytes_field(5, _bytes_field(1, name.encode()) + _bytes_field(2, text.encode()))
        for number, optional in ((6, self.payload_encoding), (7, self.payload_type)):
            if optional is not None:
                out += _bytes_field(number, optional.encode())
        if self.payload is not None:
            out += _bytes_field(8, self.payload)
        if self.log_id_new is not None:
            out += _bytes_field(9, self.log_id_new.encode())
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> Frame:
        frame = cls()
        for number, value in _fields(data):
            if number == 1 and isinstance(value, int):
                frame.seq_id = value
            elif number == 2 and isinstance(value, int):
                frame.log_id = value
            elif number in (3, 4) and isinstance(value, int):
                signed = value - (1 << 64) if value >= 1 << 63 else value  # int32
                if number == 3:
                    frame.service = signed
                else:
                    frame.method = signed
            elif number == 5 and isinstance(value, bytes):
                pair = {n: v for n, v in _fields(value) if isinstance(v, bytes)}
                frame.headers.append((pair.get(1, b"").decode(), pair.get(2, b"").decode()))
            elif number == 6 and isinstance(value, bytes):
                frame.payload_encoding = value.decode()
            elif number == 7 and isinstance(value, bytes):
                frame.payload_type = value.decode()
            elif number == 8 and isinstance(value, bytes):
                frame.payload = value
            elif number == 9 and isinstance(value, bytes):
                frame.log_id_new = value.decode()
        return frame


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _key(number, _LEN) + _varint(len(data)) + data


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise ValueError("a truncated frame")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) in order: an int for a varint, bytes for a length-delimited
    field; fixed-size fields are skipped."""
    found: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _read_varint(data, at)
            found.append((number, value))
        elif wire == _LEN:
            size, at = _read_varint(data, at)
            if at + size > len(data):
                raise ValueError("a truncated frame")
            found.append((number, data[at : at + size]))
            at += size
        elif wire in (_I64, _I32):
            at += 8 if wire == _I64 else 4
        else:
            raise ValueError(f"wire type {wire} is not protobuf's")
    return found
