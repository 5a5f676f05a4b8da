"""The service's SIGTERM, for both engines, in this one module: before the service answers it stops
what was started (``Stopped``); once it answers it asks the engine to drain (``Engine.terminate``);
and a block that installs a handler of its own (Ray's start) gets ours back (``sigterm_kept``)."""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Iterator, Optional


class Stopped(Exception):
    """SIGTERM arrived before the service answered: it stopped without admitting a request."""


class ServiceSigterm:
    """The service's SIGTERM handler: raises ``Stopped`` until ``serving(terminate)``, then calls
    ``terminate`` (the engine's drain). A SIGTERM before is remembered too: the handler raises in
    whatever the main thread runs, and code that ignores the exceptions it meets (a Cython module's
    import, a finalizer: "Exception ignored in ...") would otherwise lose it and serve on."""

    def __init__(self, came: bool = False) -> None:
        self.terminate: Optional[Callable[[], None]] = None
        self.came = came

    def serving(self, terminate: Callable[[], None]) -> None:
        """From now on SIGTERM drains: it calls ``terminate``. Raises ``Stopped`` where a SIGTERM
        came before."""
        if self.came:
            raise Stopped("SIGTERM before the service answered")
        self.terminate = terminate

    def __call__(self, signum: int, frame: Any) -> None:
        if self.terminate is None:
            self.came = True
            raise Stopped("SIGTERM before the service answered")
        self.terminate()


@contextlib.contextmanager
def service_sigterm() -> Iterator["ServiceSigterm"]:
    """Within the block, SIGTERM goes to a ``ServiceSigterm`` (which knows of a SIGTERM the one it
    replaces saw); the handler before it is put back after."""
    before = signal.getsignal(signal.SIGTERM)
    handler = ServiceSigterm(came=isinstance(before, ServiceSigterm) and before.came)
    signal.signal(signal.SIGTERM, handler)
    try:
        yield handler
    finally:
        signal.signal(signal.SIGTERM, before)


def stop_before_serving_on_sigterm() -> Any:
    """From now until the service answers, SIGTERM raises ``Stopped`` in the main thread; the
    handler it replaced."""
    return signal.signal(signal.SIGTERM, ServiceSigterm())


@contextlib.contextmanager
def sigterm_kept() -> Iterator[None]:
    """The SIGTERM handler in place before the block, put back after it: for a block that installs its
    own (Ray's ``ray.init`` installs one that exits, ``sys.exit(15)``, which would skip the drain). A
    SIGTERM that handler turned into SystemExit(15) meanwhile goes to the handler kept, as it would
    have gone without the block."""
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as exit_:
        if exit_.code == signal.SIGTERM and callable(handler):
            handler(signal.SIGTERM, None)
        raise
    finally:
        signal.signal(signal.SIGTERM, handler)
