"""`serve` on an address other machines reach (any host but loopback) without an API key warns when it
starts, with how to set one (docs/serving.md asks for one there); with a key, or on 127.0.0.1, it
says nothing of it."""

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.serving.settings import API_KEY_VARIABLE

pytest.importorskip("uvicorn", reason="the serve extra is not installed")

WARNING = "without an API key: whoever reaches this port can use the service"


STOPPED = "the test stops serve before it listens"


@pytest.fixture
def serve_nothing(monkeypatch, tiny_weights):
    """serve's output up to where the service would start (it binds no port)."""

    def stop(*args, **kwargs):
        raise ValueError(STOPPED)

    monkeypatch.setattr("spacy_elmo.serving.service.run", stop)

    def serve(*options: str, env=None) -> str:
        result = CliRunner().invoke(app, ["serve", str(tiny_weights), *options], env=env)
        output = " ".join(result.output.split())
        assert result.exit_code == 1 and STOPPED in output, output
        return output

    return serve


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1"])
def test_an_open_host_without_a_key_warns_with_the_fix(serve_nothing, host):
    output = serve_nothing("--host", host, env={API_KEY_VARIABLE: None})
    assert f"Listening on {host} {WARNING}" in output, output
    assert f"--api-key KEY, or {API_KEY_VARIABLE}=KEY" in output and "--host 127.0.0.1" in output, output


@pytest.mark.parametrize(
    "options, env",
    [
        (["--host", "0.0.0.0", "--api-key", "s3cret"], {}),
        (["--host", "0.0.0.0"], {API_KEY_VARIABLE: "s3cret"}),
        ([], {}),
    ],
    ids=["key-option", "key-variable", "loopback"],
)
def test_a_key_or_loopback_starts_without_the_warning(serve_nothing, options, env):
    output = serve_nothing(*options, env={API_KEY_VARIABLE: None, **env})
    assert "Serving" in output and WARNING not in output, output
