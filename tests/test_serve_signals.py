"""`serve` and the signals a supervisor sends, at every moment after the command starts, on both
engines: SIGTERM before the service answers stops it (exit 0, nothing admitted); SIGTERM the moment
it is ready drains it (exit 0; on Ray in `nox -s matrix`); Ctrl-C stops it at once; nothing of it is
left running after."""

import os
import signal
import subprocess
import sys
import time
from importlib.util import find_spec

import pytest
from served_process import Served, alarms, session_processes

pytest.importorskip("uvicorn", reason="the serve extra (pip install spacy-elmo[serve]) is not installed")

WITHOUT_RAY = pytest.mark.skipif(
    find_spec("ray") is None, reason="the ray extra (pip install spacy-elmo[ray]) is not installed"
)
ENGINES = ["process", pytest.param("ray", marks=[pytest.mark.slow, WITHOUT_RAY])]


@pytest.mark.parametrize("engine", ENGINES)
def test_sigterm_while_it_starts_stops_it_with_nothing_admitted(tiny_weights, engine):
    """SIGTERM once the command has said what it serves: the pipeline (or Ray) is still starting."""
    served = Served(tiny_weights, engine=engine)
    try:
        assert served.printed("Serving", 120), served.output[-3000:]
        served.process.send_signal(signal.SIGTERM)
        assert served.ended() == 0, served.output[-3000:]
    finally:
        served.stop()
    assert "Stopped before serving (SIGTERM): no request was admitted" in served.output, served.output[-3000:]
    assert "Listening on" not in served.output
    assert not session_processes(served.process.pid), "nothing of the service is left running"


# Ray: 31 s alone on 2 cores of an AMD EPYC Zen 3 (39 to 44 s in the suite's runs). The default run
# keeps test_serve_ray.py's SIGTERM to a Ray service under load, held to the same drain, exit and
# clean output (its start's too), and the SIGTERM while Ray starts above; `nox -s matrix` runs this.
@pytest.mark.parametrize(
    "engine", ["process", pytest.param("ray", marks=[pytest.mark.slow, pytest.mark.matrix, WITHOUT_RAY])]
)
def test_sigterm_the_moment_it_is_ready_drains_it(tiny_weights, engine):
    served = Served(tiny_weights, engine=engine)
    try:
        served.ready()
        served.process.send_signal(signal.SIGTERM)
        assert served.ended() == 0, served.output[-3000:]
    finally:
        served.stop()
    assert "Drained: every request in flight was answered; stopping" in served.output, served.output[-3000:]
    assert not alarms(served.output), (
        f"a clean start and drain printed {alarms(served.output)}: {served.output[-3000:]}"
    )
    assert not session_processes(served.process.pid), "nothing of the service is left running"


def test_ctrl_c_stops_it_at_once(tiny_weights):
    served = Served(tiny_weights)
    try:
        served.ready()
        served.process.send_signal(signal.SIGINT)
        assert served.ended(60) == 0, served.output[-3000:]
    finally:
        served.stop()
    assert "Drained" not in served.output and not session_processes(served.process.pid)


def test_sigterm_while_ray_is_imported_stops_without_touching_ray(monkeypatch, tiny_weights):
    """SIGTERM can land inside Ray's import (the service's handler raises ``Stopped`` there): the engine's
    stop then leaves the module imported halfway alone, and the command stops as asked."""
    import types

    from spacy_elmo.serving import ray_engine, service
    from spacy_elmo.serving.settings import ServeSettings

    def stopped_midway():
        monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))  # what a stopped import leaves
        raise service.Stopped("SIGTERM before the service answered")

    monkeypatch.setattr(ray_engine, "_import_ray", stopped_midway)
    settings = ServeSettings(source=str(tiny_weights), engine="ray", threads=1)
    with pytest.raises(service.Stopped):
        service.run(settings, on_ready=print, on_drain=print, engine=ray_engine.RayEngine(settings))


