"""The web edge: the Flask app gunicorn serves, its webhook route, the front's config, metrics, /admin."""

# Each provider's deliveries are POSTed to this and its name (/webhooks/stripe):
# the route (delivery.py) and the front's locations (front.py) alike.
WEBHOOK_PREFIX = "/webhooks/"
# The customer's return from Checkout is POSTed under this (checkout_return.py):
# the route and the front's rate limit (front.py) alike.
RETURN_PREFIX = "/stripe/checkout/sessions/"

# The WSGI environ key naming the listener a request came in on (set by
# metrics.ByListener), for the views that serve one listener only: /admin.
LISTENER = "webhooks.listener"
PUBLIC, SCRAPER, ADMIN = "public", "scraper", "admin"
