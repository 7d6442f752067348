"""The Gradio web UI over the shared transcription service (``app.py`` launches it).

Upload or record audio, pick the options, watch each stage's progress, then see who speaks when
(a lane per speaker, overlaps visible) above a speaker-coloured transcript table, click a row to
play the audio from there (with subtitles), download every format and see the speed facts (RTF,
speculative acceptance, tokens per target pass). The "Live" tab
(``ui_live.py``) transcribes the microphone as it records.
"""

from __future__ import annotations

import base64
import contextvars
import html
import logging
import math
import queue
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd

from specwhisper.asr.options import SAMPLING
from specwhisper.audio.loading import AudioError, check_length
from specwhisper.pipeline.core import BETWEEN_BATCHES
from specwhisper.results.transcript import Transcript
from specwhisper.pipeline.option import Option
from specwhisper.pipeline.options import BY_NAME, options_for
from specwhisper.serving.params import Choices, RequestError, parse_params
from specwhisper.messages import one_line
from specwhisper.serving.service import PipelinePool
from specwhisper.serving.ui.live import build_live_tab
from specwhisper.serving.worker import OVERTAKE_S, Cancelled, CancelToken, ModelWorker, QueueFull
from specwhisper.pipeline.writers import formats_of_all, write_outputs

log = logging.getLogger(__name__)
COLUMNS = ["Start", "End", "Speaker", "Text"]
SPEAKER_COLOURS = ["#dbeafe", "#fde68a", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc", "#e5e7eb"]
LANE_COLOURS = ["#3b82f6", "#f59e0b", "#22c55e", "#ec4899", "#8b5cf6", "#f97316", "#06b6d4", "#6b7280"]  # the same hues, strong
STAGE_LABELS = {"loading models": "Loading models", "vad": "Finding speech (VAD)", "transcribe": "Transcribing",
                "postedit": "Post-editing"}
# System fonts only: the default theme pulls web fonts, and a deployment may be offline.
FONTS = ["ui-sans-serif", "system-ui", "sans-serif"]
MONO_FONTS = ["ui-monospace", "monospace"]


def clock(seconds: float) -> str:
    """1:02.3 (m:ss.s), or 1:02:03.4 past an hour."""
    tenths = int(round(max(0.0, seconds) * 10))
    h, rest = divmod(tenths, 36000)
    m, rest = divmod(rest, 600)
    s = f"{rest // 10:02d}.{rest % 10}"
    return f"{h}:{m:02d}:{s}" if h else f"{m}:{s}"


def transcript_table(t: Transcript) -> pd.io.formats.style.Styler:
    """One row per segment; rows tinted by speaker."""
    rows = [[clock(s.start), clock(s.end), (s.speaker or "") + (" (overlap)" if s.overlap else ""), s.text.strip()]
            for s in t.segments]
    frame = pd.DataFrame(rows, columns=COLUMNS)
    colour = {spk: SPEAKER_COLOURS[i % len(SPEAKER_COLOURS)] for i, spk in enumerate(t.speakers)}
    speakers = [s.speaker for s in t.segments]

    def tint(row: pd.Series) -> list[str]:
        c = colour.get(speakers[row.name])
        return [f"background-color: {c}" if c else ""] * len(row)

    return frame.style.apply(tint, axis=1)


def _tick_step(duration: float) -> float:
    """A round time step giving 4 to 10 ticks over ``duration`` seconds."""
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200):
        if duration / step <= 10:
            return step
    return 3600 * max(1, round(duration / 36000))


