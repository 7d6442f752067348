#!/usr/bin/env bash
# The GPU check in one command (bench/gpu/README.md): unpack .gpu/ (bench/gpu/pack.py), then the gpu
# tests and the three benches, each step under its own time limit, results into $OUT.
#
#   bash bench/gpu/run.sh                  on the lent GPU machine (OUT set by the device tool)
#   bash bench/gpu/run.sh --rehearse       here, on the CPU: the same steps at small shapes and short cuts
#
# Steps (limits in seconds, 600 in all, each then SIGINT and 10 s to stop): setup 60 (the GPU machine's CPU unpacks
# the xz archives in about 25 s), env 15, tests 100, profile 40, features 20, batched 105, longform 170, manycore 90.
# ONLY=step,step runs some of them (setup always runs); LIMIT_<step>=seconds gives a step another limit
# (a bench's own budget follows it); SYSTEMS="hf pipeline,ours" picks the long-form bench's systems.
# Files written to $OUT: run.log (everything), steps.json, gpu_env.json, pytest.xml, gpu_profile.json, gpu_features.json,
# gpu_batched.json, gpu_longform.json, gpu_manycore.json.
set -u
cd "$(dirname "$0")/../.."
MODE=gpu
[ "${1:-}" = "--rehearse" ] && MODE=cpu
OUT=${OUT:-/tmp/gpu-check-out}
WORK=${WORK:-/tmp/g}
PACK=${PACK:-.gpu}
[ "$MODE" = cpu ] && [ -x .venv/bin/python ] && PY=${PY:-.venv/bin/python}  # the rehearsal: make's venv
PY=${PY:-python3}
mkdir -p "$OUT" "$WORK"
LOG="$OUT/run.log"
: > "$LOG"
echo "[" > "$OUT/steps.json"
T0=$(date +%s)

export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export XDG_CACHE_HOME="$WORK/xdg" SPECWHISPER_EVAL_DIR="$WORK/eval" SPECWHISPER_GPU_MODEL="$WORK/tiny.en-q8"
if [ "$MODE" = gpu ]; then
  export PYTHONPATH="$WORK/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
  DEV=(--device cuda); THREADS=$(nproc)
else  # this machine's Python runs the steps: the cp312 packages are unpacked only to check the pack
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  DEV=(--device cpu); THREADS=${THREADS:-1}  # one: a second thread on a shared small CPU only waits
fi

lim() { local v="LIMIT_$1"; echo "${!v:-$2}"; }  # lim STEP DEFAULT: the step's limit

wanted() { [ -z "${ONLY:-}" ] || [[ ",$ONLY," == *",$1,"* ]]; }

step() {  # step NAME LIMIT COMMAND...: run it under its limit, log it, note its exit status and time
  local name=$1 limit=$2 rc start
  shift 2
  wanted "$name" || [ "$name" = setup ] || return 0
  start=$(date +%s)
  echo "=== step $name (limit ${limit} s, at $((start - T0)) s)" | tee -a "$LOG"
  timeout -s INT -k 10 "$limit" "$@" >> "$LOG" 2>&1  # SIGINT: pytest reports, the benches have saved each row
  rc=$?
  local took=$(( $(date +%s) - start ))
  echo "=== step $name: exit $rc after ${took} s$([ $took -ge $limit ] && echo ' (its time limit)')" | tee -a "$LOG"
  echo "{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $took, \"limit\": $limit}," >> "$OUT/steps.json"
  return 0
}

