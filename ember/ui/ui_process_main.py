"""What runs in the driver's UI process (`python -m ember.ui.ui_process_main`); the design,
the driver's end and the frame format are in ember.ui.ui_process.

Why a module of its own, importing only the standard library at first: the process starts
beside every driver, and whatever it imports competes for the cores with the driver and its
fork server while a short application starts (the UI's modules cost about as much CPU as
the rest of a local cold start). So without an event log to write the UI waits, reading and
holding the frames the driver sends, until it is first needed: a connection to its port, a
`SYNC` frame, `FIRST_USE_WAIT` seconds after the start or `HELD_ITEMS` events held (so a
longer application's store is built while it runs and what is held stays small; the wait
is longer than a short application's whole life on a busy 2-core machine). Then it imports the UI, applies
the held frames in order and goes on as if it had started at once: a page request waits
for that, and sees every event sent before it. An application that ends sooner never
pays for the UI's imports. With an event log to write it waits the same way, but only
until the log is due (the rules below: the driver pauses, HOLD_SECONDS, HOLD_ITEMS, a SYNC,
a connection, the end of input), so the log on disk is as fresh as before and the imports
run in the driver's first pause rather than beside its first jobs. All of this process's own
work runs at idle priority (`_idle_priority`).

Once started it still applies events only when the driver pauses: frames are read as they
come and held while more keep coming (a busy driver sends one every 50 ms), and applied
when none came for QUIET seconds, HOLD_SECONDS after the first held frame came (so the log
on disk stays that fresh), when HOLD_ITEMS items are held, when a page is asked for
(the request waits for that, up to CATCH_UP_WAIT), at a SYNC and at the end of input. Why:
the idle priority below keeps this process off a busy core, but not out of the caches it
shares with the driver and its tasks; applying and formatting cost ~10 us per task, and a
10,000-task job ran 6-20 % slower with this process applying each frame as it came than with
a reader that discarded them. A driver killed outright loses nothing held: the end of input
applies and writes it.
"""
from __future__ import annotations

import marshal
import os
import sys
import time
from typing import Any, Callable, Iterator

from ember.ui.ui_frames import HEADER, OPEN_LOG, SYNC, SYNC_ITEM, readable

FIRST_USE_WAIT = 3.0
HELD_ITEMS = 20000
QUIET = 0.1
HOLD_ITEMS = 50000
HOLD_SECONDS = 1.0
CATCH_UP_WAIT = 1.0


def _read_exact(fd: int, n: int) -> bytes:
    """n bytes from fd, fewer only at end of input. Unbuffered on purpose: `select` on the
    fd then tells whether a frame is waiting."""
    chunks, left = [], n
    while left:
        data = os.read(fd, left)
        if not data:
            break
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def _frames(fd: int) -> Iterator[Any]:
    while True:
        head = _read_exact(fd, HEADER.size)
        if len(head) < HEADER.size:
            return
        (n,) = HEADER.unpack(head)
        data = _read_exact(fd, n)
        if len(data) < n:
            return
        yield marshal.loads(data)     # the items stay marshalled until they are applied


def _wait_for_first_use(frames: Iterator[Any], fd: int, listening: list[int],
                        logging_on: bool) -> tuple[list[Any], bool]:
    """The frames read until the UI or the log is needed (see the module's doc), and
    whether the input ended meanwhile."""
    held: list[Any] = []
    count = 0
    deadline = time.monotonic() + (HOLD_SECONDS if logging_on else FIRST_USE_WAIT)
    while count < (HOLD_ITEMS if logging_on else HELD_ITEMS):
        left = deadline - time.monotonic()
        if left <= 0:
            return held, False
        quiet = logging_on and bool(held)
        ready = readable([fd, *listening], min(QUIET, left) if quiet else left)
        if any(s in ready for s in listening):
            return held, False
        if fd in ready:
            items = next(frames, None)
            if items is None:
                return held, True
            held.append(items)
            count += len(items)
            if SYNC_ITEM in items:
                return held, False
        elif quiet:
            return held, False
    return held, False


class _CatchUp:
    """A page request's way to have the held frames applied before it reads the store."""

    def __init__(self) -> None:
        import threading
        self.fd, self._w = os.pipe()
        self._cv = threading.Condition()
        self._applied = 0

    def request(self) -> None:
        """On a server thread: wait (up to CATCH_UP_WAIT) until what was held is applied."""
        with self._cv:
            seen = self._applied
            os.write(self._w, b"!")
            self._cv.wait_for(lambda: self._applied > seen, CATCH_UP_WAIT)

    def answered(self) -> None:
        """On the applying thread, after an apply: every request made before it is served."""
        with self._cv:
            self._applied += 1
            self._cv.notify_all()


