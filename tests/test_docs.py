"""The documents stay true: README.md and docs/*.md link to what exists, bench/RESULTS.md is what the json
results give, and the commands and code the README and docs show are valid.

What "valid" means for each kind of code block (checked without running a model; the suite already runs
each of these paths on real audio elsewhere):

- ``python`` blocks of the README's "Python API" section run as written on real audio in
  tests/test_api.py; here only their presence is checked.
- other ``python`` blocks compile, and every name they import exists (``from handler import
  EndpointHandler`` imports handler.py and finds the class).
- ``bash`` blocks: every command is checked by what it names. ``transcribe ...`` is parsed by the
  command's own parser (an unknown or malformed option fails); ``python -m M ...`` needs module M, and
  the HTTP server's and the model loader's arguments are parsed by their parsers; ``python FILE.py`` needs
  the file (``app.py``'s arguments go through its parser); ``make T`` needs target T in the Makefile;
  ``pip install`` of a pinned package needs the same pin in the Makefile, pyproject.toml or
  requirements.lock, and an extra needs that extra; ``apt-get install`` needs the Makefile's package
  list to hold the package; ``docker build --build-arg A=...`` needs ``ARG A`` in the Dockerfile;
  ``curl`` to the server's POST route has its query string validated as request parameters. A program
  this test does not know fails it, so a new kind of command comes with its check.
- blocks of any other language (or none: file layouts, usage lines) are text.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shlex
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
DOCUMENTS = [README, *DOCS, ROOT / "bench" / "RESULTS.md"]
FENCE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(path.read_text())]


def _section(text: str, title: str) -> str:
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


# -- links ---------------------------------------------------------------------------------------------

def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown text's headings: lower case, punctuation dropped (not '-' or '_'),
    spaces as '-', a repeated one numbered."""
    found: set[str] = set()
    for line in FENCE.sub("", markdown).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        name, n = slug, 0
        while name in found:
            n += 1
            name = f"{slug}-{n}"
        found.add(name)
    return found


def test_the_anchor_rule_is_githubs():
    doc = "# `transcribe` command line\n## Where each option is taken\n## What \"exact\" means on each device\n## a\n## a\n"
    assert anchors(doc) == {"transcribe-command-line", "where-each-option-is-taken", "what-exact-means-on-each-device",
                            "a", "a-1"}


@pytest.mark.parametrize("path", DOCUMENTS, ids=_rel)
def test_every_relative_link_resolves(path):
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target}: no {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest.read_text())):
            broken.append(f"{target}: no heading #{anchor} in {_rel(dest)}")
    assert not broken, f"{_rel(path)}:\n" + "\n".join(broken)


def test_the_readme_links_every_document():
    text = README.read_text()
    assert [d.name for d in DOCS if f"](docs/{d.name})" not in text] == []


# -- the README ----------------------------------------------------------------------------------------

def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move reference material to docs/"
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", README.read_text()), "dated history belongs in git, not the README"


def test_the_readme_sets_up_a_fresh_machine_with_make_demo_and_make_test():
    install = _section(README.read_text(), "Install")
    first = FENCE.search(install).group(2)
    assert [shlex.split(line, comments=True) for line in first.splitlines() if shlex.split(line, comments=True)] == [
        ["make", "demo"], ["make", "test"]]


def test_the_python_api_examples_are_there_for_test_api():
    blocks = re.findall(r"```python\n(.*?)```", _section(README.read_text(), "Python API"), re.S)
    assert 2 <= len(blocks) <= 4 and blocks[0].startswith("import specwhisper\n")


# -- bench/RESULTS.md ----------------------------------------------------------------------------------

def test_bench_results_md_is_current():
    import bench.report as report

    current = (ROOT / "bench" / "RESULTS.md").read_text()
    assert current == report.render(), "bench/RESULTS.md is stale: python bench/report.py"
    for path in sorted((ROOT / "bench" / "results").glob("*.json")):
        assert f"\n## {path.stem}\n" in current, path.name


# -- code blocks -----------------------------------------------------------------------------------------

def _code_blocks(kind: str) -> list[tuple[str, int, str]]:
    """(document, block number, code) of every ``kind`` block outside the README's Python API section."""
    out = []
    for path in [README, *DOCS]:
        text = path.read_text()
        if path == README:
            api = _section(text, "Python API")
            text = text.replace(api, "")
        out += [(_rel(path), i, code) for i, (lang, code) in enumerate(FENCE.findall(text)) if lang == kind]
    return out


