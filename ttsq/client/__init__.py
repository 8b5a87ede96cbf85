"""The ttsq HTTP client and command line. Depends on httpx and tqdm only; imports nothing else of ttsq."""

from ttsq.client import sdk
from ttsq.client.sdk import *  # noqa: F403 - the package's API is the SDK's

__all__ = sdk.__all__
