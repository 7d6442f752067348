"""Web UI: ``python app.py [--host 127.0.0.1] [--port 7860]`` serves the Gradio app over the pipeline core.

Models load once per process (kept by the shared PipelinePool); requests take turns on the page's
model worker, short ones inside long ones' runs (specwhisper.serving.worker).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from specwhisper.pipeline.options import BY_NAME, STAGE_SETTINGS, pipeline_config
from specwhisper.serving.arguments import OneLineParser, add_options, option_values, positive, tcp_port
from specwhisper.serving.params import Choices
from specwhisper.serving.worker import OVERTAKE_S

# the models' options, declared once for every entry point (specwhisper.pipeline.options)
LOAD_OPTIONS = [BY_NAME[name] for name in ("device", "dtype", "threads", "cache_dir", "hf_token", *STAGE_SETTINGS)]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python app.py", description="specwhisper web UI (Gradio)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=tcp_port(any_free=False), default=7860, help="port (default: 7860)")
    p.add_argument("--models", default=",".join(Choices.models), help="models offered, the first is the default (default: %(default)s)")
    p.add_argument("--drafters", default=",".join(Choices.drafters), help="drafters offered, the first is the default (default: %(default)s)")
    p.add_argument("--max-duration", type=positive(float), default=4 * 3600, help="refuse audio longer than this many seconds (default: 14400)")
    p.add_argument("--max-file-mb", type=positive(float), default=200, help="largest upload in MB (default: 200)")
    p.add_argument("--output-dir", type=Path, help="where download files are written (default: a temporary folder)")
    p.add_argument("--live-streams", type=positive(int), default=2, help="live recordings (the Live tab) at once (default: 2)")
    p.add_argument("--overtake-audio", type=positive(float, or_zero=True), default=OVERTAKE_S,
                   help="a file of at most this many seconds, and a live update, runs inside another user's longer run "
                        f"between two of its batches instead of after it (0: never; default: {OVERTAKE_S:g})")
    p.add_argument("--no-preload", action="store_true", help="load the default model on the first request, not at start")
    p.add_argument("--model-ttl", type=positive(float, or_zero=True),
                   help="unload a model nobody used for this many seconds; the next request loads it again (default: keep it)")
    add_options(p, LOAD_OPTIONS)
    return p


def split(value: str) -> tuple[str, ...]:
    return tuple(v.strip() for v in value.split(",") if v.strip())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not split(args.models) or not split(args.drafters):
        print("app: error: --models and --drafters need at least one name each", file=sys.stderr)
        return 2
    if args.output_dir is not None:
        from specwhisper.pipeline.writers import OutputDirError, check_output_dir

        try:
            check_output_dir(args.output_dir)  # before any model loads
        except OutputDirError as exc:
            print(f"app: error: --output-dir: {exc}", file=sys.stderr)
            return 2
    from specwhisper.hardware.device import resolve_device, resolve_dtype

    try:
        resolve_dtype(args.dtype, resolve_device(args.device))
    except ValueError as exc:
        print(f"app: error: {exc}", file=sys.stderr)
        return 2
    from specwhisper.serving.params import parse_params
    from specwhisper.messages import one_line
    from specwhisper.serving.service import LiveLimits, ServiceSettings, PipelinePool
    from specwhisper.serving.ui.app import UiConfig, build_demo, theme

    from specwhisper.asr.weights.loader import ModelError

    try:
        settings = ServiceSettings(
            base=pipeline_config(option_values(args, LOAD_OPTIONS)),
            choices=Choices(models=split(args.models), drafters=split(args.drafters)),
            max_audio_s=args.max_duration,
            max_upload_bytes=int(args.max_file_mb * 2**20),
            live=LiveLimits(max_streams=args.live_streams),
            model_ttl_s=args.model_ttl,
        )
        service = PipelinePool(settings)
        service.check_choices("--models", "--drafters")
        if not args.no_preload:
            service.preload(parse_params({}, settings.choices))
    except (ValueError, OSError, ModelError) as exc:  # a bad limit, a model that does not load (a bad name)
        print(f"app: error: {one_line(exc)}", file=sys.stderr)
        return 2
    output_dir = args.output_dir or Path(tempfile.mkdtemp(prefix="specwhisper-ui-"))
    demo = build_demo(service, UiConfig(output_dir=output_dir, overtake_s=args.overtake_audio))
    demo.queue(default_concurrency_limit=1, max_size=32)
    try:
        demo.launch(server_name=args.host, server_port=args.port, theme=theme(), max_file_size=settings.max_upload_bytes,
                    allowed_paths=[str(output_dir)], footer_links=[], show_error=True)
    except OSError as exc:  # port taken, address not local
        print(f"app: error: {str(exc).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
