"""Patterns both regex engines read alike: Python's ``re`` (config load) and Java's (Spark).

A field's ``pattern`` is checked when the config loads, without a JVM, and applied by
Spark's ``rlike``, which is ``java.util.regex``. A pattern that Python accepts and Java
refuses would pass the load and then crash the stream; ``java_incompatibility`` names the
constructs where the two engines part ways so that such a pattern is refused at load.
"""

from __future__ import annotations

import re

_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?[:)]")


def java_incompatibility(pattern: str) -> str | None:
    """What in ``pattern`` Java's regex engine refuses or reads differently (None: nothing).

    ``pattern`` already compiles with Python's ``re``.
    """
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if pattern[i + 1:i + 2] == "U":
                return r"\U........ escapes are Python's only (Java writes \x{...})"
            if pattern[i + 1:i + 2] == "0" and not pattern[i + 2:i + 3].isdigit():
                return r"\0 alone is Python's null character; Java reads \0 as an octal escape: write \x00"
            i += 2
            continue
        if in_class:
            if c == "[":
                return r"an unescaped '[' inside a character class (Java reads a nested class): write \["
            if pattern.startswith("&&", i):
                return r"'&&' inside a character class (Java reads an intersection): write \&\&"
            if c == "]":
                in_class = False
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 1
            if pattern[i:i + 1] == "^":
                i += 1
            if pattern[i:i + 1] == "]":  # a literal ']' first in the class (both engines agree)
                i += 1
            continue
        for prefix, what in (("(?P<", "named groups (?P<name>...) are Python's only"),
                             ("(?P=", "back-references (?P=name) are Python's only"),
                             ("(?#", "comments (?#...) are Python's only"),
                             ("(?(", "conditional groups (?(id)yes|no) are Python's only")):
            if pattern.startswith(prefix, i):
                return what
        flags = _FLAGS.match(pattern, i)
        if flags and set("".join(f or "" for f in flags.groups())) & set("aL"):
            return "inline flags a (ASCII) and L (locale) are Python's only"
        if re.match(r"\{,\d*\}", pattern[i:]):
            return "a {,n} repetition (Python's shorthand for {0,n}; Java refuses it): write {0,n}"
        i += 1
    return None
