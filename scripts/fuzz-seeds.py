#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (crates/*/fuzz/corpus/TARGET/): one valid input of
each kind, byte for byte as docs/FORMAT.md lays it out, so that the fuzzer starts past the
checksums. Run from the repository root; the output is committed."""
import json, os, struct

def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF

def crc32c_append(crc, data):
    return crc32c(data, crc)

def record(kind, payload, seq, batch_end):
    header_rest = struct.pack("<IIBBH", len(payload), seq, kind, 1 if batch_end else 0, 0)
    crc = crc32c_append(crc32c(payload), header_rest)
    return struct.pack("<I", crc) + header_rest + payload

def put(seq, device, sensor, ts, value, end=True):
    d, s = device.encode(), sensor.encode()
    payload = struct.pack("<HHIq", len(d), len(s), len(value), ts) + d + s + value
    return record(2, payload, seq, end)

def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])

def zigzag(d):
    return (d << 1) ^ (d >> 63) if d >= 0 else ((d << 1) ^ -1) & ((1 << 64) - 1)

def puts(seq, device, readings, end=True):
    """A PUTS record (segment format 3): one device's readings, (sensor, ts, value) each."""
    d = device.encode()
    payload = struct.pack("<HHq", len(d), len(readings), readings[0][1]) + d
    prev = readings[0][1]
    for sensor, ts, value in readings:
        s = sensor.encode()
        payload += varint(len(s)) + varint(len(value)) + varint(zigzag(ts - prev)) + s + value
        prev = ts
    return record(6, payload, seq, end)

def register(seq, device, at_ms):
    d = device.encode()
    return record(1, struct.pack("<HQ", len(d), at_ms) + d, seq, False)

def depart(seq, device):
    d = device.encode()
    return record(3, struct.pack("<H", len(d)) + d, seq, True)

def trim(seq, device, before_ns):
    d = device.encode()
    return record(5, struct.pack("<Hq", len(d), before_ns) + d, seq, True)

def segment_end(seq, next_seq, sealed_at_ms):
    return record(4, struct.pack("<QQ", next_seq, sealed_at_ms), seq, True)

def segment(seq, size, records, version=3):
    """The first bytes of a segment file of `size` bytes: the fuzz target (and the corpus test)
    extend the file with zeros to the size its header claims, so seeds stay small."""
    fields = b"RKVLOG01" + struct.pack("<IIQQ", version, 0, seq, size)
    header = fields + struct.pack("<I", crc32c(fields))
    header += b"\0" * (4096 - len(header))
    return header + records

def settled_key(lower_id, sensor, ts):
    return struct.pack(">Q", lower_id) + sensor.encode() + b"\0" + struct.pack(">Q", (ts & (2**64 - 1)) ^ (1 << 63))

def run_key(win, lower_id, sensor, ts):
    return struct.pack(">Q", win) + settled_key(lower_id, sensor, ts)

def device_record(registered_at_ms, settled, trims, name):
    out = struct.pack("<QBH", registered_at_ms, 1 if settled else 0, len(trims))
    for before_ns, upto_win in trims:
        out += struct.pack("<qQ", before_ns, upto_win)
    return out + name.encode()

def write(crate, target, name, data):
    path = os.path.join("crates", crate, "fuzz", "corpus", target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)