def speaker_timeline(t: Transcript) -> str:
    """Who speaks when: an SVG lane per speaker with the diarizer's turns (``transcript.turns``), in the
    table's colours, and the stretches where two or more speak at once marked across the lanes. ''
    for a transcript without diarization."""
    if not t.turns or not t.duration:
        return ""
    speakers = t.speakers
    left, width, lane, gap, axis = 90, 640, 18, 5, 20  # drawn about this wide: text at its size
    plot = width - left - 10
    height = len(speakers) * (lane + gap) + axis

    def x(seconds: float) -> float:
        return left + plot * min(max(seconds, 0.0), t.duration) / t.duration

    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" role="img" aria-label="speaker timeline" '
             f'xmlns="http://www.w3.org/2000/svg" style="font: 11px sans-serif">']
    # overlap: any moment covered by turns of two speakers (a sweep over the turns' ends)
    events = sorted([(u.start, 1) for u in t.turns] + [(u.end, -1) for u in t.turns])
    active, since = 0, 0.0
    for at, step in events:
        if active >= 2 and at > since:
            parts.append(f'<rect class="overlap" x="{x(since):.1f}" y="0" width="{max(x(at) - x(since), 1):.1f}" '
                         f'height="{height - axis}" fill="#ef4444" fill-opacity="0.18"><title>overlap '
                         f'{clock(since)}–{clock(at)}</title></rect>')
        active += step
        since = at
    for k, spk in enumerate(speakers):
        y = k * (lane + gap)
        colour = LANE_COLOURS[k % len(LANE_COLOURS)]
        name = html.escape(spk)
        parts.append(f'<g class="lane" data-speaker="{name}"><text x="0" y="{y + lane * 0.7:.1f}">{name}</text>'
                     f'<rect x="{left}" y="{y}" width="{plot}" height="{lane}" fill="#f3f4f6"/>')
        for u in (u for u in t.turns if u.speaker == spk):
            parts.append(f'<rect class="turn" data-start="{u.start:.3f}" data-end="{u.end:.3f}" x="{x(u.start):.1f}" '
                         f'y="{y}" width="{max(x(u.end) - x(u.start), 1):.1f}" height="{lane}" fill="{colour}">'
                         f'<title>{name} {clock(u.start)}–{clock(u.end)}</title></rect>')
        parts.append("</g>")
    step = _tick_step(t.duration)
    base = height - axis
    ticks = [i * step for i in range(int(t.duration // step) + 1)]
    parts += [f'<line x1="{x(s):.1f}" y1="{base}" x2="{x(s):.1f}" y2="{base + 4}" stroke="#6b7280"/>'
              f'<text x="{x(s):.1f}" y="{base + 16}" text-anchor="middle" fill="#6b7280">{clock(s)[:-2]}</text>' for s in ticks]
    parts.append("</svg>")
    return f'<div class="speaker-timeline"><div style="font-size: 12px; opacity: 0.7">Who speaks when</div>{"".join(parts)}</div>'


def row_start(starts: list[float], event: gr.SelectData) -> float | None:
    """The start (seconds) of the table row a click selected."""
    row = event.index[0] if isinstance(event.index, (list, tuple)) else event.index
    return starts[row] if starts and row is not None and 0 <= row < len(starts) else None


# The player plays from a time: the <audio> element of the 'player' component (inside the shadow root
# of its waveform, where gradio 6 keeps it) seeks there; the waveform follows its media element.
SEEK_JS = """(t) => {
  const find = (root) => {
    const a = root.querySelector('audio');
    if (a) return a;
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) { const f = find(el.shadowRoot); if (f) return f; }
    return null;
  };
  const player = document.getElementById('player');
  const audio = player && find(player);
  if (audio && t !== null && t !== undefined) { audio.currentTime = t; audio.play().catch(() => {}); }
  return t;
}"""


def speed_facts(t: Transcript) -> str:
    """Markdown table of what the run cost and how the speculative decoder did."""
    s, tm, m = t.stats, t.timings, t.model
    stages = ", ".join(f"{k} {tm[k]:.2f} s" for k in ("load_audio", "vad", "encoder", "decoder", "diarization", "postedit") if k in tm)
    acceptance = f"{s.acceptance_rate:.0%} ({s.accepted_tokens}/{s.drafted_tokens} drafted tokens)" if s.drafted else "no drafter"
    per_pass = f"{s.tokens_per_target_pass:.2f}" if s.drafted else "no drafter (plain decoding: one token per pass)"
    rows = [
        ("Audio", f"{t.duration:.1f} s, language {t.language or '?'}"),
        ("Processing", f"{tm.get('total', 0):.2f} s, **RTF {tm.get('rtf', 0):.3f}**"),
        ("Model", f"{m.get('asr')} with drafter {m.get('draft')} ({m.get('decoder')})"),
        ("Speculative acceptance", acceptance),
        ("Tokens per target pass", per_pass),
        ("Stages", stages),
    ]
    aligned = m.get("aligned_text")
    if isinstance(aligned, dict):
        rows.append(("Text aligned", f"{aligned['text_words']} words, {aligned['matched_words']} of them heard the same "
                                     "by the transcription"))
    pe = m.get("postedit")
    if isinstance(pe, dict):
        rows.append(("Post-edit", f"{pe.get('accepted', 0)} of {pe.get('accepted', 0) + pe.get('rejected', 0)} turns changed; "
                                  f"drafter {pe.get('drafter')}: acceptance {pe.get('acceptance_rate', 0):.0%}, "
                                  f"{pe.get('tokens_per_target_pass', 0):.2f} tokens per pass"))
    return "| Speed | |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in rows)


class StageProgress:
    """Feeds the pipeline's ``progress(stage, fraction)`` to a ``gr.Progress`` bar, at most ~10 updates/s."""

    def __init__(self, bar: gr.Progress, min_interval_s: float = 0.1):
        self.bar = bar
        self.min_interval_s = min_interval_s
        self.stage: str | None = None
        self.last = 0.0

    def __call__(self, stage: str, fraction: float) -> None:
        if stage == SAMPLING:  # inside a batch: nothing new to show
            return
        now = time.monotonic()
        if stage == self.stage and fraction < 1.0 and now - self.last < self.min_interval_s:
            return
        self.stage, self.last = stage, now
        label = STAGE_LABELS.get(stage) or stage.replace("diarization: ", "Speakers: ").replace("_", " ")
        self.bar(min(max(fraction, 0.0), 1.0), desc=label)


@dataclass
class UiConfig:
    output_dir: Path  # download files go to a fresh folder under it per request
    keep_outputs_s: float = 3600.0  # request folders older than this are removed
    # a file of at most this much audio, and a live update, runs inside a longer file's pass between two of
    # its batches rather than after it (specwhisper.serving.worker; 0: it waits for the pass)
    overtake_s: float = OVERTAKE_S
    files_at_once: int = 8  # file runs that wait on the model worker; more wait in Gradio's queue


def prune(root: Path, max_age_s: float) -> None:
    cutoff = time.time() - max_age_s
    for d in root.glob("*"):
        if d.is_dir() and d.stat().st_mtime < cutoff:
            shutil.rmtree(d, ignore_errors=True)


def fresh_output_dir(ui: UiConfig) -> Path:
    """A new folder for one request's download files (old ones pruned first)."""
    prune(ui.output_dir, ui.keep_outputs_s)
    return ui.output_dir / uuid.uuid4().hex


def user_error(exc: BaseException) -> gr.Error:
    return gr.Error(one_line(exc), duration=None, print_exception=False)


# a yes-or-no option whose default follows others (word timestamps: on with speakers): its control's values
TRI_STATE = {"default": None, "on": True, "off": False}


def request_values(names: list[str], values: tuple) -> dict:
    """The form's values as request parameters: empty text and numbers, 'auto' language and 0
    speakers mean the option's default; the known speakers' uploaded clips are sent as data URLs, each
    named after its file (``ann.wav``: ann)."""
    out = {}
    for name, value in zip(names, values):
        if value is None or value == [] or (isinstance(value, str) and not value.strip()):
            continue
        if (name == "language" and value == "auto") or (name == "num_speakers" and not value):
            continue
        if (option := BY_NAME.get(name)) is not None and option.kind is bool and option.default is None:  # three states
            value = TRI_STATE[value]
            if value is None:
                continue
        out[name] = known_speaker_clips(value) if name == "known_speakers" else value
    return out


MAX_CLIP_BYTES = 16 << 20  # a known speaker's clip (2 to 30 s of audio)


def known_speaker_clips(paths: list[str]) -> dict[str, str]:
    """Uploaded reference clips -> {name: data URL}, each named after its file."""
    clips = {}
    for path in map(Path, paths):
        if path.stat().st_size > MAX_CLIP_BYTES:
            raise ValueError(f"known speakers: {path.name} is over {MAX_CLIP_BYTES >> 20} MB (give 2 to 30 s of one voice)")
        clips[path.stem] = "data:application/octet-stream;base64," + base64.b64encode(path.read_bytes()).decode()
    return clips


def make_transcribe(service: PipelinePool, ui: UiConfig, names: list[str], worker: ModelWorker):
    """The click handler: the audio and the option controls (``names``, in order) in; speaker timeline,
    table, its rows' start times, player, downloads and speed facts out. The table fills as the
    transcript's segments become final (speakers come with the whole), then everything comes. The
    transcription runs on the page's model worker: a short file runs inside a long one's pass, between
    two of its batches; a page that goes away stops its run at the next progress report."""

    def transcribe(audio_path, *values, progress=gr.Progress()):
        if not audio_path:
            raise gr.Error("Upload an audio file or record from the microphone first.", print_exception=False)
        name = Path(audio_path).name
        bar = StageProgress(progress)
        try:
            params = parse_params(request_values(names, values), service.settings.choices)
        except (RequestError, ValueError, OSError) as exc:
            raise _refused(name, exc) from None
        try:
            seconds = check_length(audio_path, service.settings.max_audio_s, name)
        except AudioError as exc:
            raise _refused(name, exc) from None
        bar("waiting for the model" if worker.busy else "loading audio", 0.0)
        finals: queue.Queue[list | None] = queue.Queue()
        outcome: dict[str, object] = {}

        def work(token: CancelToken) -> None:  # on the model worker, in this event's context (gr.Progress reads it)
            def report(stage: str, fraction: float) -> None:
                bar(stage, fraction)
                token.check(stage in BETWEEN_BATCHES)  # short files run here; a page gone stops the run

            try:
                outcome["transcript"] = service.transcribe_input(audio_path, name, params, report, on_segments=finals.put)
            except BaseException as exc:  # noqa: BLE001 - raised below, on the handler's thread
                outcome["error"] = exc
            finally:
                finals.put(None)

        context = contextvars.copy_context()
        try:
            future, token = worker.submit(lambda token: context.run(work, token), math.inf if seconds is None else seconds,
                                          service.pipeline_key(params))
        except QueueFull as exc:
            raise gr.Error(f"the server is busy ({exc}); try again later", print_exception=False) from None
        shown: list = []
        try:
            while (segments := finals.get()) is not None:
                shown += segments
                partial = Transcript(segments=shown, language=None, duration=0.0)
                yield gr.skip(), transcript_table(partial), [s.start for s in shown], gr.skip(), gr.skip(), gr.skip()
        finally:
            if not future.done():  # the page went away (Gradio closed this generator)
                token.cancel()
                future.cancel()
        if isinstance(outcome.get("error"), Cancelled):
            return
        if "error" in outcome:
            exc = outcome["error"]
            if isinstance(exc, (RequestError, ValueError)):  # AudioError is a ValueError: bad upload, bad option
                raise _refused(name, exc) from None
            log.error("transcription failed", exc_info=exc)
            raise gr.Error(f"internal error: {one_line(exc)}", duration=None, print_exception=False) from None
        transcript = outcome["transcript"]
        files = write_outputs(transcript, fresh_output_dir(ui), Path(name).stem, formats_of_all(transcript), params.layout())
        vtt = next(p for p in files if p.suffix == ".vtt")
        player = gr.Audio(value=audio_path, subtitles=str(vtt) if transcript.segments else None)
        timeline = speaker_timeline(transcript)
        yield (gr.HTML(timeline, visible=bool(timeline)), transcript_table(transcript), [s.start for s in transcript.segments],
               player, [str(p) for p in files], speed_facts(transcript))

    return transcribe


def _refused(name: str, exc: BaseException) -> gr.Error:
    log.warning("refused %s: %s", name, one_line(exc))  # the toast's message, in the server's log too
    return user_error(exc)


def language_choices() -> list[tuple[str, str]]:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    return [("Detect", "auto")] + sorted((f"{name.title()} ({code})", code) for code, name in LANGUAGES.items())


# The controls shown first; every other option the UI takes goes under "More options".
MAIN_CONTROLS = ("model", "draft", "language", "task", "diarize", "num_speakers", "postedit")
LABELS = {"known_speakers": "Known speakers: a clip of each voice, 2 to 30 s, named after them (ann.wav)",
          "draft": "Speculative drafter", "diarize": "Speakers (diarization)", "num_speakers": "Number of speakers (0 = detect)",
          "postedit": "Post-edit casing and punctuation with an LLM",
          "align_text": "Text to align: the words spoken, if you have them (a script, lyrics, a reading)"}


def control(option: Option, choices: Choices) -> gr.components.Component:
    """The option's control, from its declaration (``specwhisper.pipeline.options``)."""
    label = LABELS.get(option.name) or option.name.replace("_", " ").capitalize()
    elem_id = f"opt-{option.name.replace('_', '-')}"
    if option.name in ("model", "draft"):
        offered = list(choices.models if option.name == "model" else choices.drafters)
        info = "none = off; auto = the fastest exact option measured; output is identical either way" if option.name == "draft" else None
        return gr.Dropdown(offered, value=offered[0], label=label, info=info, elem_id=elem_id)
    if option.name == "language":
        return gr.Dropdown(language_choices(), value="auto", label="Language", elem_id=elem_id)
    if option.name == "num_speakers":
        return gr.Slider(0, option.high, value=0, step=1, label=label, elem_id=elem_id)  # 0: the diarizer finds it
    if option.name == "known_speakers":
        return gr.File(file_count="multiple", file_types=["audio"], type="filepath", label=label, elem_id=elem_id)
    if option.name == "align_text":  # a script: many lines, kept as pasted (sentences and lines are its segments)
        return gr.Textbox("", label=label, info="the transcript is this text, word for word, each word timed; a row "
                          "per sentence or line", lines=4, max_lines=12, placeholder="leave empty to transcribe",
                          elem_id=elem_id)
    if option.kind is bool and option.default is None:  # its default follows other options: three states
        return gr.Radio(list(TRI_STATE), value="default", label=label, info=option.help, elem_id=elem_id)
    if option.kind is bool:
        return gr.Checkbox(bool(option.default), label=label, info=None if option.name in LABELS else option.help,
                           elem_id=elem_id)
    if option.choices:
        return gr.Radio(list(option.choices), value=option.default, label=label, elem_id=elem_id)
    if option.kind in (int, float) and option.default is None:
        # a text field, empty for the default: an empty gr.Number shows 0 once its accordion opens, and its
        # minimum then refuses the run in the page ("Value 0 is less than minimum value 1")
        return gr.Textbox("", label=label, info=option.describe(), placeholder="default", elem_id=elem_id)
    if option.kind in (int, float):
        return gr.Number(option.default, label=label, info=option.describe(), precision=0 if option.kind is int else None,
                         minimum=option.low, maximum=option.high, elem_id=elem_id)
    return gr.Textbox(option.default or "", label=label, info=option.help, elem_id=elem_id)


def build_demo(service: PipelinePool, ui: UiConfig) -> gr.Blocks:
    choices = service.settings.choices
    ui.output_dir.mkdir(parents=True, exist_ok=True)
    offered = [o for o in options_for("ui") if o.scope != "output"]
    main = [o for o in offered if o.name in MAIN_CONTROLS]
    more = [o for o in offered if o.name not in MAIN_CONTROLS]
    # the page's one model worker: file runs and live updates take turns on it (short ones inside long passes)
    worker = ModelWorker(max_waiting=ui.files_at_once + 2 * service.settings.live.max_streams, name="ui-model-worker",
                         overtake_s=ui.overtake_s)
    with gr.Blocks(title="specwhisper", analytics_enabled=False, delete_cache=(3600, 3600)) as demo:
        gr.Markdown("## specwhisper\nWhisper with exact speculative decoding, speaker diarization and an optional LLM post-edit.")
        with gr.Tab("File", id="file"):
            with gr.Row():
                with gr.Column(scale=1):
                    audio = gr.Audio(sources=["upload", "microphone"], type="filepath", label="Audio: upload a file or record",
                                     elem_id="audio-input")
                    controls = [control(o, choices) for o in main]
                    with gr.Accordion("More options", open=False, elem_id="more-options"):
                        controls += [control(o, choices) for o in more]
                    run = gr.Button("Transcribe", variant="primary", elem_id="run")
                with gr.Column(scale=2):
                    timeline = gr.HTML("", visible=False, elem_id="timeline")
                    starts = gr.State([])
                    seek = gr.Number(visible=False, elem_id="seek")
                    table = gr.Dataframe(headers=COLUMNS, label="Transcript", interactive=False, wrap=True, elem_id="transcript",
                                         column_widths=["9%", "9%", "14%", "68%"])
                    player = gr.Audio(label="Player", interactive=False, type="filepath", elem_id="player")
                    files = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id="downloads")
                    facts = gr.Markdown(elem_id="facts")
            names = [o.name for o in main + more]
            run.click(make_transcribe(service, ui, names, worker), [audio, *controls], [timeline, table, starts, player, files, facts],
                      concurrency_limit=ui.files_at_once, concurrency_id="model", show_progress_on=[player])
            # a click on a row plays from its start: the start comes from the server, the seek runs in the page
            table.select(row_start, [starts], [seek], concurrency_limit=None, show_progress="hidden").then(
                None, [seek], None, js=SEEK_JS)
        with gr.Tab("Live", id="live", elem_id="live-tab", render_children=True):
            build_live_tab(service, language_choices(), lambda: fresh_output_dir(ui), worker)
    demo.option_names = names  # what the form sends (tests/test_options.py checks it against the schema)
    return demo


def theme() -> gr.themes.Base:
    return gr.themes.Default(font=FONTS, font_mono=MONO_FONTS)
