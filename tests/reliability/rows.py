"""The reliability suite's rows: one per (entry point, kind of bad or unusual input).

Each ``test_rows_*.py`` module holds ``ROWS``, a list of :class:`Row`, and runs each through
:func:`check_row`. A row asserts one of two things:

- **an error** (``error=`` an exception type): the call raises it, and its message contains every string in
  ``says`` (case-insensitive): the input it names and the fix it gives;
- **the right answer** (``check=`` a function of the call's value that asserts it, against a closed form,
  ``arviz_stats`` or an identity), with ``warns=`` the warning a user should see (its message containing
  ``says``), or ``warns=None`` and no warning from ppl_loo at all.

``regression=True`` marks the inputs that earlier versions handled wrongly (an error without the fix, a wrong
answer or a crash): those rows keep them fixed. ``python tests/reliability/table.py`` prints the table of rows
(by entry point and kind) that ``docs/reliability.md`` shows.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

#: the kinds of input, the columns of the table in docs/reliability.md
KINDS = (
    "shapes and types",
    "NaN and inf",
    "ties and constants",
    "extreme magnitudes",
    "dimensions",
    "names",
    "files",
    "CmdStan methods",
    "duplicates",
    "mismatched data and results",
    "options",
    "overwrite and escaping",
)


@dataclass(frozen=True)
class Row:
    entry: str  # the entry point: "pl.loo (plain)", "pl.loo (model)", "pl.from_cmdstan", "ppl-loo loo", ...
    kind: str  # one of KINDS
    case: str  # what is wrong with the input, in a few words (the test id)
    run: Callable[[], Any]  # the call
    error: type[BaseException] | None = None
    says: tuple[str, ...] = ()  # the error's (or warning's) message contains each of these
    check: Callable[[Any], None] | None = None  # asserts the value is right
    warns: type[Warning] | None = None
    regression: bool = False  # an input that earlier versions handled wrongly
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"row {self.case!r}: kind {self.kind!r} is not one of {KINDS}")
        if (self.error is None) == (self.check is None):
            raise ValueError(f"row {self.case!r}: give exactly one of error= and check=")

    @property
    def id(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{self.entry}|{self.case}")


def _contains_all(text: str, says, what: str):
    low = text.lower()
    missing = [s for s in says if s.lower() not in low]
    assert not missing, f"{what} does not mention {missing}:\n{text}"


def check_row(row: Row):
    """Run ``row`` and assert what it promises."""
    if row.error is not None:
        with pytest.raises(row.error) as info:
            row.run()
        _contains_all(str(info.value), row.says, "the error")
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = row.run()
    ours = [w for w in caught if _from_ppl_loo(w)]
    if row.warns is None:
        assert not ours, f"unexpected warning(s): {[str(w.message) for w in ours]}"
    else:
        hits = [w for w in caught if issubclass(w.category, row.warns)]
        assert hits, f"no {row.warns.__name__} (warnings: {[str(w.message) for w in caught]})"
        _contains_all("\n".join(str(w.message) for w in hits), row.says, "the warning")
    row.check(value)
    return value


def _from_ppl_loo(w) -> bool:
    return "ppl_loo" in (w.filename or "") or type(w.message).__module__.startswith("ppl_loo")


def params(rows):
    """``pytest.mark.parametrize`` arguments for ``rows``."""
    return pytest.mark.parametrize("row", rows, ids=[r.id for r in rows])
