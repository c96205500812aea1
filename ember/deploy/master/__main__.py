"""`python -m ember.deploy.master [options]`: the master daemon in the foreground.

The same as `ember master [options]`, without going through the top-level `ember` command
(handy for process supervisors and for debugging the master on its own)."""
import sys

from ember.deploy.master.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
