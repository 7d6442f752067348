"""A stand-in for PyAV, for faster-whisper handed arrays: it imports ``av`` at start-up but reads files
with it only when given a path. PyAV's wheel (36 MB) does not fit what one GPU run takes along
(bench/gpu/README.md); bench/gpu_longform.py puts this folder on faster-whisper's path alone."""


def open(*args, **kwargs):  # noqa: A001  (PyAV's name)
    raise RuntimeError("PyAV is not installed here: give faster-whisper an array, not a path")
