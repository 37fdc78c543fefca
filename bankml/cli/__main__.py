import sys

from bankml.cli import main

sys.exit(main())
