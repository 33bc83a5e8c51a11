"""The nearest valid name to a mistyped one, for "did you mean" hints."""

from __future__ import annotations

from collections.abc import Iterable


def nearest(word: str, choices: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """Up to `n` of `choices` closest to `word`, ignoring case (`MOCK` finds `mock`)."""
    by_folded: dict[str, str] = {}
    for choice in choices:
        by_folded.setdefault(choice.casefold(), choice)
    folded = word.casefold()
    if folded in by_folded:
        return [by_folded[folded]]
    import difflib  # a mistake's hint only: not at every process's start

    return [by_folded[c] for c in difflib.get_close_matches(folded, list(by_folded), n=n, cutoff=cutoff)]


def did_you_mean(word: str, choices: Iterable[str], quote: str = "`") -> str:
    """`; did you mean `x`?` for the nearest choice, or "" when none is near."""
    close = nearest(word, choices)
    return f"; did you mean {quote}{close[0]}{quote}?" if close else ""
