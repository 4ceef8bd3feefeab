"""Values that must never reach pyinfra's output: operation arguments are recorded with str(), and at -vv a fact
is logged with every keyword it was given, `_stdin` included."""

from __future__ import annotations

from collections.abc import Iterator


class Secret:
    """A value that prints as <hidden> (or <none>); `reveal()` gives it to the code that needs it."""

    def __init__(self, value: str | None) -> None:
        self._value = value

    def reveal(self) -> str | None:
        return self._value

    def __str__(self) -> str:
        return "<hidden>" if self._value else "<none>"

    __repr__ = __str__


class SecretStdin:
    """Text for a command's stdin that prints as <stdin>. pyinfra writes whatever `readlines()` returns, which
    here is the whole text every time (a retried command gets it again)."""

    def __init__(self, text: str) -> None:
        self._lines = text.splitlines(keepends=True)

    def readlines(self) -> list[str]:
        return list(self._lines)

    def __iter__(self) -> Iterator[str]:  # pyinfra checks `_stdin` is str, a list or an iterable of str
        return iter(self._lines)

    def __str__(self) -> str:
        return "<stdin>"

    __repr__ = __str__
