"""CSRF tokens for the console's forms: signed and timed by itsdangerous, keyed by the admin token.

A token names the signed-in session it was issued to and the one action
(the form's path) it may post: it is worth nothing to another session, for
another action, after signing out, or once it expires. Nothing is stored: it
is a signature only a holder of the admin token can make, and every
gunicorn worker checks any other's, as they share the key.
"""

from __future__ import annotations

from itsdangerous import BadSignature, URLSafeTimedSerializer

# Long enough to read a page and press its button, short enough that one
# copied out of a page is soon worth nothing.
MAX_AGE_S = 3600


class Tokens:
    def __init__(self, admin_token: str):
        self._signer = URLSafeTimedSerializer(admin_token, salt="webhooks-admin-csrf")

    def issue(self, session: str, action: str) -> str:
        return self._signer.dumps([session, action])

    def valid(self, presented: str, session: str, action: str) -> bool:
        try:
            return bool(session) and self._signer.loads(presented, max_age=MAX_AGE_S) == [session, action]
        except BadSignature:  # SignatureExpired is one
            return False
