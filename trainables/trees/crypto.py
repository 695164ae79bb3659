"""Paillier (phe) and its plaintext twin behind one integer interface, plus slot packing.

Why raw integers instead of phe's ``EncryptedNumber``: tree protocols only ever add
ciphertexts, and phe's float encoding (exponent alignment per addition) costs more than the
arithmetic itself. Values are fixed-point integers packed into slots of one plaintext, so
one ciphertext carries g and h (or every class count) of a row. The plaintext twin
(``encrypted=False``) does the same integer arithmetic without encryption, which makes the
encrypted protocol provably lossless: decryption returns exactly the plaintext sum.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import gmpy2
import phe

# A ciphertext as the protocols handle it: an ``mpz`` residue mod n^2 under Paillier, the
# plain packed ``int`` itself under the plaintext twin (``encrypted=False``)
Ciphertext: TypeAlias = int | gmpy2.mpz


@dataclass
class CryptoStats:
    """Where the encryption time goes (reported in the record's ``extra``)."""

    encrypt_seconds: float = 0.0
    decrypt_seconds: float = 0.0
    n_encrypted: int = 0
    n_decrypted: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "encrypt_seconds": round(self.encrypt_seconds, 4),
            "decrypt_seconds": round(self.decrypt_seconds, 4),
            "n_encrypted": self.n_encrypted,
            "n_decrypted": self.n_decrypted,
        }


@dataclass(frozen=True)
class PublicKey:
    """What a party without the secret key holds: enough to add, scale and encrypt."""

    encrypted: bool
    n: int = 0  # Paillier modulus (0 for the plaintext twin)
    key_length: int = 0

    @property
    def nsquare(self) -> gmpy2.mpz:
        return gmpy2.mpz(self.n) ** 2

    @property
    def ciphertext_bytes(self) -> int:
        """Serialized size of one ciphertext: a fixed-width big-endian integer mod n^2."""
        return (2 * self.n.bit_length() + 7) // 8 if self.encrypted else 0

    @property
    def plaintext_bits(self) -> int:
        """How many bits a packed plaintext may use so that sums never wrap mod n."""
        return self.n.bit_length() - 2 if self.encrypted else 1 << 20

    def encrypt(self, values: Sequence[int], stats: CryptoStats | None = None) -> list[Ciphertext]:
        """Encrypt non-negative ints < n (identity for the plaintext twin)."""
        if not self.encrypted:
            return [int(v) for v in values]
        start = time.perf_counter()
        pk = phe.PaillierPublicKey(self.n)
        out = [gmpy2.mpz(pk.raw_encrypt(int(v))) for v in values]
        if stats is not None:
            stats.encrypt_seconds += time.perf_counter() - start
            stats.n_encrypted += len(out)
        return out

    def add(self, a: Ciphertext, b: Ciphertext) -> Ciphertext:
        return a * b % self.nsquare if self.encrypted else a + b

    def total(self, items: Sequence[Ciphertext]) -> Ciphertext:
        """The (encrypted) sum of ``items``."""
        if not self.encrypted:
            return sum(items, 0)
        n2 = self.nsquare
        acc = gmpy2.mpz(1)
        for c in items:
            acc = acc * c % n2
        return acc

    def add_plain(self, c: Ciphertext, m: int) -> Ciphertext:
        """[[x]] -> [[x + m]] without a new encryption: (1 + m n) is a deterministic [[m]]."""
        if not self.encrypted:
            return c + m
        n = gmpy2.mpz(self.n)
        return c * (1 + (m % n) * n) % (n * n)

    def mul_plain(self, c: Ciphertext, k: int) -> Ciphertext:
        """[[x]] -> [[k x]] for a (small, possibly negative) integer k."""
        if not self.encrypted:
            return c * k
        n2 = self.nsquare
        if k < 0:
            return gmpy2.powmod(gmpy2.invert(c, n2), -k, n2)
        return gmpy2.powmod(c, k, n2)

    def signed(self, m: int) -> int:
        """Map a decrypted residue back to a signed integer (values in (-n/2, n/2))."""
        if not self.encrypted:
            return int(m)
        return int(m) - self.n if m > self.n // 2 else int(m)

    def mask(self, bits: int) -> int:
        """A random mask with ``bits`` + 40 bits: statistically hides a ``bits``-bit value."""
        return secrets.randbits(bits + 40)


@dataclass
class KeyPair:
    """The secret-key holder's side: the public key plus decryption."""

    public: PublicKey
    _private: Any = None  # phe's PaillierPrivateKey (untyped); None for the plaintext twin
    stats: CryptoStats = field(default_factory=CryptoStats)

    @classmethod
    def generate(cls, key_length: int, encrypted: bool = True) -> KeyPair:
        if not encrypted:
            return cls(PublicKey(encrypted=False))
        pk, sk = phe.generate_paillier_keypair(n_length=int(key_length))
        return cls(PublicKey(encrypted=True, n=int(pk.n), key_length=int(key_length)), sk)

    def decrypt(self, items: Sequence[Ciphertext]) -> list[int]:
        if not self.public.encrypted:
            return [int(v) for v in items]
        start = time.perf_counter()
        out = [int(self._private.raw_decrypt(int(c))) for c in items]
        self.stats.decrypt_seconds += time.perf_counter() - start
        self.stats.n_decrypted += len(out)
        return out


@dataclass(frozen=True)
class Packer:
    """Pack a row's ``n_slots`` non-negative ints of ``slot_bits`` each into few plaintexts.

    A sum of up to 2**headroom packed rows never carries from one slot into the next, so the
    per-slot sums unpack exactly.
    """

    n_slots: int
    slot_bits: int
    max_bits: int  # the key's plaintext_bits

    @property
    def per_int(self) -> int:
        return max(1, self.max_bits // self.slot_bits)

    @property
    def n_ints(self) -> int:
        return -(-self.n_slots // self.per_int)

    def pack(self, rows: Sequence[Sequence[int]]) -> list[list[int]]:
        """(N, n_slots) ints -> (n_ints, N) packed ints (one list per plaintext chunk)."""
        out: list[list[int]] = []
        for start in range(0, self.n_slots, self.per_int):
            chunk = range(start, min(start + self.per_int, self.n_slots))
            out.append(
                [sum(int(r[s]) << (self.slot_bits * (s - start)) for s in chunk) for r in rows]
            )
        return out

    def unpack(self, packed: Sequence[int]) -> list[int]:
        """(n_ints,) summed packed ints -> (n_slots,) per-slot sums."""
        mask = (1 << self.slot_bits) - 1
        out: list[int] = []
        for i, value in enumerate(packed):
            count = min(self.per_int, self.n_slots - i * self.per_int)
            out.extend((int(value) >> (self.slot_bits * s)) & mask for s in range(count))
        return out
