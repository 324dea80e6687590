"""Personal data in free text: email addresses, phone numbers and street addresses, found and replaced.

What a key names (a card's `last4`, an `email` field) is the policy's
business (webhooks/core/redaction.py); this finds what text carries
wherever it is, a description or a metadata value, for the payloads shown
and the log lines written alike.

Phone numbers are found by phonenumbers, Google's libphonenumber for Python:
it knows every country's numbering plan, so it finds a number written in
any of its usual forms and leaves dates, amounts and ids alone. Numbers in
international form (+44 ...) are found from any country, national ones as
PHONE_REGION writes them. Email addresses are a pattern (the part after
the @ a domain). No maintained library finds street addresses in free text
without a model to download at run time (libpostal's, Presidio's spaCy):
a house number, one to four capitalised words and a street word is the
pattern here, so an address written otherwise is not found.
"""

from __future__ import annotations

import re

import phonenumbers

REDACTED = "[redacted]"
# Whose national numbers (without a +country code) are recognised.
PHONE_REGION = "US"

_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_STREET_WORDS = (
    "Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Place|Pl|Square|Sq|Way|"
    "Terrace|Parkway|Pkwy|Highway|Hwy|Close|Crescent|Strasse|Straße|Rue"
)
_ADDRESS = re.compile(rf"\b\d{{1,6}}[A-Za-z]?,?\s+(?:[A-Z][A-Za-z'.-]*\s+){{1,4}}(?:{_STREET_WORDS})\b\.?")
# A run that could be a phone number (seven digits or more, with the
# separators numbers are written with): only text with one is handed to
# phonenumbers.
_PHONE_RUN = re.compile(r"\d[\d\s().-]{5,}\d")
_DIGIT = re.compile(r"\d")
# What each of the three needs somewhere in the text: most text (an id, a
# type, a word) has none, and costs one scan.
_SUSPECT = re.compile(r"@|\d[\d\s().-]{5,}\d|\d[A-Za-z]?,?\s+[A-Z]")


def scrub(text: str) -> str:
    """`text` with each email address, phone number and street address replaced by REDACTED."""
    if not _SUSPECT.search(text):
        return text
    if "@" in text:
        text = _EMAIL.sub(REDACTED, text)
    if any(len(_DIGIT.findall(run[0])) >= 7 for run in _PHONE_RUN.finditer(text)):
        text = _phones(text)
    if _DIGIT.search(text):
        text = _ADDRESS.sub(REDACTED, text)
    return text


def _phones(text: str) -> str:
    found = phonenumbers.PhoneNumberMatcher(text, PHONE_REGION, leniency=phonenumbers.Leniency.VALID)
    spans = [(match.start, match.end) for match in found]
    for start, end in reversed(spans):
        text = text[:start] + REDACTED + text[end:]
    return text
