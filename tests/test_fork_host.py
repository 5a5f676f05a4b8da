"""tests/fork_host.py runs ``python SCRIPT ARGS``, ``python -m MODULE ARGS`` and ``python -c CODE ARGS``
as those commands run them, each in a child that starts from the host's state, whatever earlier
runs set; it refuses an environment that the host could not give a child; a run past its time is
killed and the host serves the next."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from fork_host import ForkHosts

SHOWS_ITS_RUN = """
import json, os, sys
import torch
print(json.dumps({
    "argv": sys.argv, "name": __name__, "cwd": os.getcwd(), "path0": sys.path[0],
    "marker": os.environ.get("FORK_HOST_MARKER"), "threads": torch.get_num_threads(),
    "json_touched": hasattr(json, "touched_by_a_run"),
}))
print("to stderr", file=sys.stderr)
"""

CHANGES_ITS_PROCESS = """
import json, os
import torch
os.environ["FORK_HOST_MARKER"] = "set by an earlier run"
torch.set_num_threads(3)
json.touched_by_a_run = True
"""


@pytest.fixture(scope="module")
def hosts():
    started = ForkHosts()
    yield started
    started.close()


def script(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def test_a_script_gets_its_arguments_environment_folder_and_streams(hosts, tmp_path, monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    shows = script(tmp_path, "shows.py", SHOWS_ITS_RUN)
    environment = {**os.environ, "FORK_HOST_MARKER": "given"}
    done = hosts.run([shows, "--flag", "value"], environment, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["argv"] == [shows, "--flag", "value"] and seen["name"] == "__main__"
    assert seen["cwd"] == str(tmp_path) and seen["path0"] == str(tmp_path)
    assert seen["marker"] == "given" and done.stderr == "to stderr\n"
    assert done.args == [sys.executable, shows, "--flag", "value"]


SHOWS_HOW_IT_RUNS = """
import atexit, json, os, sys, tempfile
import torch
atexit.register(print, "its exit handler ran")
print(json.dumps({
    "argv": sys.argv, "name": __name__, "cwd": os.getcwd(), "path0": sys.path[0],
    "main": sys.modules["__main__"].__dict__ is globals(), "temp": tempfile.gettempdir(),
    "marker": os.environ.get("FORK_HOST_MARKER"), "threads": torch.get_num_threads(),
}))
"""


@pytest.mark.parametrize("kind", ["script", "module", "code"])
def test_a_child_runs_a_command_as_a_process_of_its_own_runs_it(hosts, tmp_path, kind):
    """The same command as a process of its own and in a child: the same arguments, name, folders,
    ``__main__``, temporary folder, environment and threads, and its exit handler runs."""
    (tmp_path / "temp").mkdir()
    shows = script(tmp_path, "shows_how.py", SHOWS_HOW_IT_RUNS)
    command = {"script": [shows], "module": ["-m", "shows_how"], "code": ["-c", SHOWS_HOW_IT_RUNS]}[kind]
    command += ["--flag", "value"]
    environment = {**os.environ, "FORK_HOST_MARKER": "given", "TMPDIR": str(tmp_path / "temp")}
    own = subprocess.run(
        [sys.executable, *command], env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    forked = hosts.run(command, environment, timeout=120, cwd=str(tmp_path))
    assert own.returncode == forked.returncode == 0, (own.stderr, forked.stderr)
    assert forked.stdout == own.stdout and own.stdout.endswith("its exit handler ran\n")
    assert forked.args == [sys.executable, *command]


def test_a_variable_read_at_start_with_another_value_is_refused(hosts, tmp_path):
    """torch read its threads when the host started: a child given another count is refused, not
    run with the host's; the host serves the next command."""
    quick = script(tmp_path, "quick.py", "print('ran')\n")
    hosts.run([quick], dict(os.environ), timeout=120)
    started = len(hosts.started)
    threads = str(int(os.environ.get("OMP_NUM_THREADS", "1")) + 1)
    with pytest.raises(ValueError, match=r"read \['OMP_NUM_THREADS'\] at its start"):
        hosts.run([quick], {**os.environ, "OMP_NUM_THREADS": threads}, timeout=120)
    assert hosts.run([quick], dict(os.environ), timeout=120).stdout == "ran\n"
    assert len(hosts.started) == started


