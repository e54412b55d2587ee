"""Builders' regular expressions (`done_when` patterns, filename patterns): RE2 only, over bounded text.

A builder's pattern runs against text strangers send. Python's `re`
backtracks, so `^(a+)+$` against forty a's and a b stalls a worker for
minutes; RE2 matches in time linear in the text, and has no lookaround or
backreferences, which is why those are refused at validation. The text a
pattern scans is cut to `LUCIA_PATTERN_SCAN_CHARS` characters.
"""

from __future__ import annotations

import functools

import re2
from django.conf import settings

# RE2's own limit on a compiled program; `a{1000}{1000}`-style blow-ups fail to compile instead of eating memory.
MAX_PROGRAM_BYTES = 8 << 20

SYNTAX_HINT = (
    "patterns use RE2 syntax: no lookahead/lookbehind ((?=, (?!, (?<=, (?<!) and no backreferences (\\1); "
    "check brackets and escapes, and quote the pattern in YAML"
)


# re2 exports no public names for its compiled pattern and match types.
Pattern = re2._Regexp
Match = re2._Match


class PatternError(ValueError):
    """A pattern RE2 cannot compile; the message says why."""


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is a ConfigError, not a line on stderr
    options.max_mem = MAX_PROGRAM_BYTES
    return options


@functools.lru_cache(maxsize=512)
def compiled(pattern: str) -> Pattern:
    """`pattern` compiled by RE2 (cached); raises PatternError."""
    try:
        return re2.compile(pattern, _options())
    except re2.error as error:
        reason = error.args[0] if error.args else "invalid pattern"
        if isinstance(reason, bytes):
            reason = reason.decode(errors="replace")
        raise PatternError(str(reason)) from None


def bounded(text: str) -> str:
    """The part of `text` patterns look at: its first LUCIA_PATTERN_SCAN_CHARS characters."""
    return text[: settings.LUCIA_PATTERN_SCAN_CHARS]


def search(pattern: str, text: str) -> Match | None:
    """The first match of `pattern` in the bounded `text`, or None; raises PatternError."""
    return compiled(pattern).search(bounded(text))
