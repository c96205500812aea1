"""`python -m ember.deploy.worker [options] <master>`: the worker in the foreground (the
module `ember start-worker` daemonizes)."""
import sys

from ember.deploy.worker.cli import main

if __name__ == "__main__":
    sys.exit(main())
