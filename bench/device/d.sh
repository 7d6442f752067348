. .gpu/sh/env.sh
nvidia-smi --query-gpu=name,memory.used,clocks.sm,clocks.mem --format=csv
timeout 560 python3 bench/large_target.py --device cuda --tokens 100 --out $OUT/large_target_cuda.json 2>&1 | tee $OUT/bench.log | tail -40
