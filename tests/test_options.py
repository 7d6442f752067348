"""One options schema (specwhisper/pipeline/options.py) drives every entry point: each option is reachable
from every entry point its declaration names (and from no other without a stated reason), bad values get
the same one-line message from each, and docs/cli.md is the parser's own reference."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from specwhisper.asr.options import WINDOW_TOKENS
from specwhisper.audio.loading import DEFAULT_MAX_SECONDS
from specwhisper.pipeline.api import Transcriber, load
from specwhisper.pipeline.option import ENTRY_POINTS
from specwhisper.pipeline.options import OPTIONS, options_for, pipeline_config
from specwhisper.serving.cli.args import build_parser
from specwhisper.serving.params import Choices, RequestError, TranscribeParams, parse_params

ROOT = Path(__file__).resolve().parents[1]
# the command's own arguments, not transcription options: inputs, outputs, live playback, batch folders
CLI_OWN = {"help", "version", "inputs", "output_dir", "live", "live_chunk", "detect_language", "quiet", "verbose", "recursive", "glob", "retry_failed",
           "summary", "group_files", "engine", "ray_address", "workers", "watch"}
HTTP_OWN = {"return_timestamps", "formats"}  # shape the answer (declared with scope "output")


def _cli_dests() -> set[str]:
    return {a.dest for a in build_parser()._actions if a.help != "==SUPPRESS=="}


def test_every_option_not_taken_somewhere_says_why():
    for o in OPTIONS:
        assert set(o.entry_points) | set(o.not_in) == set(ENTRY_POINTS)
        assert all(len(why) > 20 for why in o.not_in.values()), o.name


def test_the_cli_takes_exactly_its_options():
    dests = _cli_dests()
    assert {o.name for o in options_for("cli")} <= dests
    assert dests - CLI_OWN == {o.name for o in options_for("cli")}


def test_the_http_model_takes_exactly_its_options():
    assert set(TranscribeParams.model_fields) == {o.name for o in options_for("http")}


def test_the_python_api_takes_exactly_its_options():
    run = set(inspect.signature(Transcriber.transcribe).parameters) - {"self", "audio", "sample_rate", "progress"}
    loaded = set(inspect.signature(load).parameters)
    assert run | loaded == {o.name for o in options_for("api")}
    assert run == {o.name for o in options_for("api", "run")}
    for name in ("beam_size", "chunk_length", "patience", "hotwords"):  # and its docstring lists them
        assert f"    {name} (" in Transcriber.transcribe.__doc__


def test_the_web_ui_builds_a_control_per_option(tmp_path):
    from specwhisper.pipeline.config import PipelineConfig
    from specwhisper.serving.service import PipelinePool, ServiceSettings
    from specwhisper.serving.ui.app import UiConfig, build_demo

    pool = PipelinePool(ServiceSettings(base=PipelineConfig(), choices=Choices(models=("tiny.en",), drafters=("none",))))
    demo = build_demo(pool, UiConfig(output_dir=tmp_path))
    assert sorted(demo.option_names) == sorted(o.name for o in options_for("ui") if o.scope != "output")


def test_the_web_ui_asks_for_words_with_speakers_unless_told_not_to():
    """Word timestamps default to on with diarization (the words are where speaker turns cut segments); the
    page's control has that default too: its untouched form with diarize ticked asks for words."""
    from specwhisper.serving.params import parse_params
    from specwhisper.serving.ui.app import control, request_values

    choices = Choices(models=("tiny.en",), drafters=("none",))
    controls = {o.name: control(o, choices) for o in options_for("ui") if o.scope != "output"}

    def words(**set_on_the_page) -> bool:
        values = tuple(set_on_the_page.get(name, c.value) for name, c in controls.items())
        return parse_params(request_values(list(controls), values), choices).run_options(3600.0).decode.word_timestamps

    assert words(diarize=True) is True and words() is False
    assert words(diarize=True, word_timestamps="off") is False and words(word_timestamps="on") is True


