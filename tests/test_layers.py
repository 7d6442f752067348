"""The package's layers: no module imports from a higher layer (lazy imports inside functions
count too), no module is over the size limit, and installing gives one top-level package."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specwhisper"
# lowest first: a module may import from its own layer and the ones before it ("messages" is one module,
# messages.py: how a failure is said in one line)
LAYERS = ["messages", "results", "hardware", "audio", "speculative", "asr", "diarize", "postedit", "evaluation", "pipeline", "live",
          "batch", "serving"]
# inside asr, the same rule between its subpackages (the engine's modules at asr/ itself come last)
ASR_LAYERS = ["weights", "runtime", "decoding", "drafters", None]
# a ceiling, not a target: modules split where their jobs part
MAX_LINES = 600


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _layer(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "specwhisper" else None


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def test_every_subpackage_has_a_layer():
    found = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert found <= set(LAYERS), f"subpackages without a layer: {sorted(found - set(LAYERS))}"


def test_no_import_from_a_higher_layer():
    wrong = []
    for path in _modules():
        own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if own not in LAYERS:  # the package's own __init__ (the public API) may import anything
            continue
        for name in _imports(path):
            layer = _layer(name)
            if layer in LAYERS and LAYERS.index(layer) > LAYERS.index(own):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_asr_subpackages_import_downward():
    wrong = []
    asr = PACKAGE / "asr"
    for path in sorted(asr.rglob("*.py")):
        parts = path.relative_to(asr).parts
        own = parts[0] if len(parts) > 1 else None
        for name in _imports(path):
            bits = name.split(".")
            if bits[:2] != ["specwhisper", "asr"] or len(bits) < 3:
                continue
            sub = bits[2] if bits[2] in ASR_LAYERS else None
            if ASR_LAYERS.index(sub) > ASR_LAYERS.index(own):
                wrong.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not wrong, "\n".join(wrong)


def test_no_class_name_twice():
    """One name per class across the package (a reader finds a class by its name)."""
    seen: dict[str, list[str]] = {}
    for path in _modules():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, f"classes defined more than once: {twice}"


def test_no_top_level_packages_but_specwhisper():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert config["packages"]["find"]["include"] == ["specwhisper*"]
    for name in ("asr", "diarize", "pipelines"):
        assert not (ROOT / name).exists(), f"a generic top-level package '{name}' is back"


def test_modules_are_small():
    big = [(str(p.relative_to(ROOT)), n) for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not big, f"modules over {MAX_LINES} lines: {big}"