batch = register(9, "car-1", 1234) + put(9, "car-1", "speed", 7, b"88.5", end=False) + put(9, "car-1", "rpm", 7, b"\xff\x00")  + depart(9, "car-1")
write("engine", "record_decode", "put", put(9, "car-17", "speed", 1700000000000000000, b"88.5"))
write("engine", "record_decode", "register", register(9, "car-17", 42))
write("engine", "record_decode", "depart", depart(9, "car-17"))
write("engine", "record_decode", "trim", trim(9, "car-17", 1700000000000000000))
write("engine", "record_decode", "segment-end", segment_end(9, 10, 1700000000000))
write("engine", "record_decode", "batch", batch)
write("engine", "record_decode", "puts", puts(9, "car-17", [("speed", 1700000000000000000, b"88.5"), ("rpm", 1700000000000000000, b"3000"), ("speed", 1700000001000000000, b"89.0")]))
write("engine", "segment_open", "segment-with-a-batch", segment(5, 1 << 20, register(5, "car-1", 1) + put(5, "car-1", "speed", -3, b"v"), version=2))
write("engine", "segment_open", "segment-with-puts", segment(5, 1 << 20, register(5, "car-1", 1) + puts(5, "car-1", [("speed", -3, b"v"), ("speed", -2, b"w")])))
write("engine", "segment_open", "empty-segment", segment(5, 1 << 20, b""))
write("engine", "segment_open", "torn-tail", segment(5, 1 << 20, put(5, "car-1", "speed", 1, b"v", end=False)))
write("engine", "key_decode", "run-key", run_key(3, 42, "speed", -42))
write("engine", "key_decode", "settled-key", settled_key(42, "speed", -42))
write("engine", "key_decode", "catalog-device-key", b"\x01" + struct.pack(">Q", 9))
write("engine", "key_decode", "membership-key", b"\x01" + struct.pack(">QQ", 9, 3))
write("engine", "key_decode", "device-record", device_record(77, True, [(-1, 9)], "car-1"))
write("engine", "key_decode", "catalog-meta", struct.pack("<IQQQ", 1, 3, 4, 5))
for name, line in [
    ("text", {"device": "car-17", "sensor": "speed", "ts": 1700000000000, "value": "88.5"}),
    ("base64", {"device": "car-17", "sensor": "raw", "ts": -1, "value_b64": "/wA="}),
    ("both", {"device": "d", "sensor": "s", "ts": 0, "value": "x", "value_b64": "eA=="}),
    ("ts-ns", {"device": "d", "sensor": "s", "ts_ns": 1700000000000000001, "value": "v"}),
    ("rfc3339", {"device": "d", "sensor": "s", "ts": "2026-11-23T10:00:00.5Z", "value": "v"}),
    ("both-times", {"device": "d", "sensor": "s", "ts_ns": -5, "ts": "-1h", "value": "v"}),
]:
    write("cli", "json_line", name, json.dumps(line).encode())
write("cli", "json_line", "unknown-field", b'{"device":"d","sensor":"s","ts":1,"value":"v","extra":1}')

def cbor_text(t):
    b = t.encode()
    assert len(b) < 24
    return bytes([0x60 + len(b)]) + b

def cbor_uint(n):
    return bytes([0x1b]) + struct.pack(">Q", n)

# The server's stored EdgeX bytes (crates/wire/fuzz): the key's timestamp (8 bytes LE), a value.
origin = 1700000000000000000
ts = struct.pack("<q", origin)
event_id, reading_id = bytes(range(16)), bytes(range(16, 32))
compact_reading = (b"\x87\x50" + event_id + b"\x00" + cbor_text("footprint-profile") + cbor_text("footprint-source")
                   + b"\x50" + reading_id + b"\x0b" + cbor_text("2.153000e+01"))
write("wire", "edgex_stored", "compact-reading", ts + compact_reading)
names = [f"float-{i}" for i in range(3)]
write("wire", "edgex_stored", "index-entry", ts + b"\x82" + cbor_text("gw-device-0042") + bytes([0x80 + len(names)]) + b"".join(map(cbor_text, names)))
write("wire", "edgex_stored", "index-entry-offsets", ts + b"\x83" + cbor_text("car-1") + b"\x82" + cbor_text("a") + cbor_text("b") + b"\x82\x00\x20")
write("wire", "edgex_stored", "index-entry-map", ts + b"\xa2" + cbor_text("d") + cbor_text("car-1") + cbor_text("r")
      + b"\x81\x82" + cbor_text("speed") + cbor_uint(origin))
