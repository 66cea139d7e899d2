"""Small copies of benchmark files in the layouts the benchmarks publish, written by the tests.

MathVista: the Hub parquet (``data/testmini-00000-of-00001.parquet``, images as bytes in
``decoded_image``) or the GitHub json (``data/testmini.json`` keyed by pid + ``data/images/``).
MMMU: the Hub parquet, one folder per subject (``<Subject>/validation-00000-of-00001.parquet``,
``image_1``..``image_7`` as bytes). The others (MMStar, AI2D, ...): :func:`write_parquet` of rows with
the Hub's columns, each benchmark's test saying where its file goes.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import datasets
from PIL import Image

from tests.eval import video_files


def png(seed: int, size: int | tuple[int, int] = 56) -> bytes:
    """A small distinct PNG, ``size`` square or ``(width, height)``."""
    buffer = io.BytesIO()
    dimensions = size if isinstance(size, tuple) else (size, size)
    Image.new("RGB", dimensions, (40 * seed % 256, 90, 160)).save(buffer, format="PNG")
    return buffer.getvalue()


def mathvista_row(pid: str, question: str, answer: str, *, choices: list[str] | None = None,
                  answer_type: str = "text", precision: float | None = None, unit: str = "",
                  task: str = "figure question answering", skills: tuple[str, ...] = ("arithmetic reasoning",)) -> dict:
    """One MathVista row with the Hub's columns (``precision`` a float, as the parquet stores it)."""
    return {
        "pid": pid, "question": question, "image": f"images/{pid}.jpg", "choices": choices, "unit": unit or None,
        "precision": precision, "answer": answer,
        "question_type": "multi_choice" if choices else "free_form", "answer_type": answer_type,
        "metadata": {"category": "math-targeted-vqa", "context": "synthetic scene", "grade": "daily life",
                     "img_height": 56, "img_width": 56, "language": "english", "skills": list(skills),
                     "source": "fixture", "split": "testmini", "task": task},
        "query": "",
    }


MATHVISTA_ROWS = [
    mathvista_row("1", "Which way did the block move?", "Moved right.",
                  choices=["Moved left.", "Moved right.", "Stayed still."], task="textbook question answering",
                  skills=("scientific reasoning",)),
    mathvista_row("2", "How many cubes are there?", "12", answer_type="integer", skills=("arithmetic reasoning",
                                                                                            "numeric commonsense")),
    mathvista_row("3", "What is the length of the bar?", "1.5", answer_type="float", precision=1.0, unit="cm"),
    mathvista_row("4", "List the heights.", "[1, 2, 3]", answer_type="list", task="math word problem"),
    mathvista_row("5", "What is the angle?", "30", choices=["30", "45", "60", "90"], task="geometry problem solving",
                  skills=("geometry reasoning", "algebraic reasoning")),
]


def write_mathvista_parquet(folder: Path, rows: list[dict] = MATHVISTA_ROWS, split: str = "testmini") -> Path:
    """``folder/data/<split>-00000-of-00001.parquet`` with each row's image as bytes in ``decoded_image``."""
    columns: dict[str, list[Any]] = {key: [row[key] for row in rows] for key in rows[0]}
    columns["decoded_image"] = [{"bytes": png(int(row["pid"])), "path": None} for row in rows]
    dataset = datasets.Dataset.from_dict(columns).cast_column("decoded_image", datasets.Image())
    path = folder / "data" / f"{split}-00000-of-00001.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(path))
    return folder


def write_mathvista_json(folder: Path, rows: list[dict] = MATHVISTA_ROWS, split: str = "testmini") -> Path:
    """The GitHub release layout: ``folder/data/<split>.json`` keyed by pid, images in ``folder/data/images``."""
    data = folder / "data"
    (data / "images").mkdir(parents=True, exist_ok=True)
    for row in rows:
        (data / row["image"]).write_bytes(png(int(row["pid"])))
    (data / f"{split}.json").write_text(json.dumps({row["pid"]: row for row in rows}))
    return data / f"{split}.json"


def mmmu_row(subject: str, number: int, question: str, answer: str, *, options: list[str] | None = None,
             images: int = 1, split: str = "validation") -> dict:
    """One MMMU row with the Hub's columns (``options`` a list written as a string)."""
    row: dict[str, Any] = {
        "id": f"{split}_{subject}_{number}", "question": question, "options": str(options or []),
        "explanation": "", "img_type": "['Diagrams']", "answer": answer, "topic_difficulty": "Easy",
        "question_type": "multiple-choice" if options else "open", "subfield": subject,
    }
    for k in range(1, 8):
        row[f"image_{k}"] = {"bytes": png(number + k), "path": None} if k <= images else None
    return row


