import sys

try:
    from webhooks.commands import main
except ModuleNotFoundError as exc:
    # An interpreter without the pinned requirements (the system's python3):
    # the fix, not ten lines of import frames.
    if exc.name and exc.name.split(".")[0] == "webhooks":
        raise
    sys.exit(
        f"error: {sys.executable} lacks the service's requirements (no module {exc.name!r}): "
        "run bin/setup, then .venv/bin/python -m webhooks (or .venv/bin/webhooks)"
    )

sys.exit(main())
