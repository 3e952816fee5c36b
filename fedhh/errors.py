"""The one exception type for bad user input.

Every error caused by what the user gave (a config key or value, a
population file, an item, a privacy target that cannot be met, a ledger
file, an output folder) is an :class:`InputError`, raised with a message
that names the field and the allowed values.  The command line reports
these as one line with exit status 2; anything else is a bug in fedhh and is
reported as one, never dressed up as a user error.  :func:`one_line` keeps
a message on its line whatever the input it quotes.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input; the message names the field and what it accepts."""


def one_line(message: str) -> str:
    """``message`` with every character that would break its line or hide part of it (a newline
    in a key, a control or format character, a line separator) written as its escape, e.g. ``\\n``."""
    if message.isprintable():
        return message
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in message)
