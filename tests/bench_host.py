"""A process that imports torch, spaCy and spacy_elmo once and runs bench scripts in children forked
from it (tests/bench_runner.py). Each child runs one script as ``python bench/SCRIPT ARGUMENTS``
does: as ``__main__``, with its arguments, environment, working folder and standard streams, the
script's folder first on ``sys.path``. It starts with those three imported: a run that imports them
(the scripts do where they measure) finds them there instead of importing them again. The host itself
runs nothing of torch's, so no thread pool exists when it forks, and each child starts from the
same state: what one run sets (threads, environment, modules) never reaches another.

One JSON request per line on standard input: ``{"script", "arguments", "environment", "cwd",
"stdout", "stderr"}`` (the last two: files for the child's output). Answered by a line ``{"pid": N}``
when the child starts and ``{"status": CODE}`` when it ends (a negative CODE: killed by that signal).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from typing import Any, Dict

import spacy  # noqa: F401
import torch  # noqa: F401

import spacy_elmo  # noqa: F401


def exit_status(stop: SystemExit) -> int:
    """The status ``sys.exit(code)`` gives a process: None 0, an int itself, anything else printed and 1."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1


def run_script(request: Dict[str, Any]) -> None:
    """In the forked child: run the request's script as ``__main__``; never returns."""
    status = 1
    try:
        with (
            open(os.devnull, "rb") as nothing,
            open(request["stdout"], "wb") as out,
            open(request["stderr"], "wb") as err,
        ):
            os.dup2(nothing.fileno(), 0)  # the host's requests are not the script's input
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
        os.environ.clear()
        os.environ.update(request["environment"])
        os.chdir(request["cwd"])
        sys.argv = [request["script"], *request["arguments"]]
        sys.path[0] = os.path.dirname(os.path.abspath(request["script"]))
        runpy.run_path(request["script"], run_name="__main__")
        status = 0
    except SystemExit as stop:
        status = exit_status(stop)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


def answer(message: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            run_script(request)
        answer({"pid": child})
        _, status = os.waitpid(child, 0)
        answer({"status": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
