"""`python -m benchmarks`: why a module entry point — it runs from a checkout with no install."""
import sys

from benchmarks.runner import main

if __name__ == "__main__":
    sys.exit(main())
