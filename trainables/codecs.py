"""Message codecs: b-bit quantization and top-k sparsification of exchanged embeddings.

Why codecs are message hooks and not protocol code: the sender encodes as the last step of
its ``on_send`` stack and the receiver decodes as the first step of its ``on_receive``
stack, so a codec composes with any protocol, defense and attack without either side's
training code knowing about it (trial.py appends codec entries after every other hook).

Bytes as sent: an encoded message's ``nbytes`` is its encoded payload's size, i.e. the
bytes a wire format needs for the values, their positions and the scale/offset; not the
shape or dtype, which both ends know from the schedule and the model, as for dense
messages. The transport counts ``nbytes`` at the boundary, before the receiver decodes,
and the decoded message keeps the size it crossed with. (VFLAIR counts the dense tensor.)

What is compressed: embeddings (training and evaluation) as in Castiglia et al. and
VFLAIR; gradients too only with ``gradients=1``. A party's message to itself (the active
party's own embedding) never crosses a boundary and is left alone.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from trainables.errors import ConfigError, refuse_unknown
from trainables.messages import Message
from trainables.registry import ClassRegistry

if TYPE_CHECKING:
    from trainables.roles import HookHost

CODECS: ClassRegistry[Any] = ClassRegistry("codec")  # codec and workset classes (no common base)

_NATIVE_BITS = {8: "<u1", 16: "<u2", 32: "<u4"}


def _index_dtype(n: int) -> np.dtype:
    """The narrowest unsigned integer that holds positions 0..n-1."""
    for dtype in ("<u1", "<u2", "<u4"):
        if n <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype("<u8")


def pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """(n,) unsigned codes < 2**bits -> the densest buffer: ceil(n * bits / 8) bytes."""
    if bits in _NATIVE_BITS:
        return q.astype(_NATIVE_BITS[bits])
    planes = (q[:, None] >> np.arange(bits, dtype=np.uint64)) & np.uint64(1)  # (n, bits)
    return np.packbits(planes.astype(np.uint8).ravel(), bitorder="little")


def unpack_bits(buf: np.ndarray, n: int, bits: int) -> np.ndarray:
    """Inverse of ``pack_bits``: (n,) uint64 codes."""
    if bits in _NATIVE_BITS:
        return buf.astype(np.uint64)
    planes = np.unpackbits(buf, count=n * bits, bitorder="little").reshape(n, bits)
    return (planes.astype(np.uint64) << np.arange(bits, dtype=np.uint64)).sum(axis=1)


@dataclass(frozen=True)
class Quantized:
    """A float array as b-bit codes of a uniform grid lo + q * step, q in 0..2**b - 1."""

    packed: np.ndarray  # (ceil(n * bits / 8),) bytes, or (n,) uint8/16/32 for 8/16/32 bits
    lo: np.float32
    step: np.float32
    bits: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return int(self.packed.nbytes) + 8  # the codes + lo and step as two float32

    def decode(self) -> np.ndarray:
        n = math.prod(self.shape)
        q = unpack_bits(self.packed, n, self.bits).astype(np.float64)
        x = np.float64(self.lo) + q * np.float64(self.step)
        return x.astype(self.dtype).reshape(self.shape)


def quantize(x: np.ndarray, bits: int) -> Quantized:
    """Uniform ``bits``-bit quantization over [min x, max x], rounding to the nearest level.

    Stated error (``quantization_error``): every decoded value is within step/2 of the
    input (plus the float rounding of the decoded dtype), step = (max - min) / (2**b - 1).
    lo is rounded down and step up to float32 so that max x still lies on the grid.
    """
    flat = np.asarray(x, dtype=np.float64).ravel()
    levels = 2**bits - 1
    lo_f = float(flat.min()) if flat.size else 0.0
    hi_f = float(flat.max()) if flat.size else 0.0
    lo = np.float32(lo_f)
    if float(lo) > lo_f:
        lo = np.nextafter(lo, np.float32(-np.inf))
    step = np.float32((hi_f - float(lo)) / levels)
    while float(step) * levels < hi_f - float(lo):
        step = np.nextafter(step, np.float32(np.inf))
    if float(step) > 0:
        q = np.clip(np.rint((flat - float(lo)) / float(step)), 0, levels).astype(np.uint64)
    else:
        q = np.zeros(flat.size, dtype=np.uint64)
    dtype = str(np.asarray(x).dtype)
    return Quantized(pack_bits(q, bits), lo, step, bits, tuple(np.shape(x)), dtype)


def quantization_error(encoded: Quantized) -> float:
    """The codec's stated bound on |decode(encode(x)) - x| (before dtype rounding)."""
    return float(encoded.step) / 2


@dataclass(frozen=True)
class Sparse:
    """Each row's k largest-magnitude entries; the positions as a bitmap or as indices.

    ``form``: ``dense`` (k equals the row length: nothing dropped, no positions needed),
    ``bitmap`` (one bit per entry) or ``index`` (k column indices per row in the narrowest
    unsigned type), whichever is smaller for this shape.
    """

    values: np.ndarray  # (rows * k,) the kept entries, row-major
    positions: np.ndarray | None
    form: str
    shape: tuple[int, ...]
    k: int

    @property
    def nbytes(self) -> int:
        extra = 0 if self.positions is None else int(self.positions.nbytes)
        return int(self.values.nbytes) + extra

    def decode(self) -> np.ndarray:
        rows, cols = _as_rows(self.shape)
        if self.form == "dense":
            return self.values.reshape(self.shape)
        out = np.zeros((rows, cols), dtype=self.values.dtype)
        if self.form == "bitmap":
            assert self.positions is not None
            mask = np.unpackbits(self.positions, count=rows * cols).astype(bool)
            out.reshape(-1)[mask] = self.values
        else:
            assert self.positions is not None
            r = np.repeat(np.arange(rows), self.k)
            out[r, self.positions.astype(np.int64)] = self.values
        return out.reshape(self.shape)


