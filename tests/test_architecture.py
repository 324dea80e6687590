"""The tree is the architecture: imports only go down the layers, and no module imports itself back.

The core, the worker and the web edge import no domain at all: what a
domain brings them (outcome words, job kinds, metrics, periodic work) comes
through the registry the composition root builds (webhooks/core/parts.py).

Every module's imports are read from its source (ast), function-local and
TYPE_CHECKING ones included: a cycle that only type checkers see is still
a cycle in the design.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "webhooks"

# Top to bottom (docs/getting-started.md, "Where the code is"). A module may import from its own
# part of the tree or from a part in a lower layer, never from one beside or above it.
LAYERS = (
    ("__main__",),
    ("commands",),
    ("web", "worker", "traffic"),
    ("bootstrap",),
    ("fulfilment",),
    ("domains",),
    ("providers",),
    ("core",),
    ("infra",),
)
# Parts that read the domains only through the registry, never from a domain's modules.
DOMAIN_FREE = ("core", "worker", "web")
# tests/ mirrors the package (tests/domains/stripe/ holds what webhooks/domains/stripe/ does);
# beside it only the shared helpers, the tests of bench/ and deploy/, and the sample payloads.
TESTS_BESIDE_THE_PACKAGE = ("support", "bench", "deploy", "stripe_events", "corpus")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _resolve(name: str, known: set[str]) -> str | None:
    """`name`, or the nearest package above it that is one of ours."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ours that `module` imports, anywhere in its source."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from package import name` imports the submodule when there is one.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names
            ]
        else:
            continue
        found |= {resolved for target in targets if (resolved := _resolve(target, known))}
    found.discard(module)
    return found


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {module: imports(module, path, known) for module, path in found.items()}


def part(module: str) -> str:
    """The part of the tree a module belongs to: the name right under the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer(module: str) -> int | None:
    return next((i for i, names in enumerate(LAYERS) if part(module) in names), None)


def upward(edges: dict[str, set[str]]) -> list[str]:
    """Imports of a part beside or above the importer's, and modules in no layer."""
    wrong = [f"{module} is in no layer" for module in edges if module != PACKAGE and layer(module) is None]
    for module, targets in edges.items():
        for target in targets:
            if target == PACKAGE or module == PACKAGE or part(module) == part(target):
                continue
            if layer(module) is not None and layer(target) is not None and layer(target) <= layer(module):
                wrong.append(f"{module} imports {target}")
    return sorted(wrong)


def domain_imports(edges: dict[str, set[str]]) -> list[str]:
    """Imports of a domain by a module of a part that must not know any."""
    return sorted(
        f"{module} imports {target}"
        for module, targets in edges.items()
        if part(module) in DOMAIN_FREE
        for target in targets
        if part(target) == "domains"
    )


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another, round in a circle.

    Tarjan's strongly connected components.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in edges.get(module, ()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def stray_test_folders(tests: Path) -> list[str]:
    """Folders of `tests` that name no part of the package and are none of the folders beside it."""
    return sorted(
        str(relative)
        for relative in (folder.relative_to(tests) for folder in tests.rglob("*") if folder.is_dir())
        if relative.parts[0] not in TESTS_BESIDE_THE_PACKAGE
        and not any(part.startswith((".", "__")) for part in relative.parts)
        and not (ROOT / PACKAGE / relative).is_dir()
    )


def test_the_tests_mirror_the_package_and_keep_their_helpers_in_support():
    assert stray_test_folders(ROOT / "tests") == []
    assert sorted(path.name for path in (ROOT / "tests" / "support").rglob("test_*.py")) == []


def test_a_test_folder_the_package_lacks_is_found(tmp_path):
    for folder in ("web", "domains/stripe", "support", "corpus/stripe", "domain/stripe", "__pycache__"):
        (tmp_path / folder).mkdir(parents=True)
    assert stray_test_folders(tmp_path) == ["domain", "domain/stripe"]


def test_imports_only_go_down_the_layers():
    assert upward(graph()) == []


def test_no_modules_import_one_another_in_a_circle():
    assert cycles(graph()) == []


def test_the_core_the_worker_and_the_web_edge_import_no_domain():
    assert domain_imports(graph()) == []


def test_the_checks_find_an_upward_import_a_circle_and_a_domain_import():
    edges = {
        "webhooks.core.ingest": {"webhooks.web.app"},
        "webhooks.web.app": {"webhooks.core.ingest"},
        "webhooks.ops.tool": set(),
        "webhooks.infra.db": set(),
        "webhooks.worker.loop": {"webhooks.domains.stripe.thin", "webhooks.bootstrap"},
        "webhooks.commands.reconcile": {"webhooks.domains.stripe.objects"},
    }
    assert upward(edges) == [
        "webhooks.core.ingest imports webhooks.web.app",
        "webhooks.ops.tool is in no layer",
    ]
    assert cycles(edges) == [["webhooks.core.ingest", "webhooks.web.app"]]
    assert domain_imports(edges) == ["webhooks.worker.loop imports webhooks.domains.stripe.thin"]


def test_the_import_reader_resolves_relative_and_submodule_imports(tmp_path):
    source = tmp_path / "ingest.py"
    source.write_text(
        "from . import ledger\nfrom ..infra.db import cursor\nimport webhooks.core.outbox\n"
        "def later():\n    from .registry import Registry\n"
    )
    known = {
        "webhooks",
        "webhooks.core",
        "webhooks.core.ledger",
        "webhooks.core.outbox",
        "webhooks.core.registry",
        "webhooks.infra",
        "webhooks.infra.db",
    }
    assert imports("webhooks.core.ingest", source, known) == {
        "webhooks.core.ledger",
        "webhooks.infra.db",
        "webhooks.core.outbox",
        "webhooks.core.registry",
    }
