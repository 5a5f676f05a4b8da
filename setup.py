from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
version = next(
    line.split('"')[1]
    for line in (ROOT / "spacy_elmo" / "__init__.py").read_text().splitlines()
    if line.startswith("__version__")
)

# `serve` on its default engine (one replica in this process): uvicorn serves the gateway, which reads
# and answers with starlette's requests and responses, writes JSON with orjson and metrics with
# prometheus_client, and its OpenAPI document from msgspec types (serving/api_types.py); uvicorn
# runs on uvloop and httptools where they are installed (its "auto"), as the benchmarks were
# measured (BENCHMARKS.md). Ray is not among them: see "ray". Tested with
# uvicorn 0.54, starlette 1.10, orjson 3.13, prometheus_client 0.26, msgspec 0.23, uvloop 0.23, httptools 0.9.
SERVE = [
    "uvicorn>=0.26",
    "starlette>=0.37",
    "orjson>=3.9",
    "prometheus_client>=0.17",
    "msgspec>=0.18",
    "httptools>=0.6",
    "uvloop>=0.19; sys_platform != 'win32'",
]
# Every feature that runs on Ray, in one extra: `embed --ray / --ray-address` (blocks embedded by
# actors on Ray Data) and `serve --replicas N / --ray-address / --engine ray` (the gateway and the
# replicas on Ray Serve, which also needs what `serve` needs); psutil finds and stops the processes
# a local Ray leaves behind (Ray carries its own copy, not as a dependency).
RAY = ["ray[data,serve]>=2.60,<3", "psutil>=5.9", *SERVE]

setup(
    name="spacy-elmo",
    version=version,
    description="ELMo deep contextualized word representations as a spaCy v3 pipeline component",
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    # training/ (the pretraining workflow, kept at the top level as the design card lays it out)
    # installs as spacy_elmo.training: a top-level `training` in site-packages would collide with
    # any training.py in a user's folder. Import it by that one name everywhere.
    packages=find_packages(include=["spacy_elmo", "spacy_elmo.*"])
    + [f"spacy_elmo.{name}" for name in find_packages(include=["training", "training.*"])],
    package_dir={"spacy_elmo.training": "training"},
    package_data={
        "spacy_elmo": ["py.typed", "tasks/configs/*.cfg", "serving/docs_page.html"],
        "spacy_elmo.training": ["configs/*.json"],
    },
    python_requires=">=3.10",
    install_requires=[
        # What the compatibility matrix passed (docs/compatibility.md, `nox -s compat`); torch open
        # below the next major while the newest release passes. Install torch first.
        "torch>=2.5,<3",
        "spacy>=3.7,<3.9",
        "thinc>=8.2,<8.4",
        "numpy>=1.26",
        "requests>=2.25",
        "safetensors>=0.4",
        "srsly>=2.4",
        "tqdm>=4.60",
        "typer>=0.9",
        "wasabi>=1.1",
    ],
    extras_require={
        "h5": ["h5py>=3.8"],
        "cuda12x": ["cupy-cuda12x>=12"],
        "train": ["matplotlib>=3.5", "gensim>=4.3"],
        # `serve`: the pipeline behind HTTP, one replica in this process (no Ray; SERVE above)
        "serve": SERVE,
        # `embed --ray`, `serve --replicas N` and every other feature on Ray, on one machine or a cluster (RAY above)
        "ray": RAY,
        # spaCy's lemma tables, for pipelines around models trained on lemmas (saved inside them)
        "lemmas": ["spacy-lookups-data>=1.0.3"],
        "dev": [
            "spacy-lookups-data>=1.0.3",
            "pytest>=7",
            "pytest-xdist>=3.5",  # the suite runs side by side (tests/suite_plugin.py)
            "h5py>=3.8",
            "hypothesis>=6",
            # the GPU's kernels run in Triton's interpreter on a CPU (tests/test_triton_kernels.py patches
            # 3.6's interpreter); on a GPU Triton comes with torch's Linux CUDA wheels
            "triton==3.6.0; platform_system == 'Linux' and platform_machine == 'x86_64'",
            *RAY,
            "httpx>=0.27",  # the tests' HTTP client
            "openai>=1.40",  # the tests speak to serve's /v1/embeddings with OpenAI's own client
            # every answer of serve checked against its /openapi.json, and the document against OpenAPI 3.1
            "jsonschema>=4.18",
            "openapi-spec-validator>=0.7",
            "sybil>=9",  # tests/test_docs.py runs the docs' code blocks
            "matplotlib>=3.5",
            "gensim>=4.3",
            "build>=1.0",
            "ruff>=0.8,<0.16",  # lint and format (pyproject.toml), checked by .ci/run
            "mypy>=2.4,<3; python_version >= '3.10'",  # types (pyproject.toml [tool.mypy]), checked by .ci/run
            "pre-commit>=3",
            "nox>=2024.4",  # noxfile.py: what the default test run leaves out
            # the documentation site (mkdocs.yml; scripts/build_docs.sh), built strictly by .ci/run
            "mkdocs>=1.6,<2",
            "mkdocs-material>=9.5,<10",
            "mkdocstrings[python]>=0.26,<2",
            # the reference for the ELMoForManyLangs parity tests; its Highway breaks on overrides>=4
            "elmoformanylangs==0.0.4.post2",
            "overrides<4",
        ],
    },
    entry_points={
        "spacy_factories": ["elmo = spacy_elmo.pipeline.component:make_elmo"],
        "spacy_architectures": [
            "spacy-elmo.BiLM.v1 = spacy_elmo.pipeline.bilm_layer:build_bilm",
            "spacy-elmo.TaskMix.v1 = spacy_elmo.pipeline.task_mix:TaskMix",
            "spacy-elmo.ElmoEmbed.v1 = spacy_elmo.pipeline.task_mix:ElmoEmbed",
            "spacy-elmo.ElmoTok2Vec.v1 = spacy_elmo.pipeline.task_mix:ElmoTok2Vec",
        ],
        "spacy_scorers": ["spacy-elmo.upos_scorer.v1 = spacy_elmo.tasks.conllu:make_upos_scorer"],
        "console_scripts": ["spacy-elmo = spacy_elmo.cli:app"],
    },
)
