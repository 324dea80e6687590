"""CSRF tokens for the console's forms: signed and timed by itsdangerous, keyed by the admin token.

The console keeps no session and sets no cookie, so a token is not stored
anywhere: it is a signature only a holder of the admin token can make, and
it expires. Every gunicorn worker checks any other's, as they share the key.
"""

from __future__ import annotations

from itsdangerous import BadSignature, URLSafeTimedSerializer

# Long enough to read a page and press its button, short enough that one
# copied out of a page is soon worth nothing.
MAX_AGE_S = 3600


class Tokens:
    def __init__(self, admin_token: str):
        self._signer = URLSafeTimedSerializer(admin_token, salt="webhooks-admin-csrf")

    def issue(self) -> str:
        return self._signer.dumps("admin")

    def valid(self, presented: str) -> bool:
        try:
            return self._signer.loads(presented, max_age=MAX_AGE_S) == "admin"
        except BadSignature:  # SignatureExpired is one
            return False
