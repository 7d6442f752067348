. .gpu/sh/env.sh
timeout 400 python3 bench/speculative.py --no-external --files 6 --drafters ngram,early-exit:2,early-exit:3,early-exit:4 --out $OUT/speculative_cuda.json 2>&1 | grep -v -i warn | tail -12
