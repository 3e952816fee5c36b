"""TrieHH's part of the message contract: how a device turns its string into the symbols of the trie."""

from __future__ import annotations

import inspect

from ...data import items
from ..common.item_choice import ITEM_CHOICE_RULE
from ..spec import ContractText


def alphabet_lines() -> list[str]:
    """One line per public alphabet: its characters in index order, as byte ranges."""
    lines = []
    for name, alphabet in items.ALPHABETS.items():
        codes = list(alphabet.characters)
        runs: list[tuple[int, int]] = []
        for code in codes:
            if runs and code == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], code)
            else:
                runs.append((code, code))
        mark = "0x" if alphabet.byte_level else "U+00"
        ranges = ", ".join(
            f"{mark}{low:02X}..{mark}{high:02X}" if high > low else f"{mark}{low:02X}" for low, high in runs
        )
        unit = "UTF-8 bytes" if alphabet.byte_level else "characters (code points)"
        lines.append(f"* `{name}`: {alphabet.size} {unit}: {ranges}")
    return lines


def sections() -> list[tuple[str, str]]:
    """Items as symbols: the item codec's description and its alphabets."""
    body = [
        "How a device turns its string into the symbols that TrieHH's prefixes hold "
        "(`fedhh.data.items`; the alphabet, unit size and maximum length are the run's public "
        "`protocol.alphabet`, `protocol.unit_size` and `protocol.max_length`):",
        "",
        inspect.cleandoc(items.__doc__ or ""),
        "",
        "The alphabets (`fedhh.data.items.ALPHABETS`), a character's index being its 1-based position:",
        "",
        *alphabet_lines(),
    ]
    return [("Items as symbols", "\n".join(body))]


CONTRACT = ContractText(definitions=(ITEM_CHOICE_RULE,), sections=sections)