@pytest.mark.parametrize("doc,number,code", _code_blocks("python"), ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_python_blocks_compile_and_import_what_they_name(doc, number, code):
    compile(code, f"{doc} (python block {number})", "exec")
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            missing = [a.name for a in node.names if not hasattr(module, a.name)]
            assert not missing, f"{doc}: {node.module} has no {missing}"


def _commands(code: str) -> list[list[str]]:
    joined = re.sub(r"\\\n", " ", code)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def _makefile() -> str:
    return (ROOT / "Makefile").read_text()


def _check_python(args: list[str]) -> None:
    if args[0] == "-m":
        module, rest = args[1], args[2:]
        assert importlib.util.find_spec(module) is not None, f"no module {module}"
        if module == "specwhisper.serving.http.serve":
            from specwhisper.serving.http.serve import build_parser

            build_parser().parse_args(rest)
        elif module == "specwhisper.asr.weights.loader":
            from specwhisper.asr.weights.loader import EMBEDDED_MODELS

            assert rest[0] == "--prepare" and set(rest[1:]) <= set(EMBEDDED_MODELS), rest
        elif module == "pytest":
            paths = [a for a in rest if a.startswith("tests/")]
            assert all((ROOT / p.split("::")[0]).exists() for p in paths), paths
        return
    script, rest = args[0], args[1:]
    assert (ROOT / script).is_file(), f"no file {script}"
    if script == "app.py":
        import app

        app.build_parser().parse_args(rest)


def _check_pip(args: list[str]) -> None:
    assert args[0] == "install", args
    pins = _makefile() + (ROOT / "pyproject.toml").read_text() + (ROOT / "requirements.lock").read_text()
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    items = iter(args[1:])
    for item in items:
        if item == "-r":
            assert (ROOT / next(items)).is_file()
        elif item.startswith("-"):
            continue
        elif item.startswith(".["):
            assert item[2:-1] in extras, item
        elif item != ".":
            assert "==" in item and item in pins, f"{item} is not pinned as the Makefile or pyproject pins it"


def _check_curl(args: list[str]) -> None:
    from specwhisper.serving.http.app import POST_PATHS, query_parameters
    from specwhisper.serving.http.asr_webservice import TAKEN, our_parameters, route_query
    from specwhisper.serving.params import Choices, parse_params

    url = urlsplit(next(a for a in args if a.startswith("http")))
    if url.path in POST_PATHS:
        parse_params(query_parameters(url.query), Choices())
    if url.path in TAKEN:  # whisper-asr-webservice's routes
        parse_params(our_parameters(route_query(url.path, url.query))[1], Choices())


def _check_docker(args: list[str]) -> None:
    if args[0] != "build":
        return
    declared = set(re.findall(r"^ARG (\w+)", (ROOT / "Dockerfile").read_text(), re.M))
    named = {args[i + 1].split("=")[0] for i, a in enumerate(args) if a == "--build-arg"}
    assert named <= declared, f"build args not in the Dockerfile: {named - declared}"


def check_command(argv: list[str]) -> None:
    while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):  # VAR=value before the command
        argv = argv[1:]
    if argv[0] == "sudo":
        argv = argv[1:]
    program, args = Path(argv[0]).name, argv[1:]
    if program == "make":
        assert all(re.search(rf"^{re.escape(t)}:", _makefile(), re.M) for t in args), f"no make target {args}"
    elif program == "transcribe":
        from specwhisper.serving.cli.args import parse_args

        parse_args(args)
    elif re.fullmatch(r"python(3(\.\d+)?)?", program):
        _check_python(args)
    elif program == "pip":
        _check_pip(args)
    elif program == "apt-get":
        packages = re.search(r"^APT_PACKAGES := (.*)$", _makefile(), re.M).group(1).split()
        assert args[0] == "install" and set(args[1:]) <= set(packages), args
    elif program == "ffmpeg":
        assert "ffmpeg" in re.search(r"^APT_PACKAGES := (.*)$", _makefile(), re.M).group(1).split()
        assert "-i" in args, args
    elif program == "curl":
        _check_curl(args)
    elif program == "docker":
        _check_docker(args)
    else:
        raise AssertionError(f"tests/test_docs.py has no check for '{program}': add one")


def test_a_bad_command_fails_its_check():
    for argv in (["transcribe", "a.wav", "--beam-size", "0"], ["make", "deploy"], ["pip", "install", "torch==1.0"],
                 ["python", "-m", "specwhisper.nothing"], ["curl", "http://127.0.0.1:8080/?beam_size=99"], ["rm", "-rf", "x"]):
        with pytest.raises((AssertionError, SystemExit, ValueError)):
            check_command(argv)


@pytest.mark.parametrize("doc,number,code", _code_blocks("bash"), ids=lambda v: str(v) if not isinstance(v, str) or "\n" not in v else "")
def test_bash_blocks_are_valid_commands(doc, number, code, capsys):
    for argv in _commands(code):
        try:
            check_command(argv)
        except SystemExit as exc:  # a parser refused the arguments
            raise AssertionError(f"{doc}: {shlex.join(argv)}: {capsys.readouterr().err.strip()}") from exc
        except (AssertionError, ValueError) as exc:
            raise AssertionError(f"{doc}: {shlex.join(argv)}: {exc}") from exc
