import sys

from webhooks.commands import main

sys.exit(main())
