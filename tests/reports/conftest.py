"""Media fixtures shared with the processor tests (a video file, an audio file, a tone)."""

from tests.processors.conftest import audio_file, frame_code, tone, video_file  # noqa: F401
