#!/usr/bin/env bash
# GPU-vs-CPU judge decisions. Run on the GPU machine from the checkout root:
#   bash tests/bench/gpu_decisions.sh
# Unpacks the trained EVOUNA-TQ judge (.gpu/judge_packed: fp16 layers, int8 word embeddings)
# to a float32 folder, scores EVOUNA-TQ's 9,690 rows on CUDA (bfloat16) and compares its
# decisions at the checkpoint's threshold with the CPU float32 scores computed from the very
# same unpacked weights (.gpu/judge_packed/cpu_scores.npy). Needs python3 with torch (CUDA),
# transformers, safetensors, numpy; not apache-beam. Writes "${OUT:-/tmp/out}/decisions/gpu_decisions.json".
# Exit status: bench_gpu decisions' (0: >= 99.5% of decisions equal, or no CUDA; 1: fewer).
# Overrides: PY (python3), JUDGE_DIR (/tmp/judge), EVOUNA (.gpu/data/evouna/TQ.json).
# Prepared beforehand on a CPU machine (about 15 + 2 minutes on 2 cores), into the git-ignored .gpu/,
# from EVOUNA-TQ in the data cache:
#   .venv/bin/python -m pipelines.fetch_data fetch evouna-tq
#   TQ=$(.venv/bin/python -m pipelines.fetch_data dir)/judgments/evouna/TQ.json
#   .venv/bin/python -m pipelines.train_cross_encoder --format evouna \
#       --input "$TQ" --output /tmp/judge --epochs 1
#   .venv/bin/python -m tests.bench.pack_checkpoint pack /tmp/judge .gpu/judge_packed embeddings
#   .venv/bin/python -m tests.bench.pack_checkpoint unpack .gpu/judge_packed /tmp/judge_unpacked
#   .venv/bin/python -m tests.bench.bench_gpu cpu_scores --judge /tmp/judge_unpacked \
#       --evouna "$TQ" --out .gpu/judge_packed/cpu_scores.npy
#   sha256sum "$TQ" | cut -d' ' -f1 > .gpu/judge_packed/TQ.json.sha256
# (and .gpu/data/evouna/TQ.json, a copy of the EVOUNA-TQ file). The device call carries
# [".gpu/judge_packed", ".gpu/data"] (38 MB; no Beam needed), 26 s on an H200.
set -uo pipefail
export PYTHONPATH=$PWD HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
PY=${PY:-python3}
JUDGE_DIR=${JUDGE_DIR:-/tmp/judge}
EVOUNA=${EVOUNA:-.gpu/data/evouna/TQ.json}
RES="${OUT:-/tmp/out}/decisions"
mkdir -p "$RES"
t0=$(date +%s)
if [ -f .gpu/judge_packed/TQ.json.sha256 ] && command -v sha256sum >/dev/null; then
  want=$(cat .gpu/judge_packed/TQ.json.sha256); got=$(sha256sum "$EVOUNA" | cut -d' ' -f1)
  [ "$want" = "$got" ] || echo "WARNING: $EVOUNA differs from the TQ.json the CPU scores came from"
fi
rm -rf "$JUDGE_DIR"
$PY -m tests.bench.pack_checkpoint unpack .gpu/judge_packed "$JUDGE_DIR" || { echo "unpack failed"; exit 2; }
echo "unpacked at $(( $(date +%s) - t0 )) s"
$PY -m tests.bench.bench_gpu decisions --judge "$JUDGE_DIR" \
    --cpu_scores .gpu/judge_packed/cpu_scores.npy --evouna "$EVOUNA" --out "$RES"
rc=$?
echo "decisions rc=$rc at $(( $(date +%s) - t0 )) s"
[ -f "$RES/gpu_decisions.json" ] && { echo "== $RES/gpu_decisions.json"; cat "$RES/gpu_decisions.json"; echo; }
exit $rc