def test_a_deployment_chooses_the_diarizer_and_the_post_edit():
    """The server's SPECWHISPER_* variables and app.py's flags set the models of the stages after the ASR, as
    docs/cli.md says they do (a value they refuse is one line naming the variable or the flag)."""
    import app
    from specwhisper.serving.arguments import option_values
    from specwhisper.serving.endpoint.contract import settings_from_env

    env = {"SPECWHISPER_DIARIZATION_MODEL": "/models/pyannote-3.1", "SPECWHISPER_POSTEDIT_MODEL": "HuggingFaceTB/SmolLM2-360M-Instruct",
           "SPECWHISPER_POSTEDIT_DRAFTER": "layers:4", "SPECWHISPER_POSTEDIT_MAX_CHANGE": "0.5"}
    base = settings_from_env(env).base
    assert (base.diarization_model, base.postedit_model, base.postedit_drafter, base.postedit_max_change) == (
        "/models/pyannote-3.1", "HuggingFaceTB/SmolLM2-360M-Instruct", "layers:4", 0.5)
    assert settings_from_env({}).base.postedit_drafter == "copy"
    with pytest.raises(ValueError) as info:
        settings_from_env({"SPECWHISPER_POSTEDIT_MAX_CHANGE": "most"})
    assert str(info.value) == "SPECWHISPER_POSTEDIT_MAX_CHANGE: must be a number, got 'most'"

    args = app.build_parser().parse_args(["--diarization-model", "/models/pyannote-3.1", "--postedit-drafter", "none",
                                          "--postedit-max-change", "0.2", "--hf-token", "hf_x"])
    loaded = pipeline_config(option_values(args, app.LOAD_OPTIONS))
    assert (loaded.diarization_model, loaded.postedit_drafter, loaded.postedit_max_change, loaded.hf_token) == (
        "/models/pyannote-3.1", "none", 0.2, "hf_x")


BAD = [  # (option, value, the message every entry point gives; written out, not computed)
    ("beam_size", "0", "must be between 1 and 16, got 0"),
    ("vad_threshold", "1", "must be between 0 and 1, exclusive, got 1"),
    ("task", "dictate", "must be one of transcribe, translate, got 'dictate'"),
    ("batch_size", "many", "must be a whole number, got 'many'"),
    ("no_speech_threshold", "1.5", "must be between 0 and 1, got 1.5"),
    ("chunk_length", "45", "must be between 1 and 30, got 45"),
    ("known_speakers", "ann=a.wav,ann=b.wav", "'ann' is named twice"),
    ("known_speakers", "SPEAKER_01=a.wav", "'SPEAKER_01' is how an unnamed speaker is labelled: choose another name"),
]


@pytest.mark.parametrize("name,value,message", BAD)
def test_a_bad_value_gets_one_message_everywhere(name, value, message, capsys):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["a.wav", flag, value])
    err = capsys.readouterr().err.strip()
    assert err == f"transcribe: error: argument {flag}: {message} (see --help)"
    with pytest.raises(RequestError) as http:
        parse_params({name: value}, Choices())
    assert str(http.value) == f"parameters.{name}: {message}"
    with pytest.raises(ValueError) as api:
        Transcriber(pipeline=None).options(**{name: value})
    assert str(api.value) == f"{name}: {message}"


def test_the_api_refuses_an_unknown_or_misplaced_option():
    with pytest.raises(ValueError, match="unknown option 'beam'"):
        Transcriber(pipeline=None).options(beam=5)
    with pytest.raises(ValueError, match=r"model is chosen when the models load: specwhisper.load\(model=...\)"):
        Transcriber(pipeline=None).options(model="tiny.en")
    with pytest.raises(ValueError, match=r"beam_size is an option of each transcription"):
        load(beam_size=5)


def test_the_peers_spellings_reach_the_same_options():
    args = build_parser().parse_args(["a.wav", "--beam_size", "5", "--word_timestamps", "True", "--vad_onset", "0.3",
                                      "--output_format", "srt", "--chunk_size", "20", "--model_dir", "/tmp/m"])
    assert (args.beam_size, args.word_timestamps, args.vad_threshold, args.formats, args.chunk_length) == (5, True, 0.3, "srt", 20.0)
    assert str(args.cache_dir) == "/tmp/m"
    assert build_parser().parse_args(["a.wav", "--speaker_embeddings"]).speaker_embeddings is True  # WhisperX's switch
    p = parse_params({"chunk_length_s": 20, "generate_kwargs": {"num_beams": 4, "condition_on_prev_tokens": True}}, Choices())
    assert (p.chunk_length, p.beam_size, p.condition_on_previous_text) == (20.0, 4, True)


def test_defaults_agree_with_the_audio_loader():
    assert next(o for o in OPTIONS if o.name == "max_duration").default == DEFAULT_MAX_SECONDS
    assert next(o for o in OPTIONS if o.name == "no_repeat_ngram_size").high == WINDOW_TOKENS


def test_the_cli_reference_is_generated_from_the_parser():
    current = (ROOT / "docs" / "cli.md").read_text()
    fresh = subprocess.run([sys.executable, "-m", "specwhisper.serving.cli.reference"], capture_output=True, text=True,
                           cwd=ROOT, check=True).stdout
    assert current == fresh, "docs/cli.md is stale: python -m specwhisper.serving.cli.reference > docs/cli.md"
    for action in build_parser()._actions:
        if action.help != "==SUPPRESS==":
            for flag in action.option_strings:
                assert f"`{flag}`" in current, flag