setup() {  # Python's own tar and xz: the machine's image need not have xz
  $PY bench/gpu/pack.py --out "$PACK" --unpack "$WORK" || return 1
  ls "$WORK/site" | tr '\n' ' '; echo; du -sh "$WORK"/* 2>/dev/null
}
export -f setup
export WORK PACK PY
step setup "$(lim setup 60)" bash -c setup

SYSTEMS=${SYSTEMS:-ours,fw batched,hf pipeline,hf assisted}
TESTS=(-m pytest -q -p no:cacheprovider -m gpu tests/test_batched_speculation.py tests/test_auto_draft.py tests/test_gpu.py
       -o addopts="" --junitxml="$OUT/pytest.xml" -rs)
if [ "$MODE" = gpu ]; then
  step env "$(lim env 15)" bash -c "nvidia-smi; $PY bench/gpu/env_check.py | tee $OUT/gpu_env.json"
  step tests "$(lim tests 100)" $PY "${TESTS[@]}"
  step profile "$(lim profile 40)" $PY bench/gpu_profile.py "${DEV[@]}" --batches 1,16 --out "$OUT/gpu_profile.json"
  step features "$(lim features 20)" $PY bench/features.py --device cuda --threads "$THREADS" --out "$OUT/gpu_features.json"
  step batched "$(lim batched 105)" $PY bench/gpu_batched.py "${DEV[@]}" --budget-s $(( $(lim batched 105) - 20 )) \
      --out "$OUT/gpu_batched.json"
  step longform "$(lim longform 170)" $PY bench/gpu_longform.py "${DEV[@]}" --model "$WORK/tiny.en-q8" \
      --systems "$SYSTEMS" --budget-s $(( $(lim longform 170) - 15 )) --out "$OUT/gpu_longform.json"
  step manycore "$(lim manycore 90)" $PY bench/large_target.py --device cpu --threads "$THREADS" --models large-v3 --tokens 30 \
      --acceptances 0.8 --exit-layers 4 --reps 1 --out "$OUT/gpu_manycore.json"  # the H100 run: 63 s reached one decode
else
  step env "$(lim env 15)" bash -c "$PY bench/gpu/env_check.py | tee $OUT/gpu_env.json"
  step tests "$(lim tests 100)" $PY "${TESTS[@]}"
  step profile "$(lim profile 40)" $PY bench/gpu_profile.py "${DEV[@]}" --d-model 64 --batches 1,4 --reps 3 \
      --out "$OUT/gpu_profile.json"
  step features "$(lim features 20)" $PY bench/features.py --device cpu --windows 8 --reps 3 --threads "$THREADS" \
      --out "$OUT/gpu_features.json"
  step batched "$(lim batched 105)" $PY bench/gpu_batched.py "${DEV[@]}" --dtype bfloat16 --d-model 64 --batches 1,4 \
      --acceptances 0.6,0.8 --tokens 10 --threads "$THREADS" --budget-s $(( $(lim batched 105) - 20 )) --out "$OUT/gpu_batched.json"
  step longform "$(lim longform 170)" $PY bench/gpu_longform.py "${DEV[@]}" --model "$WORK/tiny.en-q8" --cut-s 20 \
      --long-minutes 20 --batches 2 --fw-batches 2 --hf-batch 2 --assist-s 10 --systems "$SYSTEMS" \
      --budget-s $(( $(lim longform 170) - 15 )) --out "$OUT/gpu_longform.json"
  step manycore "$(lim manycore 90)" $PY bench/large_target.py --device cpu --threads "$THREADS" --models large-v3 --d-model 64 \
      --tokens 12 --acceptances 0.8 --exit-layers 4 --reps 2 --out "$OUT/gpu_manycore.json"
fi

sed -i '$ s/,$//' "$OUT/steps.json" && echo "]" >> "$OUT/steps.json"
echo "=== done after $(( $(date +%s) - T0 )) s; results in $OUT:" | tee -a "$LOG"
ls -la "$OUT" | tee -a "$LOG"
cat "$OUT/steps.json"
# the tail the device tool shows: each bench's summary
for f in gpu_profile gpu_features gpu_batched gpu_longform gpu_manycore; do
  [ -f "$OUT/$f.json" ] && $PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1], len(d.get('runs', [])), 'rows', d.get('skipped', ''))" "$OUT/$f.json"
done
grep -E "^(  [a-z].*x  WER|  [a-z ]+: encoder ms|  (large-v3|medium) +batch|tests|[0-9]+ (passed|failed)|FAILED|ERROR)" "$LOG" | tail -60
