"""The composition root: everything a process of the service needs, built from its Settings.

The web app (`create_app`), every command that accepts events and the
outbox worker assemble themselves here and nowhere else, so an event is
judged the same whichever process takes it: the same providers, the same
handlers (every domain's, then those of WEBHOOK_HANDLER_MODULES), the same
domain settings (the order marker is bound into the handlers that ship
payments), and a pool of this process's own.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psycopg

from webhooks.core import bulk, history, ingest
from webhooks.core.events import Event, InvalidEvent, InvalidFields
from webhooks.core.redaction import Policy
from webhooks.core.registry import HandlerMistake, Registry
from webhooks.domains import github as github_domain
from webhooks.domains import shopify as shopify_domain
from webhooks.domains import stripe as stripe_domain
from webhooks.domains.stripe import access, returns
from webhooks.infra import db
from webhooks.infra.config import SettingError, Settings
from webhooks.infra.db import LazyPool, database_url
from webhooks.providers import Outgoing, Provider, Providers, github, shopify, standard, stripe

# Every sender this service takes deliveries from, with the domain that acts
# on its events (None: they are recorded, `ignored`). A domain is a module
# with `register(registry, settings)`. A new provider is its module in
# providers/, its domain in domains/, and one line here.
SENDERS: tuple[tuple[Provider, ModuleType | None], ...] = (
    (stripe.PROVIDER, stripe_domain),
    (standard.PROVIDER, None),
    (github.PROVIDER, github_domain),
    (shopify.PROVIDER, shopify_domain),
)
PROVIDERS = Providers(provider for provider, _ in SENDERS)


def handlers(settings: Settings) -> Registry:
    """Every domain's handlers, then the shop's (WEBHOOK_HANDLER_MODULES), which replace any of the same type.

    A shop's module is included (its `@fulfilment.handles` functions), and
    its `register(registry, settings)` runs if it has one: the way to wrap
    a built-in handler (`registry.handler(...)`) rather than replace it.
    """
    registry = Registry()
    for _, domain in SENDERS:
        if domain is not None:
            domain.register(registry, settings)
    for name in settings.handler_modules:
        try:
            module = importlib.import_module(name)
        except (ImportError, SyntaxError) as exc:
            raise SettingError(f"WEBHOOK_HANDLER_MODULES: cannot import {name}: {exc}") from None
        try:
            registry.include(module)
            if callable(getattr(module, "register", None)):
                module.register(registry, settings)
        except HandlerMistake as exc:
            raise SettingError(f"WEBHOOK_HANDLER_MODULES: {name}: {exc}") from None
    return registry


def shown(settings: Settings, registry: Registry) -> Policy:
    """What an operator is shown of a payload: the domains' personal keys and WEBHOOK_REDACT_FIELDS hidden."""
    return Policy(registry.personal_fields() | frozenset(settings.redact_fields))


@dataclass(frozen=True)
class Service:
    """One process's assembly: its settings, providers, handlers and pool."""

    settings: Settings
    providers: Providers
    registry: Registry
    pool: LazyPool

    def accept(
        self, provider: str, event: Event, settled: str | None = None, rejudge: bool = False
    ) -> ingest.Answer:
        """An admitted event taken into the ledger, and its answer (core/ingest.py).

        `settled` is the outcome word its admission settled it with, if any:
        its claim is completed with that word and no handler runs. `rejudge`:
        a stored refusal (422) is judged again (ingest.accept).
        """
        return ingest.accept(self.pool.get(), self.registry, provider, event, settled, rejudge)

    def admit_and_accept(self, provider: str, event: Event, rejudge: bool = False) -> ingest.Answer:
        """An event that came some other way than a delivery (reprocess, backfill), admitted as a delivery is.

        Its provider's refusal is its answer (400, recorded as a failure).
        """
        try:
            settled = self.providers[provider].admit(event, self.settings)
        except InvalidEvent as exc:
            return self.refuse(provider, event, exc)
        return self.accept(provider, event, settled, rejudge)

    def refuse(self, provider: str, event: Event, exc: InvalidEvent) -> ingest.Answer:
        """A parsed event's refusal (400), recorded as a failure that `events list` and /admin show."""
        return ingest.refuse_invalid(self.pool.get(), self.registry, provider, event, exc)

    def reprocess(self, provider: str, event_id: str, allow_ignored: bool = False) -> ingest.Answer:
        """Admit and accept an event's stored body again, as a delivery of it is (`events reprocess`, /admin).

        The very claim a delivery takes, so a completed event only replays
        its stored answer, but for a stored refusal for good (422), which
        is judged again by this process's rules through its own row. No
        signature check: the body was verified when it was first received,
        and only someone with the database or the admin token can ask for
        this. Raises `NotReprocessed` when there is nothing
        to run, or when running it here would close it wrongly (`refused`).
        """
        with db.connection(self.pool.get()) as conn:
            detail = history.event(conn, provider, event_id)
        if detail is None or detail.payload is None:
            raise NotReprocessed(f"no stored payload for {event_id}")
        reason = refusal(detail, allow_ignored, self.registry)
        if reason:
            raise NotReprocessed(f"refused to reprocess {event_id}: {reason}", refused=True)
        try:
            event = stored_event(self.providers, detail)
        except InvalidEvent as exc:
            raise NotReprocessed(f"stored payload of {event_id} is not an event: {exc}") from None
        # A stored refusal for good is judged again by this process's rules
        # (after an upgrade), through its own ledger row; nothing is deleted.
        return self.admit_and_accept(provider, event, rejudge=detail.response_status == InvalidFields.status)

    def reprocess_each(
        self, targets: Iterable[tuple[str, str]], allow_ignored: bool = False
    ) -> Iterator[Reprocessed]:
        """`reprocess` of each (provider, event id) in turn; one that is not run does not stop the rest."""
        for provider, event_id in targets:
            try:
                yield Reprocessed(provider, event_id, self.reprocess(provider, event_id, allow_ignored))
            except NotReprocessed as exc:
                yield Reprocessed(provider, event_id, not_run=exc)

    def run_bulk_batch(self, conn: psycopg.Connection, job_id: int | None = None) -> bulk.Batch:
        """One batch of the bulk jobs running (core/bulk.py), or of `job_id`'s, on `conn`; each
        event reprocessed as `reprocess` does, with its job's `allow_ignored`."""

        def reprocess(provider: str, event_id: str, selection: dict[str, Any]) -> tuple[bool, str]:
            [result] = self.reprocess_each([(provider, event_id)], bool(selection.get("allow_ignored")))
            return result.completed, result.said

        return bulk.run_batch(conn, reprocess, job_id=job_id)

    def fulfil_checkout(self, session_id: str, account: str | None = None) -> returns.Returned:
        """A customer's return from Checkout: the session read from Stripe, then fulfilled through
        the claim, once whichever of it and the webhook comes first (domains/stripe/returns.py)."""
        return returns.fulfil(self, session_id, account)

    def publish_settings(self) -> None:
        """Write the domain settings that live in the database (the subscription grace) where SQL reads them.

        The web app does, at start: the `subscription_access` view is the
        shop's too, so it shows the serving process's settings, not those of
        whatever command ran last from a shell.
        """
        access.publish_settings(
            database_url(self.settings),
            self.settings.subscription_grace,
            self.settings.subscription_renewal_margin,
        )

    def close(self) -> None:
        self.pool.close()


