"""A process that imports torch, spaCy and spacy_elmo once and runs commands in children forked from
it (tests/fork_host.py starts it). Each child runs what follows ``python`` on a command line as that
command runs it: ``SCRIPT ARGS`` (as ``__main__``, the script's folder first on ``sys.path``),
``-m MODULE ARGS`` (the module as ``__main__``, the working folder first) or ``-c CODE ARGS``, with
its environment, working folder and standard streams. It starts with those three imported: a run
that imports them finds them there instead of importing them again. The host itself runs nothing
of torch's, so no thread pool exists when it forks, and each child starts from the same state: what
one run sets (threads, environment, modules, exit handlers) never reaches another.

One JSON request per line on standard input: ``{"command", "environment", "cwd", "stdout",
"stderr"}`` (``command``: the words after ``python``; the last two: files for the child's output,
one file for both where they are the same).
Answered by a line ``{"pid": N}`` when the child starts and ``{"status": CODE}`` when it ends (a
negative CODE: killed by that signal).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import tempfile
import traceback
import types
from typing import Any, Dict, List

import spacy  # noqa: F401
import torch  # noqa: F401

import spacy_elmo  # noqa: F401
from spacy_elmo.training.launch import run_here


def exit_status(stop: SystemExit) -> int:
    """The status ``sys.exit(code)`` gives a process: None 0, an int itself, anything else printed and 1."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1


def run_command(command: List[str]) -> None:
    """``python COMMAND`` from here: a script, ``-m MODULE`` or ``-c CODE``, then its arguments."""
    first, *rest = command
    if first == "-m":
        module, *arguments = rest
        sys.path[0] = os.getcwd()
        run_here(module, arguments)
    elif first == "-c":
        code, *arguments = rest
        sys.argv = ["-c", *arguments]
        sys.path[0] = ""
        main = sys.modules["__main__"] = types.ModuleType("__main__")  # the host's own is not the code's
        exec(compile(code, "<string>", "exec"), main.__dict__)
    else:
        sys.argv = command
        sys.path[0] = os.path.dirname(os.path.abspath(first))
        runpy.run_path(first, run_name="__main__")


def run_child(request: Dict[str, Any]) -> None:
    """In the forked child: run the request's command; never returns. The host's exit handlers are
    not the child's (they belong to a process that goes on); the child's own run at its end."""
    status = 1
    atexit._clear()
    try:
        with open(os.devnull, "rb") as nothing, open(request["stdout"], "wb") as out:
            os.dup2(nothing.fileno(), 0)  # the host's requests are not the command's input
            os.dup2(out.fileno(), 1)
        if request["stderr"] == request["stdout"]:  # one file for both, as stderr=STDOUT gives
            os.dup2(1, 2)
        else:
            with open(request["stderr"], "wb") as err:
                os.dup2(err.fileno(), 2)
        os.environ.clear()
        os.environ.update(request["environment"])
        tempfile.tempdir = None  # found again from the child's TMPDIR, as a new process finds it
        os.chdir(request["cwd"])
        run_command(request["command"])
        status = 0
    except SystemExit as stop:
        status = exit_status(stop)
    except BaseException:
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
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
            run_child(request)
        answer({"pid": child})
        _, status = os.waitpid(child, 0)
        answer({"status": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
