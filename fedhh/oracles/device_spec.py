"""What a device must compute to report through an oracle, declared beside each oracle for the contract.

A device that does not run fedhh's code (a third-party ClientApp) can still
report through any oracle, provided it applies the same randomizer with the
same public hash functions and sums its users' reports into the same
statistics.  Every oracle class declares that as a :class:`DeviceSpec`
(``device_spec``); ``strategies/contract.py`` renders them, with the shared
definitions below, into ``docs/messages.md``, and
``tests/test_oracle_device_spec.py`` re-implements every one of them from the
text alone and checks it against fedhh's oracles (hash values, report
probabilities, statistics and support counts, exactly).

The text uses unsigned 64-bit arithmetic (``mod 2^64``) unless it says
otherwise; ``E = e^ε``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    """An oracle's device side in words: exact enough to re-implement without fedhh's source."""

    # public parameters as functions of ε, the domain d and the oracle's options
    parameters: str
    # what one user with value v (an integer key in [0, d)) draws and reports
    randomizer: str
    # the flat statistics a node sends for its users' reports (cells, reporters), when the oracle has them
    statistics: str
    # the per-candidate support counts a node sends when there is no flat form
    support: str


DEFINITIONS = """\
* `splitmix64(x)`: `z = x + 0x9E3779B97F4A7C15; z = (z XOR (z >> 30)) * 0xBF58476D1CE4E5B9; \
z = (z XOR (z >> 27)) * 0x94D049BB133111EB; return z XOR (z >> 31)`.
* `purpose_key(s)`: the 8-byte BLAKE2b digest (`digest_size = 8`, no key) of the UTF-8 bytes of the \
string `s`, read as a little-endian integer.
* `derive_key(seed, s) = splitmix64((seed mod 2^64) XOR purpose_key(s))`.
* Public seed lists: the `j`-th seed (`j = 0, 1, ...`) of purpose `s` under seed `seed` is \
`splitmix64(base + j)` and its `j`-th *sign* seed is `splitmix64((NOT base) + j)`, where \
`base = derive_key(seed, s)` and `NOT` flips all 64 bits.
* A 64-bit seed `σ` names the pair `a = splitmix64(σ) OR 1` (odd) and `b = splitmix64(σ XOR 0xD1B54A32D192ED03)`.
* `hash64(σ, v, g)` (values to `[0, g)`, `2 <= g <= 2^31`): `z = a * splitmix64(v) + b (mod 2^64)`; \
the bucket is `((z >> 32) * g) >> 32`.
* `hash32(σ, v, g)` (local hashing's 32-bit family): `a' = (a >> 32) OR 1`, `b' = b >> 32`, \
`k = splitmix64(v) >> 32`, `z = a' * k + b' (mod 2^32)`; the bucket is `(z * g) >> 32`.
* `key_rows(units)` (the 64-bit key of a row of `w` units, for prefixes too long to key by their \
integer value): `state = splitmix64(purpose_key("fedhh.oracles.row-key") XOR w)`, then for each unit \
`u` in order, `state = splitmix64(state XOR u)` (a unit as a 64-bit two's-complement word); the key is \
the final `state`.
* `RR(x, k, p)`: randomised response over `[0, k)`: `x` with probability `p`, otherwise a value \
uniform over the `k - 1` others.
* `H[r, c] = (-1)^popcount(r AND c)`: the Walsh-Hadamard matrix, never stored; `parity(r, c) = \
popcount(r AND c) mod 2` (1 where `H[r, c] = -1`).
* Public per-user draws (the same on every device and on the server, so they reveal nothing): \
`public_uniform(seed, u) = (splitmix64(splitmix64(u XOR seed)) >> 11) / 2^53` for the global user id \
`u` (the first draw of `fedhh.kernels.randomness.UserRandom`), and `public_index(seed, u, k) = \
floor(k public_uniform(seed, u))`, uniform in `[0, k)`.
* "Uniform" draws are the device's own private randomness, independent of its value."""
