import sys

from opforge_replay.server import main

sys.exit(main())
