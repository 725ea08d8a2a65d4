"""The records of a W&B run file (`run-<id>.wandb`), read with the `wandb` package's own protobufs.

The file is LevelDB's log format under a 7-byte header (`:W&B`, magic 0xBEE1, version 0): 32 KiB
blocks of chunks, each `crc32 (uint32) | length (uint16) | type (uint8) | data`, a record being one
FULL chunk or FIRST, MIDDLE..., LAST; the CRC is zlib's crc32 of the type byte then the data. Each
record is a `wandb.proto.wandb_internal_pb2.Record`. wandb 0.31 reads these files only in its Go core
(the Python datastore that `wandb sync` once used is gone), so the framing is read here and every
record is decoded by wandb's own message classes: a field wandb adds later is skipped by protobuf.

A file that ends inside a record (a run killed mid-write) or a chunk whose CRC does not match is named
with the record's number and byte offset: `BadSource`, or with `skip_bad` the records before it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

from trainer.importers.records import Problems

HEADER = struct.Struct("<4sHB")
IDENT, MAGIC = b":W&B", 0xBEE1
CHUNK = struct.Struct("<IHB")
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def wandb_records(path: Path, problems: Problems) -> Iterator[object]:
    """Every record of `path`, decoded (wandb_internal_pb2.Record), in the order W&B wrote them."""
    from wandb.proto import wandb_internal_pb2  # the wandb package: `pip install cohort[import]`

    data = path.read_bytes()
    if len(data) < HEADER.size or HEADER.unpack_from(data)[:2] != (IDENT, MAGIC):
        problems.bad(path, "header", "not a W&B run file (no ':W&B' header)")
        return
    number = 0
    for offset, raw in _records(path, data, problems):
        number += 1
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(raw)
        except Exception as exc:  # protobuf's DecodeError: a CRC that matched garbage
            problems.bad(path, f"record {number} (byte {offset})", f"not a W&B record ({exc})")
            return
        yield record


def _records(path: Path, data: bytes, problems: Problems) -> Iterator[tuple[int, bytes]]:
    position, number = HEADER.size, 0
    pending: bytearray | None = None
    start = position
    while position < len(data):
        left = BLOCK - position % BLOCK
        if left < CHUNK.size:  # a block's zero trailer
            position += left
            continue
        if position + CHUNK.size > len(data):
            problems.bad(path, f"record {number + 1} (byte {position})", "truncated: the file ends inside it")
            return
        crc, length, kind = CHUNK.unpack_from(data, position)
        if kind == 0 and length == 0 and crc == 0:  # zero padding to the block's end
            position += left
            continue
        body = data[position + CHUNK.size:position + CHUNK.size + length]
        if len(body) < length:
            problems.bad(path, f"record {number + 1} (byte {position})", "truncated: the file ends inside it")
            return
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            problems.bad(path, f"record {number + 1} (byte {position})", "corrupt: its checksum does not match")
            return
        if kind in (FULL, FIRST):
            start = position
        position += CHUNK.size + length
        if kind == FULL:
            number += 1
            yield start, body
        elif kind == FIRST:
            pending = bytearray(body)
        elif kind in (MIDDLE, LAST) and pending is not None:
            pending += body
            if kind == LAST:
                number += 1
                yield start, bytes(pending)
                pending = None
        else:
            problems.bad(path, f"record {number + 1} (byte {position})", f"corrupt: chunk type {kind}")
            return
    if pending is not None:
        problems.bad(path, f"record {number + 1} (byte {start})", "truncated: the file ends inside it")
