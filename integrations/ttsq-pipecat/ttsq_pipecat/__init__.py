"""ttsq's realtime route as Pipecat's TTS service (:mod:`ttsq_pipecat.tts`)."""

from .tts import TTSQTTSService
from .version import __version__

__all__ = ["TTSQTTSService", "__version__"]
