import sys

from trustrl.cli import main

sys.exit(main())