def test_what_ray_started_is_ended_a_process_that_ignores_sigterm_included():
    """The Ray engine's stop ends the processes that appeared below the service's since Ray started:
    SIGTERM, then SIGKILL to those still running (here, one that ignores SIGTERM); grandchildren too."""
    pytest.importorskip("psutil", reason="the ray extra (pip install spacy-elmo[ray]) is not installed")
    from spacy_elmo.serving import ray_engine

    sleep = "import time; print('ready', flush=True); time.sleep(600)"
    programs = {
        "polite": sleep,
        "stubborn": f"import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); {sleep}",
        "parent": f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {sleep!r}]); {sleep}",
    }
    before = ray_engine.descendants()
    started = {
        name: subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE)
        for name, program in programs.items()
    }
    try:
        for process in started.values():
            assert process.stdout.readline() == b"ready\n"  # its SIGTERM handler, or its child, is in place
        appeared = ray_engine.descendants() - before
        assert len(appeared) == 4, appeared  # the three, and the parent's child
        ray_engine.end_processes(appeared, 2.0)
        assert not [process for process in appeared if ray_engine._running(process)]
        assert all(process.poll() is not None for process in started.values())
    finally:
        for process in started.values():
            if process.poll() is None:
                process.kill()
            process.wait()


class Scripted:
    """An engine that sends this process SIGTERM while it starts (where ``swallowed``, inside code
    that ignores the exception, as a Cython module's import does), or while it serves, and records
    what the service asks of it."""

    url = "http://scripted"

    def __init__(self, sigterm_while: str):
        self.sigterm_while, self.calls = sigterm_while, []

    def _sigterm(self, moment: str) -> None:
        if self.sigterm_while == moment:
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 60  # a hang guard: the handler runs in this thread at once
            while "terminate" not in self.calls and time.monotonic() < deadline:
                time.sleep(0.01)

    def start(self):
        self.calls.append("start")
        self._sigterm("start")
        if self.sigterm_while == "start, swallowed":
            from spacy_elmo.serving.sigterm import Stopped

            try:
                self._sigterm("start, swallowed")
            except Stopped:
                pass  # lost here, as "Exception ignored in ..." loses it

    def serve(self, drain_s, on_drain):
        self.calls.append("serve")
        self._sigterm("serve")
        on_drain(0)

    def terminate(self):
        self.calls.append("terminate")

    def stop(self):
        self.calls.append("stop")


@pytest.mark.parametrize(
    "moment, calls",
    [
        ("start", ["start", "stop"]),
        ("start, swallowed", ["start", "stop"]),
        ("serve", ["start", "ready", "serve", "terminate", "stop"]),
    ],
)
def test_one_sigterm_handler_stops_any_engine_before_it_answers_and_drains_it_after(moment, calls, tiny_weights):
    """The service's handler, the same for both engines: SIGTERM while the engine starts raises
    ``Stopped`` (the engine is stopped, and the service never says it is ready), even where the
    start swallowed that exception; once it answers, SIGTERM asks the engine to drain
    (``terminate``). The handler in place before is put back."""
    from spacy_elmo.serving import service
    from spacy_elmo.serving.settings import ServeSettings

    before = signal.getsignal(signal.SIGTERM)
    engine = Scripted(moment)
    settings = ServeSettings(source=str(tiny_weights), threads=1)
    ready = lambda url: engine.calls.append("ready")  # noqa: E731
    if moment.startswith("start"):
        with pytest.raises(service.Stopped):
            service.run(settings, on_ready=ready, on_drain=print, engine=engine)
    else:
        service.run(settings, on_ready=ready, on_drain=print, engine=engine)
    assert engine.calls == calls
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_sigterm_lost_before_the_service_started_still_stops_it(tiny_weights):
    """The command's handler (from its first line) hands a SIGTERM whose ``Stopped`` was swallowed
    (while the command imported, say) to the service's: the engine starts, is stopped, and the
    service never says it is ready."""
    from spacy_elmo.serving import service
    from spacy_elmo.serving.settings import ServeSettings
    from spacy_elmo.serving.sigterm import Stopped, stop_before_serving_on_sigterm

    before = stop_before_serving_on_sigterm()
    try:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(60)  # the handler raises Stopped in this thread at once; 60 s bounds one that does not
            pytest.fail("the command's SIGTERM handler did not raise Stopped within 60 s")
        except Stopped:
            pass  # lost here, as "Exception ignored in ..." loses it
        engine = Scripted("never")
        settings = ServeSettings(source=str(tiny_weights), threads=1)
        with pytest.raises(service.Stopped):
            service.run(settings, on_ready=lambda url: engine.calls.append("ready"), on_drain=print, engine=engine)
        assert engine.calls == ["start", "stop"]
    finally:
        signal.signal(signal.SIGTERM, before)
