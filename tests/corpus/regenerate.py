"""Rebuild this folder's data from what the providers publish (see README.md for where to get each).

    python -m tests.corpus.regenerate STRIPE_FIXTURES3_JSON OCTOKIT_PACKAGE_DIR SHOPIFY_FIXTURES_DIR

Keeps only what tests/providers/test_provider_corpus.py reads: the fixtures3.json
resources that the event types of the installed `stripe` package carry, the
api.github.com examples of @octokit/webhooks-examples, and Shopify's order
and refund samples.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

from tests.corpus import stripe_resource, stripe_types

HERE = Path(__file__).resolve().parent


def _write_gz(name: str, data) -> None:
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    (HERE / name).write_bytes(gzip.compress(raw, mtime=0))


def stripe(fixtures3: Path) -> None:
    resources = json.loads(fixtures3.read_text())["resources"]
    used = {stripe_resource(t, resources) for t in stripe_types()} - {None}
    _write_gz("stripe_fixtures3.json.gz", {name: resources[name] for name in sorted(used)})


def github(package: Path) -> None:
    index = json.loads((package / "api.github.com" / "index.json").read_text())
    _write_gz("github_examples.json.gz", [{"name": e["name"], "examples": e["examples"]} for e in index])


def shopify(fixtures: Path) -> None:
    samples = {
        "order": json.loads((fixtures / "order.json").read_text())["order"],
        "orders": json.loads((fixtures / "orders.json").read_text())["orders"],
        "refund": json.loads((fixtures / "refund.json").read_text())["refund"],
    }
    (HERE / "shopify_samples.json").write_text(json.dumps(samples, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    stripe(Path(sys.argv[1]))
    github(Path(sys.argv[2]))
    shopify(Path(sys.argv[3]))
