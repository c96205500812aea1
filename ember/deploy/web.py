"""An aiohttp server on its own thread and event loop, for the daemons' web UIs.

The RpcEnv keeps its loop private, so each UI runs aiohttp beside it and reads daemon state
only through RPC asks (RequestMasterState, RequestWorkerState): it never touches state.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import threading
from typing import Optional

from aiohttp import web

log = logging.getLogger(__name__)


class WebServerThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner: Optional[web.AppRunner] = None

    def start(self, sock: socket.socket, app: web.Application, timeout: float = 30.0) -> None:
        """Serve app on the bound, listening sock; returns once serving. Re-raises a start
        failure (and closes sock)."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()
        errors: list[BaseException] = []

        async def serve() -> None:
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            self._runner = runner
            await web.SockSite(runner, sock).start()

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
            except BaseException as e:  # reported to start()'s caller
                errors.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                try:
                    if self._runner is not None:
                        loop.run_until_complete(self._runner.cleanup())
                    loop.run_until_complete(loop.shutdown_asyncgens())
                except Exception:
                    log.debug("Error closing the %s loop", self.name, exc_info=True)
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait(timeout)
        if errors:
            sock.close()
            raise errors[0]

    def stop(self) -> None:
        """Close the listening socket and connections, stop the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            pass  # loop already closed
        thread.join(10)
