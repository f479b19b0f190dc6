import sys

from sweep.acceptance import main

sys.exit(main())