def test_what_a_run_sets_never_reaches_the_next(hosts, tmp_path):
    import json

    environment = {key: value for key, value in os.environ.items() if key != "FORK_HOST_MARKER"}
    shows = script(tmp_path, "shows.py", SHOWS_ITS_RUN)
    before = json.loads(hosts.run([shows], environment, timeout=120).stdout)
    changes = script(tmp_path, "changes.py", CHANGES_ITS_PROCESS)
    assert hosts.run([changes], environment, timeout=120).returncode == 0
    after = json.loads(hosts.run([shows], environment, timeout=120).stdout)
    assert after == before and after["marker"] is None and not after["json_touched"]
    assert after["threads"] != 3


@pytest.mark.parametrize(
    "text,status,said",
    [
        ("import sys\nsys.exit(4)\n", 4, ""),
        ("import sys\nsys.exit('refused: this input')\n", 1, "refused: this input\n"),
        ("raise ValueError('broken script')\n", 1, "ValueError: broken script"),
        ("import sys\nsys.exit()\n", 0, ""),
    ],
    ids=["exit-4", "exit-message", "exception", "exit-none"],
)
def test_a_scripts_exit_status_is_a_processes(hosts, tmp_path, text, status, said):
    done = hosts.run([script(tmp_path, "exits.py", text)], dict(os.environ), timeout=120)
    assert done.returncode == status
    assert said in done.stderr if said else done.stderr == ""


def test_a_run_past_its_time_is_killed_and_the_host_serves_the_next(hosts, tmp_path):
    sleeps = script(tmp_path, "sleeps.py", "import time\ntime.sleep(600)\n")
    hosts.run([script(tmp_path, "warm.py", "pass\n")], dict(os.environ), timeout=120)  # the host started
    started = len(hosts.started)
    with pytest.raises(subprocess.TimeoutExpired, match=r"sleeps\.py'\]' timed out after 1 seconds"):
        hosts.run([sleeps], dict(os.environ), timeout=1)
    assert (
        hosts.run([script(tmp_path, "quick.py", "print('next')\n")], dict(os.environ), timeout=120).stdout == "next\n"
    )
    assert len(hosts.started) == started


def test_a_host_that_starts_no_run_in_time_is_killed_and_not_used_again(tmp_path, monkeypatch):
    import fork_host

    silent = script(tmp_path, "silent_host.py", "import sys, time\nsys.stdin.readline()\ntime.sleep(600)\n")
    monkeypatch.setattr(fork_host, "SERVER", silent)
    stuck = ForkHosts()
    try:
        with pytest.raises(RuntimeError, match="started no run within 1 s"):
            stuck.run([script(tmp_path, "quick.py", "pass\n")], dict(os.environ), timeout=1)
        (host,) = stuck.started
        assert host.process.wait(timeout=60) != 0 and stuck.idle == []
    finally:
        stuck.close()


def test_a_started_child_is_a_process_to_signal_and_one_file_takes_both_streams(hosts, tmp_path):
    """``start`` gives the child's pid at once: it ends by the signal sent to it (status -9), its two
    streams in the one file given for both, in the order written; the host serves the next."""
    output = tmp_path / "output.txt"
    waits = script(
        tmp_path,
        "waits.py",
        "import sys, time\nprint('out', flush=True)\nprint('err', file=sys.stderr, flush=True)\ntime.sleep(600)\n",
    )
    with hosts.lease() as host:
        child = host.start([waits], dict(os.environ), output, output)
        deadline = time.monotonic() + 60
        while not (output.exists() and output.read_text() == "out\nerr\n") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None and output.read_text() == "out\nerr\n"
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(60) == -signal.SIGKILL
    assert (
        hosts.run([script(tmp_path, "quick.py", "print('next')\n")], dict(os.environ), timeout=120).stdout == "next\n"
    )


def test_a_child_left_running_by_a_block_that_failed_is_killed_and_the_host_serves_the_next(hosts, tmp_path):
    sleeps = script(tmp_path, "sleeps.py", "import time\ntime.sleep(600)\n")
    with pytest.raises(ValueError, match="the block failed"), hosts.lease() as host:
        child = host.start([sleeps], dict(os.environ), tmp_path / "out", tmp_path / "err")
        raise ValueError("the block failed")
    assert child.returncode == -signal.SIGKILL and host in hosts.idle
    assert (
        hosts.run([script(tmp_path, "quick.py", "print('next')\n")], dict(os.environ), timeout=120).stdout == "next\n"
    )
