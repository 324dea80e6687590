"""The web edge: the Flask app gunicorn serves, its webhook route, the front's config, metrics, /admin."""
