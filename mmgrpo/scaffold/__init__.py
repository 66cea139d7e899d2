"""``mmgrpo task new``: write a working task package (task, rewards, data recipe, recipe, tests).

The package installs with ``pip install -e`` and registers through the ``mmgrpo.tasks``
entry-point group (:mod:`mmgrpo.plugins`); its tests pass as written and its recipe trains.
Each modality differs only in the media its data recipe makes and the tiny model its recipe
names; everything else is one set of templates (``templates/*.tmpl``, ``string.Template``).
"""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

TEMPLATES = Path(__file__).with_name("templates")
NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class ModalityTemplate:
    """What a modality puts into the templates."""

    question: str
    model: str
    model_options: str  # YAML lines under model:, or ""
    media_body: str  # the end of ``example(rng)``: ``count`` is drawn, an Example is returned
    stdlib_imports: str = ""
    library_imports: str = ""
    project_imports: str = ""
    constants: str = ""


_SQUARES = '''        image = Image.new("RGB", (112, 112), BACKGROUND)  # the image processor's mean colour
        draw = ImageDraw.Draw(image)
        for index in rng.permutation(49)[:count]:  # distinct cells of a 7 x 7 grid, 16 px apart
            left, top = 16 * int(index % 7) + 2, 16 * int(index // 7) + 2
            draw.rectangle([left, top, left + 11, top + 11], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
'''

MODALITY_TEMPLATES: dict[str, ModalityTemplate] = {
    "image": ModalityTemplate(
        question="How many squares are in the image?",
        model="tiny:qwen2_5_vl",
        model_options="",
        stdlib_imports="import io\n",
        library_imports="from PIL import Image, ImageDraw\n",
        constants="BACKGROUND = (123, 117, 104)\n",
        media_body=_SQUARES + '''        png = io.BytesIO()
        image.save(png, "PNG")
        fields = {"problem": "How many squares are in the image?", "answer": count}
        return Example(fields, MediaFile("image", ".png", png.getvalue()))
''',
    ),
    "video": ModalityTemplate(
        question="How many squares are in the video?",
        model="tiny:qwen2_5_vl",
        model_options="  fps: 1\n",
        library_imports="from PIL import Image, ImageDraw\n",
        project_imports="from data_recipes.generators.video_count import mp4_bytes\n",
        constants="BACKGROUND = (123, 117, 104)\nFRAMES = 4\n",
        media_body=_SQUARES + '''        fields = {"problem": "How many squares are in the video?", "answer": count}
        return Example(fields, MediaFile("video", ".mp4", mp4_bytes([image] * FRAMES, fps=2, crf=10)))
''',
    ),
    "audio": ModalityTemplate(
        question="How many beeps are in the audio?",
        model="tiny:qwen2_audio",
        model_options="  tiny_options: {audio_max_seconds: 3}\n  max_audio_seconds: 3\n",
        project_imports="from data_recipes.generators.audio_count import wav_bytes\n",
        constants="RATE = 16_000\nSECONDS = 3\n",
        media_body='''        clip = rng.normal(0.0, 0.02, SECONDS * RATE)
        slots = rng.permutation(SECONDS * 4 - 1)[:count] + 1  # distinct quarter-second slots
        tone = 0.5 * np.sin(2 * np.pi * 880.0 * np.arange(RATE // 8) / RATE)  # 1/8 s at 880 Hz
        for slot in slots:
            start = int(slot) * RATE // 4
            clip[start : start + len(tone)] += tone
        fields = {"problem": "How many beeps are in the audio?", "answer": count}
        return Example(fields, MediaFile("audio", ".wav", wav_bytes(np.clip(clip, -1.0, 1.0), RATE)))
''',
    ),
    "text": ModalityTemplate(
        question="What is the sum of the two numbers?",
        model="tiny:qwen2_5_vl",
        model_options="",
        media_body='''        first = int(rng.integers(0, count + 1))
        fields = {"problem": f"What is {first} plus {count - first}?", "answer": count}
        return Example(fields)  # no media: a text-only row
''',
    ),
}


def write_task_package(name: str, modality: str, out: Path) -> Path:
    """Write the package of task ``name`` for ``modality`` under ``out/mmgrpo-<name>`` (the package
    itself in its subfolder ``<name>``); returns that folder.

    Raises ``ValueError`` for a name that is not a lower-case Python identifier, an unknown
    modality or a folder that exists already (nothing is overwritten).
    """
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ValueError(f"task name {name!r} must be a lower-case Python identifier (letters, digits, _)")
    if modality not in MODALITY_TEMPLATES:
        raise ValueError(f"unknown modality {modality!r}; choose from {', '.join(MODALITY_TEMPLATES)}")
    root = Path(out) / _dist_name(name)  # not the package's name: run from ``out``, the folder would shadow it
    if root.exists():
        raise ValueError(f"{root} exists already; choose another --out or name")
    chosen = MODALITY_TEMPLATES[modality]
    values = {
        "name": name,
        "camel": "".join(part.capitalize() for part in name.split("_")),
        "dist_name": _dist_name(name),
        "question_doc": chosen.question,
        "required_media": repr(None if modality == "text" else modality),
        "model": chosen.model,
        "model_options": chosen.model_options,
        "stdlib_imports": chosen.stdlib_imports,
        "library_imports": chosen.library_imports,
        "project_imports": chosen.project_imports,
        "constants": chosen.constants,
        "base_names": "GENERATORS, Example, check_range" if modality == "text" else
                      "GENERATORS, Example, MediaFile, check_range",
        "media_body": chosen.media_body.rstrip("\n"),
    }
    layout = {
        "pyproject.toml": "pyproject.toml", "README.md": "README.md", "recipe.yaml": "recipe.yaml",
        f"{name}/__init__.py": "__init__.py", f"{name}/task.py": "task.py", f"{name}/data.py": "data.py",
        "tests/test_rewards.py": "test_rewards.py", "tests/test_smoke.py": "test_smoke.py",
    }
    for target, template in layout.items():
        path = root / target
        path.parent.mkdir(parents=True, exist_ok=True)
        text = Template((TEMPLATES / f"{template}.tmpl").read_text()).substitute(values)
        path.write_text(re.sub(r"\n{4,}", "\n\n\n", text))  # an empty part leaves no extra blank lines
    return root


def _dist_name(name: str) -> str:
    """The distribution (and project folder) name: ``mmgrpo-<name>``, dashes for underscores."""
    return f"mmgrpo-{name.replace('_', '-')}"
