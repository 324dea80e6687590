"""The composition root: the service's HTTP layer, the built-in Stripe and Shopify handlers, the operator page.

`webhooks.service` knows nothing of the Stripe domain or the operator tools;
this is the one place that puts the three together for gunicorn (`wsgi.py`).
"""
from __future__ import annotations

from flask import Flask

from . import fulfilment  # noqa: F401  (register the built-in Stripe and GitHub handlers)
from webhooks.domains import github
from webhooks.web import admin
from webhooks.web import app as http
from . import providers
from webhooks.infra.config import Settings
from webhooks.infra.db import database_url
from webhooks.domains.stripe import access, orders
from webhooks.domains.shopify import orders as shopify_orders, privacy, refunds  # noqa: F401  (they register)


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    orders.configure(settings.order_marker_key)
    app = http.create_app(settings)
    admin.install(app, settings.admin_token, app.extensions["webhooks.pool"], providers.enabled(settings))
    access.publish_settings(
        database_url(settings), settings.subscription_grace, settings.subscription_renewal_margin
    )
    return app
