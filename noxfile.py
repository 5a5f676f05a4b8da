"""What the default test run leaves out, each in a virtual environment of its own.

    nox -s matrix      # heavy matrices run once: an empty venv's install, every kernel cap (pytest -m matrix)

The default run (`pytest -q`, what .ci/run runs) keeps a lighter check of each of these promises.
"""

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["matrix"]


@nox.session(python="3.11")
def matrix(session: nox.Session) -> None:
    """The tests marked `matrix`: a venv made from nothing installs spacy-elmo with its dependencies,
    and the parity, invariance and precision tests pass with the kernels capped at each lesser CPU
    class this CPU can simulate (caps above it are skipped with the reason)."""
    session.install("torch==2.13.0")  # the CPU build first, so nothing pulls CUDA wheels
    session.install("-e", ".[dev]")
    session.run("python", "-m", "pytest", "-q", "-rs", "-m", "matrix", *session.posargs)
