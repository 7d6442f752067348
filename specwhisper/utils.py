"""openai-whisper's ``whisper.utils`` over this package: ``import specwhisper as whisper`` then
``whisper.utils.get_writer("srt", folder)(result, "audio.mp3")`` (specwhisper.pipeline.openai_whisper)."""

from specwhisper.pipeline.openai_whisper import ResultWriter, get_writer  # noqa: F401
from specwhisper.pipeline.writers import format_timestamp  # noqa: F401
