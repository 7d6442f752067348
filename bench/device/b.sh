cat .gpu/w2/c >> /tmp/g/base.xz; ls -l /tmp/g/base.xz
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/pyd/*.whl 2>&1 | tail -2
