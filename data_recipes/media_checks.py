"""Cheap "does this media file decode?" checks run on every loaded row.

Images: Pillow's header/checksum ``verify()`` (no full decode) and a usable size. Video: the container opens,
has a video stream and its first frame decodes. Audio: libsndfile reads the header and finds
samples. Failures raise the typed ``processors.errors.MediaError`` subclasses, naming the
source, so the loader can skip and count the row with a precise reason.
"""

from __future__ import annotations

import contextlib
import io
from typing import BinaryIO, Callable, Iterator

import av
import soundfile
from PIL import Image

from processors.budgets import ImageBudget
from processors.errors import CorruptMediaError, EmptyMediaError
from processors.sizing import check_image_shape
from processors.sources import existing_file

MediaSource = str | bytes


@contextlib.contextmanager
def _opened(ref: MediaSource) -> Iterator[tuple[BinaryIO | str, str]]:
    """``(file-like or path, description)`` for a path (checked to exist, non-empty) or bytes."""
    if isinstance(ref, bytes):
        if not ref:
            raise EmptyMediaError("<0 bytes>", "no media bytes")
        yield io.BytesIO(ref), f"<{len(ref)} bytes>"
    else:
        yield str(existing_file(ref)), ref


def check_image(ref: MediaSource) -> None:
    """Header and checksums verify, and the size is usable (not zero, aspect ratio in bounds).

    A damaged pixel stream behind a valid header (truncated JPEG, corrupt zlib data) passes
    here; the batch builder catches it on full decode and skips the row then.
    """
    with _opened(ref) as (file, source):
        try:
            with Image.open(file) as image:
                height, width = image.height, image.width
                image.verify()
        except (OSError, SyntaxError, ValueError) as error:  # Pillow raises all three for bad data
            raise CorruptMediaError(source, f"cannot decode image: {error}") from error
        check_image_shape(height, width, max_aspect_ratio=ImageBudget().max_aspect_ratio, source=source)


def check_video(ref: MediaSource) -> None:
    with _opened(ref) as (file, source):
        try:
            with av.open(file) as container:
                streams = len(container.streams.video)
                first_frame = next(container.decode(video=0), None) if streams else None
        except (av.error.FFmpegError, OSError, ValueError) as error:
            raise CorruptMediaError(source, f"cannot decode video: {error}") from error
        if first_frame is None:
            raise EmptyMediaError(source, "no video stream" if not streams else "no decodable frame")


def check_audio(ref: MediaSource) -> None:
    with _opened(ref) as (file, source):
        try:
            info = soundfile.info(file)
        except (soundfile.SoundFileError, OSError, ValueError) as error:
            raise CorruptMediaError(source, f"cannot decode audio: {error}") from error
        if info.frames == 0:
            raise EmptyMediaError(source, "audio has no samples")


# media kind -> its check
CHECKS: dict[str, Callable[[MediaSource], None]] = {"image": check_image, "video": check_video, "audio": check_audio}
