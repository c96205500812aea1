"""tests.helpers.executor_sleeper behind an import that takes two seconds: a test can kill an
executor while the worker's zygote, which imports its main module first, is still busy."""
from __future__ import annotations

import sys
import time

time.sleep(2.0)

from tests.helpers.executor_sleeper import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
