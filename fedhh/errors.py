"""The one exception type for bad user input.

Every error caused by what the user gave (a config key or value, a
population file, an item, a privacy target that cannot be met, a ledger
file, an output folder) is an :class:`InputError`, raised with a message
that names the field and the allowed values.  The command line reports
these as one line with exit status 2; anything else is a bug in fedhh and is
reported as one, never dressed up as a user error.
"""

from __future__ import annotations


class InputError(ValueError):
    """Bad user input; the message names the field and what it accepts."""
