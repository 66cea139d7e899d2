"""mmgrpo: multimodal GRPO for vision/video/audio-language models."""

__version__ = "0.1.0"
