"""The extras `serve` is installed with: `[serve]` holds what the one-process engine imports and no
Ray; `[ray]` adds Ray Serve for `--replicas N`, `--ray-address` and `--engine ray`. Without Ray, the
one-process engine serves every route (tests/test_serve.py's service runs without it), and asking for
Ray fails before the model loads with the extra to install."""

import os
import sys

import pytest
from conftest import setup_extras
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytest.importorskip("uvicorn", reason="the serve extra (pip install spacy-elmo[serve]) is not installed")
httpx = pytest.importorskip("httpx")


from spacy_elmo.serving.settings import SERVE_MODULES  # noqa: E402


def extras() -> dict:
    """setup.py's extras, each as parsed requirements."""
    return {extra: [Requirement(line) for line in lines] for extra, lines in setup_extras().items()}


def names(requirements) -> set:
    return {canonicalize_name(requirement.name) for requirement in requirements}


def test_the_serve_extra_holds_what_the_one_process_engine_imports_and_no_ray():
    found = extras()
    assert "ray" not in names(found["serve"]), found["serve"]
    assert {canonicalize_name(module) for module in SERVE_MODULES} <= names(found["serve"])
    ray = next(requirement for requirement in found["ray"] if requirement.name == "ray")
    assert {"data", "serve"} <= ray.extras, "one extra gives every feature on Ray: embed --ray and serve --replicas"
    assert names(found["serve"]) <= names(found["ray"]), "the Ray engine serves through the same gateway"
    assert "psutil" in names(found["ray"]), "the Ray engine stops Ray's processes with psutil"


def test_the_one_process_engines_modules_import_no_ray(fork_hosts):
    """In a child forked from a host that imported torch, spaCy and spacy_elmo, never Ray (this
    process may have): what importing the engine's modules adds (tests/fork_host.py)."""
    modules = "spacy_elmo.cli.serve, spacy_elmo.serving.service, spacy_elmo.serving.process_engine"
    probe = f"import sys, {modules}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'ray'))"
    result = fork_hosts.run(["-c", probe], os.environ, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr


@pytest.mark.parametrize(
    "hidden, options, named, extra",
    [
        (["ray"], ["--replicas", "2"], "--replicas 2 runs on Ray Serve", "ray"),
        (["ray"], ["--ray-address", "ray://head:10001"], "--ray-address ray://head:10001 runs on Ray Serve", "ray"),
        (["ray"], ["--engine", "ray"], "--engine ray runs on Ray Serve", "ray"),
        (["uvicorn"], [], "uvicorn not installed", "serve"),
    ],
    ids=["replicas", "ray-address", "engine-ray", "no-uvicorn"],
)
def test_a_missing_extra_is_named_before_the_model_loads(tiny_weights, monkeypatch, hidden, options, named, extra):
    """In this process (the check looks for packages, it imports none): each hidden package is
    None in sys.modules, which find_spec and import both take for not installed."""
    from typer.testing import CliRunner

    import spacy_elmo.cli.serve  # noqa: F401  (registers the command)
    from spacy_elmo.cli.app import app

    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)
    result = CliRunner().invoke(app, ["serve", str(tiny_weights), "--port", "1", *options])
    output = " ".join(result.output.split())
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), output
    assert named in output and f'pip install ".[{extra}]"' in output, output
    assert "Serving" not in output and "Traceback" not in output, "it stopped before anything started"
