"""The launch's signal handlers (profiler.launch._Signals): a clean launch gives the old handlers
back; once a signal stopped it, later SIGINT/SIGTERM are ignored so that a repeated Ctrl-C cannot
kill the process between the launch's end and its one-line report (it exits 130, not -2)."""

from __future__ import annotations

import os
import signal

from profiler.launch import _Signals


def test_a_clean_launch_restores_the_handlers() -> None:
    before = signal.getsignal(signal.SIGINT)
    with _Signals() as signals:
        assert signal.getsignal(signal.SIGINT) is not before
    assert signals.first is None
    assert signal.getsignal(signal.SIGINT) is before


def test_after_an_interrupt_later_signals_are_ignored() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with _Signals() as signals:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
        assert signals.first == signal.SIGINT and len(signals.received) == 2
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # ignored: no KeyboardInterrupt
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