def _coalesced(frames: Iterator[Any], fd: int, catch_up: _CatchUp | None) -> Iterator[list]:
    """The frames' items (still marshalled) in order, joined into one list while the driver
    is busy (see the module's doc); an empty list when a page asks and nothing is held."""
    held: list[Any] = []
    waits = [fd] if catch_up is None else [fd, catch_up.fd]
    ended = False
    since = 0.0                 # when the first of the held frames came
    while not ended:
        asked = False
        left = since + HOLD_SECONDS - time.monotonic()
        if len(held) < HOLD_ITEMS and (not held or left > 0):
            ready = readable(waits, min(QUIET, left) if held else None)
            if catch_up is not None and catch_up.fd in ready:
                os.read(catch_up.fd, 4096)
                asked = True
                # the page sees what reached the pipe before it asked, too
                while readable([fd], 0):
                    items = next(frames, None)
                    if items is None:
                        ended = True
                        break
                    held.extend(items)
            elif fd in ready:
                items = next(frames, None)
                if items is None:
                    break
                if not held:
                    since = time.monotonic()
                held.extend(items)
                if not items or items[-1] != SYNC_ITEM:
                    continue
        if held or asked:
            yield held
            held = []
    if held:
        yield held


def _idle_priority() -> None:
    """Make the calling thread take only CPU time nobody else wants (SCHED_IDLE). Why not
    `nice`: a nice process still delays the driver and task processes when they wake up,
    and a job of tiny tasks is a chain of such wake-ups; SCHED_IDLE yields at once. The
    main thread gets it before anything else: reading the driver's frames, importing the
    UI (~0.1 s of CPU, while the application's first jobs run) and applying events all
    wait for idle time. Threads serving pages keep normal priority (`_normal_priority`)."""
    import threading
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def _normal_priority() -> Callable[[Callable[[], None]], None]:
    """Call before `_idle_priority`: a function that runs a call on a thread at the current
    (normal) priority and waits for it. Why: a thread keeps the policy of the thread that
    started it, and the UI's server threads must answer a page while the driver keeps the
    cores busy."""
    import queue
    import threading
    calls: queue.SimpleQueue = queue.SimpleQueue()

    def serve() -> None:
        while True:
            call, done = calls.get()
            try:
                call()
            finally:
                done.set()

    threading.Thread(target=serve, name="ui-starter", daemon=True).start()

    def run(call: Callable[[], None]) -> None:
        done = threading.Event()
        calls.put((call, done))
        done.wait()
    return run


def main() -> int:
    fd = sys.stdin.fileno()
    frames = _frames(fd)
    first = next(frames, None)
    if not first:
        return 0
    settings = marshal.loads(first[0])
    conf, ui_fd, logging_on = settings["conf"], settings["ui_fd"], settings["event_log"]
    redirect_fd = settings.get("redirect_fd")
    start_ui_thread = _normal_priority() if ui_fd is not None else None
    _idle_priority()
    held, ended = _wait_for_first_use(
        frames, fd, [f for f in (ui_fd, redirect_fd) if f is not None], logging_on)
    if ended and not logging_on:
        return 0                # the application ended before anyone needed its UI
    import itertools
    import json
    import logging
    import socket

    from ember.ui.event_log import EventLogWriter, _TaskLines, json_line, json_to_event
    from ember.ui.ui_process import unpack
    from ember.util.logs import configure_logging
    configure_logging(logging.WARNING)
    log = logging.getLogger("ember.ui.UiProcess")
    store = None
    catch_up = None
    if start_ui_thread is not None:
        from ember.ui.spark_ui import SparkUI
        from ember.ui.status_store import AppStatusStore
        store = AppStatusStore(conf)
        catch_up = _CatchUp()
        start_ui_thread(SparkUI(store, socket.socket(fileno=ui_fd), conf,
                                socket.socket(fileno=redirect_fd)
                                if redirect_fd is not None else None,
                                catch_up=catch_up.request).start)
    lines = _TaskLines()
    writer: Any = None
    pending: list[str] = []
    synced = 0
    for items in itertools.chain(held, _coalesced(frames, fd, catch_up)):
        text: list[str] = []
        events: list[Any] = []
        for raw in items:
            item = marshal.loads(raw)
            if type(item) is dict:      # JSON-native (event_to_json): no parse needed
                try:
                    if logging_on:
                        text.append(json_line(item))
                    if store is not None:
                        events.append(json_to_event(item))
                except (ValueError, KeyError, TypeError) as e:
                    log.error("Cannot apply %.200r to the UI: %s", item, e)
            elif type(item) is str:
                if logging_on:
                    text.append(item)
                if store is not None and item:
                    try:
                        events.append(json_to_event(json.loads(item)))
                    except (ValueError, KeyError, TypeError) as e:
                        log.error("Cannot apply %.200r to the UI: %s", item, e)
            elif item[0] == SYNC:
                synced += 1
            elif item[0] == OPEN_LOG:
                text, pending = pending + text, []
                try:
                    writer = EventLogWriter(item[1])
                except OSError as e:
                    log.error("Cannot open the event log %s: %s", item[1].get("path"), e)
                    logging_on = False
            else:
                for e in unpack(item):
                    events.append(e)
                    if logging_on:
                        text.append(lines.encode(e))
        if store is not None:
            store.on_events([e for e in events if e is not None])
        if writer is not None:
            try:
                writer.write("".join(text).encode())
            except OSError as e:    # disk full, say: the UI goes on without the log
                log.error("Cannot write the event log %s: %s; it ends here", writer.path, e)
                writer, logging_on = None, False
        elif logging_on:
            pending.extend(text)
        if synced:
            os.write(1, b"." * synced)
            synced = 0
        if catch_up is not None:
            catch_up.answered()
    if writer is not None:
        writer.close()
    return 0


if __name__ == "__main__":
    os._exit(main())      # the UI's server threads end with the process, at once
