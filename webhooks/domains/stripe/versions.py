"""Which API versions' snapshots the handlers apply: the known range, and any other version by its shape.

A snapshot event is rendered in its endpoint's API version.
STRIPE_API_VERSIONS is the range the handlers are known to read: by
default from 2019-12-03 to the version the pinned stripe library sends
(infra/config.py; a test fails when the installed library pins another),
every change in it to a field a handler reads listed in docs/events.md
from Stripe's changelog. Inside
the range an event's object must have its declared shape (declared.py) or
it is refused for good (a stored 422).

Stripe releases a version every month, and a monthly version only adds
(https://docs.stripe.com/upgrades): a shop whose endpoint follows Stripe's
current version must keep shipping while this project catches up. So an
event of a version newer than the range is decided by its shape, not its
name: when its object has every declared field with the declared type, it
is applied, with one warning per version in each process and a count in
/metrics. So is an event of a version older than the range: an account
pinned years ago sends objects whose declared fields mostly have the same
shapes (docs/events.md lists the moves). Otherwise the handlers cannot read
it, and it is refused as one of no version is: re-synced (the object
fetched again in the pinned STRIPE_API_VERSION, thin.resync_later) when the
API is configured, else answered 500 and recorded, so Stripe retries.

At any version, an object that lacks a link its handler needs at that
version (declared.Need: an invoice's subscription, which basil moved) is
refused the same way, never applied without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import structlog
from prometheus_client import Counter

from webhooks.core.events import Event
from webhooks.core.parts import Parts
from webhooks.core.registry import Handler, Registry
from webhooks.providers.stripe import NAME, UnsupportedApiVersion, thin

from . import declared
from .thin import resync_later

log = structlog.get_logger(__name__)

# Counted where handlers run, outside any app; the web app's /metrics exposes it.
NEWER_VERSIONS = Counter(
    "webhook_stripe_newer_api_version_events",
    "Stripe events of an API version newer than STRIPE_API_VERSIONS, applied because their objects "
    "had the declared shape, by version",
    ["api_version"],
    registry=None,
)
OLDER_VERSIONS = Counter(
    "webhook_stripe_older_api_version_events",
    "Stripe events of an API version older than STRIPE_API_VERSIONS, applied because their objects "
    "had the declared shape, by version",
    ["api_version"],
    registry=None,
)
PARTS = Parts(metrics=(NEWER_VERSIONS, OLDER_VERSIONS))
# Stripe's version names: a date, and the release's name since 2024-09-30 (acacia).
_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(\.[a-z]{1,32})?")
# The versions outside the range already warned of in this process.
_warned: set[str] = set()


@dataclass(frozen=True)
class Admission:
    """The check every handled snapshot event passes before its handler runs (the Stripe guard)."""

    registry: Registry
    supported: tuple[str, str]
    api_configured: bool

    def __call__(self, event: Event) -> Handler | None:
        """None to run the handler; `resync_later` to run instead; raises to refuse the event."""
        if thin(event):
            return None  # ids only: the object is fetched, in the pinned version
        shape = self.registry.reads(NAME, event.type)
        version = event.api_version or ""
        unmet = [] if shape is None else declared.unmet(shape, event)
        named = _VERSION.fullmatch(version) is not None
        if self.supported[0] <= version[:10] <= self.supported[1]:
            if shape is not None:
                declared.check(shape, event)
            readable = True
        else:
            # Outside the range, older or newer, an event is decided by its shape.
            readable = named and shape is not None and not declared.problems(shape, event.object)
        if readable and not unmet:
            if version[:10] > self.supported[1]:
                _applied_outside(NEWER_VERSIONS, "newer", version, self.supported, event)
            elif version[:10] < self.supported[0]:
                _applied_outside(OLDER_VERSIONS, "older", version, self.supported, event)
            return None
        # Never applied without a link its handler needs: re-synced, or refused and retried.
        if self.api_configured:
            return resync_later
        if readable:
            raise UnsupportedApiVersion("; ".join(unmet))
        raise UnsupportedApiVersion(
            f"api_version {version if named else 'missing or not a version name'} is outside "
            f"{self.supported[0]}..{self.supported[1]}"
            + (" and its object is not the shape the handlers read" if named else "")
        )


def _applied_outside(
    counter: Counter, direction: str, version: str, supported: tuple[str, str], event: Event
) -> None:
    counter.labels(version).inc()
    if version in _warned:
        return
    _warned.add(version)  # a race repeats the warning once at most, per thread
    log.warning(
        f"stripe_api_version_{direction}_than_known",
        api_version=version,
        known=f"{supported[0]}..{supported[1]}",
        event_id=event.id,
        event_type=event.type,
        hint="applied: its object has the shape the handlers read; review Stripe's changelog "
        "(docs/events.md)" + (" and upgrade the stripe library" if direction == "newer" else ""),
    )
