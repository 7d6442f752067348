. .gpu/sh/env.sh
python3 - <<'PY'
from pathlib import Path
from tests.random_whisper import write_random_whisper
root = Path("/tmp/rw"); v3 = write_random_whisper(root / "large-v3", "large-v3", d_model=256, max_positions=160)
write_random_whisper(root / "distil-large-v3", "distil-large-v3", d_model=256, max_positions=160, seed=2, encoder_from=v3)
print("written")
PY
A=/tmp/g/eval/openai-whisper/jfk.flac
for d in none /tmp/rw/distil-large-v3 ngram; do
  n=$(basename $d); /usr/bin/time -f "$n wall %e s" python3 -c "import sys; from specwhisper.serving.cli.main import main; sys.exit(main())" $A -m /tmp/rw/large-v3 --draft $d --device cuda -l en --temperature-increment-on-fallback 0 -f json -o /tmp/cli_$n 2>&1 | grep -v -i warn | tail -3
done
python3 - <<'PY'
import json, glob
outs = {p.split("/")[2]: json.load(open(glob.glob(p + "/*.json")[0])) for p in glob.glob("/tmp/cli_*")}
toks = {k: [s["tokens"] for s in v["segments"]] for k, v in outs.items()}
print({k: sum(map(len, t)) for k, t in toks.items()}, "identical:", len({json.dumps(t) for t in toks.values()}) == 1)
PY
python3 -c "import sys; from specwhisper.serving.cli.main import main; sys.exit(main())" $A --device cuda --dtype float16 -f txt -o /tmp/cli_base 2>&1 | grep -v -i warn | tail -2; cat /tmp/cli_base/*.txt
