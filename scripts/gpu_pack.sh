#!/usr/bin/env bash
# Make .gpu/ (git-ignored): what scripts/gpu_session.sh needs on a GPU machine that has torch, CUDA,
# cupy, numpy and h5py (Python 3.12) but no network. Run here, from anywhere, with ../shared beside
# the clone (or $SPACY_ELMO_SHARED) and .venv made by scripts/install.sh:
#   bash scripts/gpu_pack.sh          # about 50 MB; carry ".gpu" with the working tree
# .gpu/site.tar.xz   site/: spaCy and its dependencies (../shared/tools/gpu-wheels.sh), Ray with Ray
#                    Data and Ray Serve (its Java jars, RLlib, LLM and the runtime agent's own aiohttp
#                    left out, binaries stripped), jsonschema, pytest-xdist (pyproject.toml's addopts
#                    name its options), and what `serve` needs beyond the machine's own packages
#                    (SERVE_WHEELS); peer-site/: allennlp 2.10.1 and what its
#                    Elmo imports beyond the stubs (the peer, AllenNLP's Elmo, on the same GPU)
# .gpu/distinfo/     spacy-elmo's entry points (the elmo factory) for the code in the working tree
# .gpu/shared/       the fixture, the corpus's valid and test text and 1 MB of its training text, the
#                    peer's tools: a ../shared for the tests and benchmarks there
# .gpu/corpus/       3 MB of training text prepared for pretraining (spacy_elmo.training.corpus) and its vocabulary
# .gpu/downstream/   UD English-EWT as DocBins: 10% of train, and dev (spacy_elmo.training.downstream.data)
# .gpu/wrk/          wrk (Debian's, `apt-get install wrk` here first) and its LuaJIT: bench/serve.py's load generator
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${SPACY_ELMO_SHARED:-../shared}
PY=.venv/bin/python
# `serve` on Ray Serve, beyond the GPU machine's packages: its HTTP proxy (uvicorn, starlette), its API
# (fastapi, which imports the OpenTelemetry API), gRPC reflection (imported by Serve's gRPC proxy) and
# the serve extra's orjson; the versions this checkout's .venv runs the tests with, except
# grpcio-reflection 1.62: its generated code predates protobuf's runtime version check, so it loads
# with whichever protobuf (4 to 7) the machine has
SERVE_WHEELS=(fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0 orjson==3.13.0 opentelemetry-api==1.45.2
  grpcio-reflection==1.62.3)
mkdir -p .git/info
grep -qx '/.gpu/' .git/info/exclude 2> /dev/null || echo '/.gpu/' >> .git/info/exclude
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platform=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
rm -rf .gpu && mkdir -p .gpu/shared/fixtures .gpu/shared/data/corpus .gpu/shared/tools .gpu/downstream

# site/ and peer-site/
bash "$SHARED/tools/gpu-wheels.sh" > /dev/null
python3 -m pip download -q "${platform[@]}" -d "$work/extra" jsonschema jsonschema-specifications referencing \
  rpds-py "ray==2.60.0" "${SERVE_WHEELS[@]}" pytest-xdist execnet
python3 -m pip download -q "${platform[@]}" -d "$work/peer" allennlp==2.10.1 cached-path==1.1.6 lmdb dill base58 \
  more-itertools
mkdir -p "$work/tree/site" "$work/tree/peer-site"
for wheel in .whl/*.whl "$work"/extra/*.whl; do unzip -q -o "$wheel" -d "$work/tree/site"; done
for wheel in "$work"/peer/*.whl; do unzip -q -o "$wheel" -d "$work/tree/peer-site"; done
ray=$work/tree/site/ray
rm -rf "$ray/jars" "$ray/rllib" "$ray/llm" "$ray/_private/runtime_env/agent/thirdparty_files"
rm -f "$ray"/dashboard/client/build/static/js/*.map
strip --strip-unneeded "$ray/_raylet.so" "$ray/core/src/ray/raylet/raylet" "$ray/core/src/ray/gcs/gcs_server"
tar -cJf .gpu/site.tar.xz -C "$work/tree" --owner=0 --group=0 site peer-site

# the entry points
$PY -m pip wheel -q --no-deps --no-build-isolation -w "$work/wheel" .
mkdir -p .gpu/distinfo && unzip -q "$work"/wheel/spacy_elmo-*.whl 'spacy_elmo-*.dist-info/*' -d .gpu/distinfo

# data
cp -r "$SHARED/fixtures/elmo-allennlp" .gpu/shared/fixtures/
cp -r "$SHARED/tools/peer-allennlp" .gpu/shared/tools/
cp "$SHARED/data/corpus/valid.txt" "$SHARED/data/corpus/test.txt" .gpu/shared/data/corpus/
head -c 1000000 "$SHARED/data/corpus/train.txt" > .gpu/shared/data/corpus/train.txt
head -c 3000000 "$SHARED/data/corpus/train.txt" > "$work/train.txt"
$PY - "$work/train.txt" "$SHARED/data/corpus" << 'EOF'
import sys
from pathlib import Path

from spacy_elmo.training.corpus import prepare_corpus, read_sentences
from spacy_elmo.training.vocab import Vocabulary

train, corpus = Path(sys.argv[1]), Path(sys.argv[2])
splits = {"train": [train], "dev": [corpus / "valid.txt"], "test": [corpus / "test.txt"]}
prepare_corpus(Path(".gpu/corpus/corpus"), splits, pipeline="en")
Vocabulary.from_sentences(read_sentences(Path(".gpu/corpus/corpus/train")), 30000).save(Path(".gpu/corpus/vocab.txt"))
EOF
$PY -m spacy_elmo.training.downstream.data "$SHARED/data" "$work/downstream" > /dev/null
cp "$work/downstream/upos-train-10.spacy" "$work/downstream/upos-dev.spacy" .gpu/downstream/
# wrk for bench/serve.py (the `serve` stage); the GPU machine has the C and SSL libraries it links
if command -v wrk > /dev/null; then
  mkdir -p .gpu/wrk && cp "$(command -v wrk)" .gpu/wrk/ && cp -L "$(ldd "$(command -v wrk)" | awk '/libluajit/ {print $3}')" .gpu/wrk/
else
  echo "wrk is not installed (apt-get install wrk): the serve stage will have no load generator" >&2
fi
du -sh .gpu