@dataclass(frozen=True)
class Reprocessed:
    """What one reprocess came to: the answer, or why it did not run."""

    provider: str
    event_id: str
    answer: ingest.Answer | None = None
    not_run: NotReprocessed | None = None

    @property
    def completed(self) -> bool:
        return self.answer is not None and self.answer.status == 200

    @property
    def said(self) -> str:
        """What it came to, in one line: the answer's status and outcome, or why it did not run."""
        if self.answer is None:
            return str(self.not_run)
        replayed = " (already completed: stored answer)" if self.answer.replayed else ""
        return f"{self.answer.status} {self.answer.outcome}{replayed}"


class NotReprocessed(Exception):
    """Why an event was not re-run, in one line; `refused` when running it here would close it wrongly."""

    def __init__(self, message: str, refused: bool = False):
        super().__init__(message)
        self.refused = refused


def refusal(detail: history.EventDetail, allow_ignored: bool, registry: Registry) -> str | None:
    """Why this process must not re-run the event, or None.

    A completed event only replays its stored answer, so any handler set will
    do. Otherwise the event is closed for good by whatever this process runs:
    with no handler it would be `ignored` forever, and with another handler
    than the one that failed (a shop's replacement of a built-in one) its
    effect would never happen.
    """
    if detail.status == "completed":
        return None
    mine = registry.handler_name(detail.provider, detail.event_type) if detail.event_type else None
    theirs = next((f.handler for f in reversed(detail.failures) if f.handler), None)
    hint = "run it with the server's WEBHOOK_HANDLER_MODULES"
    if mine is None and not allow_ignored:
        ran = f" (its last attempt ran {theirs})" if theirs else ""
        return (
            f"no handler for {detail.event_type} in this process{ran}: it would be closed"
            f" as ignored for good; {hint}, or pass --allow-ignored"
        )
    if mine is not None and theirs is not None and mine != theirs:
        return f"its last attempt ran {theirs}, this process would run {mine}; {hint}"
    return None


# A stored body is read back through its provider's parser, which takes the
# id and type from the headers its signer writes; nothing is verified, so
# any key of the signers' forms will do (this is b"reprocess").
_UNVERIFIED_KEY = "whsec_cmVwcm9jZXNz"


def stored_event(providers: Providers, detail: history.EventDetail) -> Event:
    """The stored body as its provider's parser reads it from a delivery; InvalidEvent if it cannot."""
    provider = providers.get(detail.provider)
    if provider is None:
        raise InvalidEvent(f"no provider {detail.provider} in this process")
    if detail.payload is None:
        raise InvalidEvent("no body was stored")
    sent = Outgoing(detail.event_id, detail.event_type or "", account=detail.account or None)
    headers = provider.sign(detail.payload.encode("utf-8"), _UNVERIFIED_KEY, sent)
    return provider.parse(detail.payload, headers)


def build(settings: Settings | None = None, **pool_options) -> Service:
    """This process's Service; `pool_options` size its pool (a command needs one connection)."""
    settings = settings or Settings.from_env()
    return Service(settings, PROVIDERS, handlers(settings), LazyPool(settings, **pool_options))
