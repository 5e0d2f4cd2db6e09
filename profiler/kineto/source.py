"""The uncompressed bytes of a trace file, in blocks (plain or gzip, sniffed by magic bytes 1f 8b).

gzip is decompressed as a stream (never more than one block of output at a time) with an
expansion guard: once ``GUARD_AFTER_BYTES`` have been produced, output above
``MAX_EXPANSION`` times the compressed input read so far stops the read with a one-line error
(real Kineto traces expand 6-18x; a 2.6 MB file of compressed whitespace expands to 2.2 GiB).
Concatenated gzip members are read in turn (as ``gzip`` does); anything else after the last
member (appended garbage), a cut-off stream and corrupt data are one-line errors.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
BLOCK_BYTES = 1 << 20
"""Size of the blocks yielded (uncompressed bytes)."""
READ_BYTES = 256 << 10
"""Compressed bytes read at a time."""
MAX_EXPANSION = 200
GUARD_AFTER_BYTES = 64 << 20


class Source:
    """Iterate to get the file's uncompressed blocks; ``raw_bytes`` is the compressed input read."""

    def __init__(self, path: Path, block_bytes: int = BLOCK_BYTES) -> None:
        self.path = Path(path)
        self.block_bytes = block_bytes
        self.raw_bytes = 0
        self.out_bytes = 0
        with self.path.open("rb") as fh:
            self.gzip = fh.read(2) == GZIP_MAGIC

    def __iter__(self) -> Iterator[bytes]:
        with self.path.open("rb") as fh:
            blocks = self._gunzip(fh) if self.gzip else self._plain(fh)
            for block in blocks:
                self.out_bytes += len(block)
                yield block

    def _plain(self, fh: BinaryIO) -> Iterator[bytes]:
        while block := fh.read(self.block_bytes):
            self.raw_bytes += len(block)
            yield block

    def _fail(self, why: str) -> ValueError:
        return ValueError(f"{self.path.name}: {why}")

    def _guard(self, produced: int) -> None:
        if produced > GUARD_AFTER_BYTES and produced > MAX_EXPANSION * max(self.raw_bytes, 1):
            raise self._fail(f"gzip data expands more than {MAX_EXPANSION}x ({produced / 2**20:.0f} MiB "
                             f"from the first {self.raw_bytes / 2**20:.1f} MiB); not read (real traces "
                             "expand 6-18x)")

    def _gunzip(self, fh: BinaryIO) -> Iterator[bytes]:
        dec = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        produced = 0
        member_start = 0
        pending = b""  # compressed input not yet given to the decompressor
        while True:
            if not pending:
                pending = fh.read(READ_BYTES)
                self.raw_bytes += len(pending)
                if not pending:
                    break
            try:
                out = dec.decompress(pending, self.block_bytes)
            except zlib.error as exc:
                raise self._fail(f"corrupt gzip data near compressed byte {self.raw_bytes - len(pending)} "
                                 f"({exc})") from None
            pending = dec.unconsumed_tail
            if out:
                produced += len(out)
                self._guard(produced)
                yield out
            if dec.eof:
                rest = dec.unused_data + pending
                end = self.raw_bytes - len(rest)
                if not rest:
                    rest = fh.read(READ_BYTES)
                    self.raw_bytes += len(rest)
                if not rest:
                    return
                if len(rest) < 2:
                    more = fh.read(2 - len(rest))
                    self.raw_bytes += len(more)
                    rest += more
                if not rest.startswith(GZIP_MAGIC):
                    raise self._fail(f"{self._trailing(fh, len(rest))} byte(s) of data that is not gzip after "
                                     f"the end of the gzip stream at compressed byte {end}")
                member_start = end
                dec = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
                pending = rest
        if not dec.eof:
            raise self._fail(f"truncated gzip file (the stream started at compressed byte {member_start} "
                             f"ends without its end marker after {self.raw_bytes} bytes)")

    @staticmethod
    def _trailing(fh: BinaryIO, have: int) -> int:
        """Bytes from the current read position to the end of the file, plus ``have``."""
        pos = fh.tell()
        end = fh.seek(0, 2)
        fh.seek(pos)
        return have + end - pos
