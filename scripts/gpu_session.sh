#!/usr/bin/env bash
# Run every CUDA path once on a GPU machine that has torch and CUDA but no network, and measure it.
#
#   bash scripts/gpu_pack.sh                      # here: .gpu/ (site-packages, fixtures and data copies)
#   bash scripts/gpu_session.sh tests component   # there, from the repo root, with .gpu carried beside it
#
# Stages (each with its own time limit; a failed stage does not stop the next):
#   env          nvidia-smi, versions, `python -m spacy_elmo info --machine`, bench/gpu.py drift (GPU against CPU)
#   gpu-tests    tests/test_gpu.py alone (the Triton kernels, CUDA graphs, batch invariance, parity on CUDA)
#   tests        the GPU tests, parity, int8 on CUDA, and pretraining's tests (which run on the GPU there)
#   profile      bench/gpu.py profile: torch.profiler's host/GPU split for 1, 64 and 1,000 sentences
#                (PROFILE_LABEL names its bench/results/profile-gpu-LABEL.json; after by default)
#   profile-before  the same for the package as .gpu-before/ holds it (`git archive`: the code before a
#                change; PROFILE_LABEL before by default)
#   profile-small-graphs  the same with CUDA graphs for calls up to 256 tokens alone (as before every call could)
#   component    bench/gpu.py component: the component through nlp.pipe in fp32/bf16/int8 against AllenNLP
#                (GPU_LABEL names its bench/results/gpu-LABEL.json; gpu.json by default)
#   train-speed  bench/pretrain.py speed: pretraining tokens/s per preset, bf16 and torch.compile on/off
#   spacy-train  `spacy train --gpu-id 0` of the UPOS +ELMo config for a few hundred steps
#   ray          `embed` on Ray with one GPU per worker, against `embed --gpu-id 0`, output compared
#   embed-gpu    bench/embed.py --gpu-id 0: `embed --gpu-id 0` on 10,000 lines against nlp.pipe
#   serve        bench/serve.py --device cuda: the service on the GPU against nlp.pipe on the GPU, under wrk
# Logs go to $OUT/STAGE.log (and bench/results/ as the benchmarks write them).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-out}
WORK=${GPU_WORK:-/tmp/gpu}
mkdir -p "$OUT" "$WORK"
if [ ! -d "$WORK/site" ]; then
  tar -xJf .gpu/site.tar.xz -C "$WORK" && cp -r .gpu/distinfo/* "$WORK/site/" || exit 1
fi
export PYTHONPATH="$WORK/site:$PWD" SPACY_ELMO_SHARED="$PWD/.gpu/shared" PYTHONUNBUFFERED=1
# training/ is spacy_elmo.training once installed (setup.py's package_dir); this copy is not installed
[ -e spacy_elmo/training ] || ln -s ../training spacy_elmo/training
export PATH="$PWD/.gpu/wrk:$PATH" LD_LIBRARY_PATH="$PWD/.gpu/wrk${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PEER="$WORK/peer"
if [ ! -f "$PEER/full/lm_weights.hdf5" ]; then
  mkdir -p "$PEER/venv/bin"
  # the peer runs on this machine's python with its own packages after the stubs (bench/suite/peer.py)
  printf '#!/usr/bin/env bash\nPYTHONPATH="$PYTHONPATH:%s" exec python3 "$@"\n' "$WORK/peer-site" > "$PEER/venv/bin/python"
  chmod +x "$PEER/venv/bin/python"
  python3 .gpu/shared/tools/peer-allennlp/bench/make_fullsize.py "$PEER/full" > /dev/null
fi
PIPELINE="$WORK/elmo-full"

stage() {  # stage NAME SECONDS COMMAND...: run it with a time limit, log to $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  timeout --kill-after 10 "$limit" bash -c '"$@"' stage "$@" >> "$OUT/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - started)) s"
  tail -n 25 "$OUT/$name.log"
}

full_size_pipeline() {
  python3 -c "import sys; sys.path.insert(0, 'bench'); from suite.workloads import converted_weights; from pathlib import Path; print(converted_weights(Path('$PEER')))" &&
    python3 -m spacy_elmo pipeline bench/out/peer-full-bilm "$PIPELINE" --lang en
}

run_env() {
  nvidia-smi
  python3 -c "import torch, cupy, spacy, thinc; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'cupy', cupy.__version__, 'spacy', spacy.__version__, 'thinc', thinc.__version__)"
  python3 -m spacy_elmo info --machine
  python3 -c "import torch; print('tf32: matmul', torch.backends.cuda.matmul.allow_tf32, 'cudnn', torch.backends.cudnn.allow_tf32, 'float32_matmul_precision', torch.get_float32_matmul_precision())"
  python3 bench/gpu.py drift
}

run_tests() {
  python3 -m pytest -q -n 0 -rs -p no:cacheprovider tests/test_gpu.py tests/test_parity.py \
    tests/test_precision.py::test_int8_on_cuda_pads_to_the_shapes_cublas_takes \
    tests/test_precision.py::test_int8_results_do_not_depend_on_batch_companions_on_cuda \
    tests/test_embed_ray.py::test_one_actor_per_gpu_writes_what_one_process_on_a_gpu_writes
  python3 -m pytest -q -n 0 -rs -p no:cacheprovider -m "not slow" tests/test_training.py
}

run_spacy_train() {
  [ -d "$PIPELINE" ] || full_size_pipeline || return 1
  python3 -m spacy train spacy_elmo/tasks/configs/upos-elmo.cfg --gpu-id 0 --output "$WORK/upos" \
    --paths.train .gpu/downstream/upos-train-10.spacy --paths.dev .gpu/downstream/upos-dev.spacy \
    --paths.elmo "$PIPELINE" --training.max_steps "${SPACY_TRAIN_STEPS:-300}" --training.eval_frequency 100
}

run_ray() {
  [ -d "$PIPELINE" ] || full_size_pipeline || return 1
  python3 -m pytest -q -n 0 -p no:cacheprovider tests/test_embed_ray.py::test_one_actor_per_gpu_writes_what_one_process_on_a_gpu_writes
  local text=.gpu/shared/data/corpus/valid.txt
  rm -rf "$WORK/embed-gpu" "$WORK/embed-ray"
  local started=$SECONDS
  python3 -m spacy_elmo embed "$text" "$WORK/embed-gpu" -p "$PIPELINE" --gpu-id 0 --block-lines 500 || return 1
  echo "embed --gpu-id 0: $((SECONDS - started)) s"
  started=$SECONDS
  python3 -m spacy_elmo embed "$text" "$WORK/embed-ray" -p "$PIPELINE" --ray --workers 1 --gpus-per-worker 1 \
    --block-lines 500 || return 1
  echo "embed --ray --gpus-per-worker 1: $((SECONDS - started)) s"
  python3 -c "import sys; sys.path.insert(0, 'bench'); from pathlib import Path; from embed import same_outputs; print('same output:', same_outputs([Path('$WORK/embed-gpu'), Path('$WORK/embed-ray')]))"
}

run_profile() {  # run_profile LABEL [PACKAGE_DIR [ARGS...]]: the package on PYTHONPATH ahead of the checkout
  local label=$1 package=${2:-}
  shift $(($# < 2 ? $# : 2))
  PYTHONPATH="$WORK/site:${package:+$package:}$PWD" python3 bench/gpu.py profile "$PEER" --label "$label" \
    --precisions ${PROFILE_PRECISIONS:-fp32 bf16} --workloads ${PROFILE_WORKLOADS:-1 64 1000} "$@" ${PROFILE_ARGS:-}
}

run_serve() {  # the service on the GPU against nlp.pipe on the GPU, under wrk (bench/serve.py --device cuda)
  python3 -c "import sys; sys.path.insert(0, 'bench'); from suite.workloads import converted_weights; from pathlib import Path; converted_weights(Path('$PEER'))" &&
    python3 bench/serve.py --device cuda --models full --engines process --clients ${SERVE_CLIENTS:-1 64} \
      --routes ${SERVE_ROUTES:-/v1/embeddings /embed} --seconds "${SERVE_CELL_SECONDS:-30}" --rounds 1 \
      --warmup "${SERVE_WARMUP_SECONDS:-10}" ||
    { # a replica's traceback is in Ray's logs, not in the driver's output
      tar -czf "$OUT/ray-serve-logs.tgz" -C /tmp/ray/session_latest/logs . 2> /dev/null
      return 1
    }
}

export -f full_size_pipeline run_env run_tests run_spacy_train run_ray run_profile run_serve
export PEER PIPELINE WORK
for name in "$@"; do
  case $name in
    env) stage env 60 run_env ;;
    gpu-tests) stage gpu-tests "${TESTS_SECONDS:-200}" python3 -m pytest -q -n 0 -rs -p no:cacheprovider tests/test_gpu.py \
      ${GPU_TESTS:+-k "$GPU_TESTS"} ;;
    tests) stage tests "${TESTS_SECONDS:-200}" run_tests ;;
    profile) stage profile "${PROFILE_SECONDS:-150}" run_profile "${PROFILE_LABEL:-after}" ;;
    profile-before) stage profile-before "${PROFILE_SECONDS:-150}" run_profile "${PROFILE_LABEL:-before}" "$PWD/.gpu-before" ;;
    profile-small-graphs) stage profile-small-graphs "${PROFILE_SECONDS:-150}" run_profile small-graphs "" --graph-tokens 256 ;;
    serve) stage serve "${SERVE_SECONDS:-420}" run_serve ;;
    component) stage component "${COMPONENT_SECONDS:-200}" python3 bench/gpu.py component "$PEER" ${GPU_WORKLOADS:+--workloads $GPU_WORKLOADS} \
      ${GPU_PRECISIONS:+--precisions $GPU_PRECISIONS} ${GPU_CONFIGURATIONS:+--configurations $GPU_CONFIGURATIONS} \
      ${GPU_REPEATS:+--repeats $GPU_REPEATS} ${GPU_GRAPHS_BEFORE:+--graphs-before} \
      ${GPU_PEER_WORKLOADS:+--peer-workloads $GPU_PEER_WORKLOADS} ${GPU_LABEL:+--label $GPU_LABEL} ;;
    embed-gpu) stage embed-gpu "${EMBED_SECONDS:-150}" python3 bench/embed.py --lines "${EMBED_LINES:-10000}" \
      --peer "$PEER" --gpu-id 0 ;;
    train-speed) stage train-speed "${TRAIN_SPEED_SECONDS:-200}" python3 bench/pretrain.py speed --device cuda \
      --corpus .gpu/corpus/corpus --vocab .gpu/corpus/vocab.txt --steps "${TRAIN_SPEED_STEPS:-20}" \
      ${TRAIN_SPEED_PRESETS:+--presets $TRAIN_SPEED_PRESETS} ${TRAIN_SPEED_VARIANTS:+--variants $TRAIN_SPEED_VARIANTS} ;;
    spacy-train) stage spacy-train "${SPACY_TRAIN_SECONDS:-120}" run_spacy_train ;;
    ray) stage ray "${RAY_SECONDS:-120}" run_ray ;;
    *) echo "unknown stage $name" >&2 ;;
  esac
done
tar -czf "$OUT/results.tgz" bench/results BENCHMARKS.md 2> /dev/null
ls "$OUT"
