"""ttsq's realtime route as LiveKit Agents' TTS (:mod:`livekit.plugins.ttsq.tts`)."""

from .tts import TTS, SynthesizeStream
from .version import __version__

__all__ = ["TTS", "SynthesizeStream", "__version__"]