def _as_rows(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, cols): one row per sample; a 1-d array is one row."""
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return 1, shape[0]
    return shape[0], math.prod(shape[1:])


def kept_per_row(ratio: float, cols: int) -> int:
    """k = ceil(ratio * cols), at least 1 where there is a column."""
    return min(cols, max(1 if cols else 0, math.ceil(ratio * cols - 1e-9)))


def topk(x: np.ndarray, ratio: float) -> Sparse:
    """Keep ``ceil(ratio * C)`` largest-|x| entries of each row (sample); zero the rest.

    Stated error: kept entries decode exactly; every dropped entry has a magnitude no
    larger than the smallest kept magnitude of its row (and decodes to 0).
    """
    arr = np.ascontiguousarray(x)
    rows, cols = _as_rows(arr.shape)
    mat = arr.reshape(rows, cols)
    k = kept_per_row(ratio, cols)
    if k == cols:
        return Sparse(mat.reshape(-1).copy(), None, "dense", arr.shape, k)
    top = np.argpartition(-np.abs(mat), k - 1, axis=1)[:, :k]  # (rows, k) unordered
    mask = np.zeros((rows, cols), dtype=bool)
    np.put_along_axis(mask, top, True, axis=1)
    values = mat[mask]  # row-major: row by row, columns ascending
    bitmap_bytes = -(-rows * cols // 8)
    index_dtype = _index_dtype(cols)
    if bitmap_bytes <= rows * k * index_dtype.itemsize:
        return Sparse(values, np.packbits(mask.reshape(-1)), "bitmap", arr.shape, k)
    cols_kept = np.nonzero(mask)[1].astype(index_dtype)  # (rows * k,) row-major
    return Sparse(values, cols_kept, "index", arr.shape, k)


Encoded = Quantized | Sparse


class Codec:
    """Base: encode chosen messages on send, decode encoded payloads on receive."""

    name: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Any]] = {"gradients": 0}

    def __init__(self, **params: Any) -> None:
        refuse_unknown(f"codec {self.name!r}", params, list(self.defaults))
        self.params = {**self.defaults, **params}
        gradients = self.params["gradients"]
        if gradients not in (0, 1):  # True/False compare equal to 1/0
            raise ConfigError(f"codec {self.name!r}: gradients={gradients!r}; allowed: 0, 1")
        self.gradients = bool(gradients)
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for bad parameter values."""

    def encode(self, x: np.ndarray) -> Encoded:
        raise NotImplementedError

    def attach(self, party: HookHost) -> None:
        party.hooks.append(self)

    def applies(self, msg: Message) -> bool:
        if msg.src == msg.dst or not isinstance(msg.payload, np.ndarray):
            return False
        if msg.kind == "embedding" or msg.kind.endswith("_embedding"):
            return True
        return self.gradients and msg.kind == "gradient"

    def on_send(self, party: HookHost, msg: Message) -> Message:
        if not self.applies(msg):
            return msg
        encoded = self.encode(msg.payload)
        return dataclasses.replace(msg, payload=encoded, nbytes=encoded.nbytes)

    def on_receive(self, party: HookHost, msg: Message) -> Message:
        if isinstance(msg.payload, Quantized | Sparse):
            return dataclasses.replace(msg, payload=msg.payload.decode())  # nbytes: as sent
        return msg


class QuantizeCodec(Codec):
    """b-bit uniform quantization (Castiglia et al.'s C-VFL "Quantize"; VFLAIR b = 16)."""

    name = "quantize"
    defaults: ClassVar[dict[str, Any]] = {"bits": 16, "gradients": 0}

    def validate(self) -> None:
        bits = self.params["bits"]
        if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 32:
            raise ConfigError(f"codec 'quantize': bits={bits!r}; allowed: integer 1..32")
        self.bits = bits

    def encode(self, x: np.ndarray) -> Quantized:
        return quantize(x, self.bits)


class TopKCodec(Codec):
    """Top-k sparsification per sample (C-VFL "Top-k"; VFLAIR ratio 0.9)."""

    name = "topk"
    defaults: ClassVar[dict[str, Any]] = {"ratio": 0.9, "gradients": 0}

    def validate(self) -> None:
        ratio = self.params["ratio"]
        ok = isinstance(ratio, int | float) and not isinstance(ratio, bool)
        if not ok or not 0 < float(ratio) <= 1:
            raise ConfigError(f"codec 'topk': ratio={ratio!r}; allowed: 0 < ratio <= 1")
        self.ratio = float(ratio)

    def encode(self, x: np.ndarray) -> Sparse:
        return topk(x, self.ratio)


CODECS.register(QuantizeCodec.name, QuantizeCodec)
CODECS.register(TopKCodec.name, TopKCodec)
