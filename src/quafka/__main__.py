import sys

from quafka.cli.main import main

sys.exit(main())
