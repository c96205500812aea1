"""ConsoleProgressBar: Spark's `[Stage 3:=====>   (12 + 2) / 40]` line on stderr.

Shown only when stderr is a terminal and spark.ui.showConsoleProgress is on; a stage
appears once it has run for 500 ms; the line is redrawn every 200 ms and cleared when no
stage is running.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, TextIO

FIRST_DELAY = 0.5
UPDATE_PERIOD = 0.2
CR = "\r"


def render(stages: list[Any], width: int) -> str:
    """The bar for up to 3 stages (SparkStageInfo-like), Spark's layout."""
    per = width // max(len(stages), 1)
    out = []
    for s in stages:
        total = s.numTasks
        header = f"[Stage {s.stageId}:"
        tailer = f"({s.numCompletedTasks} + {s.numActiveTasks}) / {total}]"
        w = per - len(header) - len(tailer)
        bar = ""
        if w > 0:
            percent = w * s.numCompletedTasks // total if total else 0
            bar = "".join("=" if i < percent else ">" if i == percent else " " for i in range(w))
        out.append(header + bar + tailer)
    return "".join(out)


class ConsoleProgressBar:
    def __init__(self, store: Any, stream: TextIO | None = None) -> None:
        self.store = store
        self.stream = stream or sys.stderr
        self.last = ""
        self.last_time = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-progress", daemon=True)

    @staticmethod
    def terminal_width() -> int:
        try:
            return int(os.environ.get("COLUMNS", "")) or 80
        except ValueError:
            return 80

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(UPDATE_PERIOD):
            self.refresh()

    def refresh(self) -> None:
        now = time.time()
        stages = [s for s, submitted in self.store.active_stages()
                  if submitted and now - submitted >= FIRST_DELAY][:3]
        if not stages:
            self.clear()
            return
        bar = render(stages, self.terminal_width())
        if bar != self.last or now - self.last_time > 60:
            self.stream.write(CR + bar + CR)
            self.stream.flush()
            self.last = bar
            self.last_time = now

    def clear(self) -> None:
        if self.last:
            self.stream.write(CR + " " * self.terminal_width() + CR)
            self.stream.flush()
            self.last = ""

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1)
        self.clear()
