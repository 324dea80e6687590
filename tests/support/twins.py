"""A second service on a second migrated database, to compare two deliveries of the same events.

Event and object ids are unique across Stripe, so one database cannot take the
same events twice as two independent runs: the ledger replays the second.
Import the fixture into a test module: `from tests.support.twins import twin  # noqa: F401`.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import pytest

from tests.conftest import service_env
from tests.support.databases import Template
from webhooks.infra.config import Settings
from webhooks.web.app import create_app


@dataclass
class Twin:
    app: object
    client: object
    db: psycopg.Connection


@pytest.fixture
def twin(template: Template):
    with template.copy() as url, psycopg.connect(url, autocommit=True) as db:
        app = create_app(Settings.from_env(service_env(url, WEBHOOK_POOL_MAX_SIZE=40)))
        try:
            yield Twin(app, app.test_client(), db)
        finally:
            app.extensions["webhooks.pool"].close()
