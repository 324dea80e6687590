"""hypothesis profiles: `fast` for the quick loop, `thorough` for CI (.ci/run sets it).

WEBHOOKS_HYPOTHESIS_PROFILE picks one; unset, `fast`. A property that names
how many examples it draws names its CI number through `scaled`, which the
fast profile cuts down to a fifth.
"""

from __future__ import annotations

import math
import os

from hypothesis import settings

PROFILE = os.environ.get("WEBHOOKS_HYPOTHESIS_PROFILE") or "fast"
_FAST_SHARE = 5
settings.register_profile("thorough", max_examples=100)
settings.register_profile("fast", max_examples=100 // _FAST_SHARE)


def load() -> None:
    if PROFILE not in ("fast", "thorough"):
        raise ValueError(f"WEBHOOKS_HYPOTHESIS_PROFILE: {PROFILE!r} is neither fast nor thorough")
    settings.load_profile(PROFILE)


def scaled(thorough: int) -> int:
    """`thorough` examples under the thorough profile, a fifth of them (at least 2) under the fast one."""
    return thorough if PROFILE == "thorough" else max(2, math.ceil(thorough / _FAST_SHARE))
