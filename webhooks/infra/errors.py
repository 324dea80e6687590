"""Errors whose text is shown as it is: it names what is wrong, never a value from a payload.

A log line, `webhook_failures`, `events show`, /admin and a command's
error line show an error's text only when its class says the text is
public (infra/logs.public_message). Any other exception can quote the data
it tripped on: a handler's `ValueError(f"no account for {email}")`, a
codec's error naming the character, a KeyError naming a metadata key.
"""


class PublicError(Exception):
    """An error whose text this project (or a shop's handler) wrote to name a field, a setting or a rule.

    Subclass it, or raise it, to have the text shown wherever the failure
    is recorded; never put a value from a payload in it.
    """
