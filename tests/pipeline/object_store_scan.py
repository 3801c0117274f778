"""Every object of a bucket on the test's S3 server searched for marker strings: as raw bytes, and through
its reader too where the bytes are compressed (Parquet pages; the blocks of an Avro file, as Iceberg's
manifests are), with plain S3 requests, not the code under test."""

from __future__ import annotations

import io
import zlib

import pyarrow.parquet as pq

from tests.s3 import S3Server


def s3_hits(s3: S3Server, bucket: str, needles: list[str]) -> list[str]:
    """`key (bytes|reader): needle` for every marker found in the bucket."""
    hits = []
    for key in (k for k in s3.keys(bucket) if not k.endswith("/")):  # "directory" keys pyarrow leaves
        raw = s3.get(bucket, key)
        hits += [f"{key} (bytes): {n}" for n in needles if n.encode() in raw.lower()]
        text = b""
        if key.endswith(".parquet"):
            text = str(pq.read_table(io.BytesIO(raw)).to_pylist()).encode()
        elif key.endswith(".avro"):
            text = b"".join(_avro_blocks(raw))
        hits += [f"{key} (reader): {n}" for n in needles if n.encode() in text.lower()]
    return hits


def _avro_blocks(raw: bytes) -> list[bytes]:
    """The decompressed data blocks of an Avro object container file (null or deflate codec)."""
    at = 4  # b"Obj\x01"

    def long() -> int:
        nonlocal at
        shift = value = 0
        while True:
            byte = raw[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1)

    def data() -> bytes:
        nonlocal at
        size = long()
        at += size
        return raw[at - size:at]

    meta = {}
    while count := long():
        if count < 0:
            count = -count
            long()  # the block's size in bytes
        for _ in range(count):
            name = data()
            meta[name] = data()
    at += 16  # the sync marker
    blocks = []
    while at < len(raw):
        long()  # objects in the block
        block = data()
        blocks.append(zlib.decompress(block, -15) if meta.get(b"avro.codec") == b"deflate" else block)
        at += 16
    return blocks
