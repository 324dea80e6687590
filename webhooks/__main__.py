import sys

from webhooks.ops.cli import main

sys.exit(main())
