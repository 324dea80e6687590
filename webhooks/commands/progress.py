"""Progress on stderr while someone watches (stdout is a terminal); nothing in a pipe, a file or cron.

tqdm, which requirements.txt pins for the load test's sender already: a bar
and a count, lighter than rich's console.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TypeVar

from tqdm import tqdm

T = TypeVar("T")


def watched() -> bool:
    return sys.stdout.isatty()


def bar(iterable: Iterable[T] | None = None, **options: Any) -> tqdm[T]:
    """tqdm on stderr, shown only while watched and cleared when done."""
    return tqdm(iterable, disable=not watched(), file=sys.stderr, leave=False, **options)