MMMU_ROWS = {
    "Accounting": [
        mmmu_row("Accounting", 1, "<image 1> What is the total?", "B", options=["$10", "$12", "$14", "$16"]),
        mmmu_row("Accounting", 2, "Compute the ratio shown in <image 1>.", "3.5"),
    ],
    "Art_Theory": [
        mmmu_row("Art_Theory", 1, "Which painting, <image 1> or <image 2>, is older?", "A",
                 options=["<image 1>", "<image 2>"], images=2),
    ],
    "Math": [
        mmmu_row("Math", 1, "<image 1> Which shape has four sides?", "C",
                 options=["triangle", "circle", "square", "pentagon"]),
    ],
}


def write_mmmu(folder: Path, rows: dict[str, list[dict]] = MMMU_ROWS, split: str = "validation") -> Path:
    """One folder per subject with ``<split>-00000-of-00001.parquet`` (images as bytes)."""
    for subject, subject_rows in rows.items():
        columns = {key: [row[key] for row in subject_rows] for key in subject_rows[0]}
        features = datasets.Dataset.from_dict(columns).features
        for k in range(1, 8):
            features[f"image_{k}"] = datasets.Image()
        dataset = datasets.Dataset.from_dict(columns, features=features)
        path = folder / subject / f"{split}-00000-of-00001.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        dataset.to_parquet(str(path))
    return folder


def write_parquet(path: Path, rows: list[dict], image_columns: tuple[str, ...] = ("image",),
                  image_size: int | tuple[int, int] = 56) -> Path:
    """``rows`` as one Hub-style parquet file at ``path``, ``image_columns`` stored as image bytes
    (a row gives the PNG's seed there) of ``image_size``."""
    columns: dict[str, list[Any]] = {key: [row[key] for row in rows] for key in rows[0]}
    for column in image_columns:
        columns[column] = [{"bytes": png(seed, image_size), "path": None} for seed in columns[column]]
    dataset = datasets.Dataset.from_dict(columns)
    for column in image_columns:
        dataset = dataset.cast_column(column, datasets.Image())
    path.parent.mkdir(parents=True, exist_ok=True)
    dataset.to_parquet(str(path))
    return path


def videomme_row(question_id: str, video: str, duration: str, task_type: str, answer: str) -> dict:
    """One question with the Hub's columns."""
    return {"video_id": question_id.split("-")[0], "duration": duration, "domain": "Knowledge",
            "sub_category": "Astronomy", "url": f"https://www.youtube.com/watch?v={video}", "videoID": video,
            "question_id": question_id, "task_type": task_type, "question": "What is shown first?",
            "options": ["A. A star.", "B. A planet.", "C. A moon.", "D. A comet."], "answer": answer}


VIDEOMME_ROWS = [videomme_row("001-1", "vidA", "short", "Counting Problem", "B"), videomme_row("001-2", "vidA", "short", "OCR Problems", "C"),
        videomme_row("301-1", "vidB", "long", "Counting Problem", "A"), videomme_row("302-1", "gone", "long", "OCR Problems", "D")]
VIDEOMME_SRT = ('1\n00:00:00,000 --> 00:00:01,500\n<font color="white" size=".72c">Look at the sky.</font>\n\n'
       '2\n00:00:01,500 --> 00:00:03,000\n<font color="white" size=".72c">A planet rises.</font>\n\n'
       '3\n00:00:10,000 --> 00:00:12,000\n<font color="white" size=".72c">After the clip.</font>\n')


def write_videomme(folder: Path) -> Path:
    """Video-MME as the Hub publishes it: ``videomme/test-*.parquet``, ``data/<videoID>.mp4`` (one ``.MP4``: the
    release's other containers), ``subtitle/<videoID>.srt``; the last question's video is missing."""
    write_parquet(folder / "videomme" / "test-00000-of-00001.parquet", VIDEOMME_ROWS, image_columns=())
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "vidA.mp4").write_bytes(video_files.clip(1))
    (folder / "data" / "vidB.MP4").write_bytes(video_files.clip(2))
    (folder / "subtitle").mkdir()
    (folder / "subtitle" / "vidA.srt").write_text(VIDEOMME_SRT)
    return folder
