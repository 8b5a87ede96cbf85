#!/usr/bin/env bash
# The voice-agent frameworks' own TTS clients, for tests/e2e/test_agent_clients.py and the protocol tests: LiveKit
# Agents with its OpenAI, ElevenLabs and Cartesia plugins, Pipecat (its ElevenLabs and Cartesia services), the
# elevenlabs and cartesia SDKs; and ttsq's plugins for LiveKit and Pipecat (integrations/). They go into a virtual environment of their own (var/agents-venv), not the project's: they pin
# versions of packages ttsq uses too (Pipecat wants soundfile < 0.14, LiveKit brings onnxruntime and grpc), and the
# test drives them in their own process against a real ttsq, as an agent would. Idempotent; pinned, so a new release
# of a framework cannot turn CI red on its own.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_BASE="${PYTHON_BASE:-python3}"
VENV="var/agents-venv"
# pipecat-ai's [elevenlabs,cartesia] extras declare no packages in 1.14 (its services speak websockets/aiohttp, core
# dependencies); they are named so that a release whose services need more gets it.
PACKAGES="livekit-agents==1.8.9 livekit-plugins-openai==1.8.9 livekit-plugins-elevenlabs==1.8.9 livekit-plugins-cartesia==1.8.9 \
pipecat-ai[elevenlabs,cartesia]==1.14.0 elevenlabs==2.78.0 cartesia==4.2.0 mypy==2.4.1"
PLUGINS="integrations/livekit-plugins-ttsq integrations/ttsq-pipecat"
STAMP="$VENV/.installed-$(echo "$PACKAGES $PLUGINS" | md5sum | cut -c1-12)"

if [ -f "$STAMP" ]; then
    echo "agent clients already installed in $VENV"
    exit 0
fi
rm -rf "$VENV"
mkdir -p var
"$PYTHON_BASE" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# shellcheck disable=SC2086  # PACKAGES is a list (no glob: set -f around it)
set -f
"$VENV/bin/pip" install -q $PACKAGES
set +f
# ttsq's own plugins for the realtime route (integrations/, one distribution each): installed as a user would, without
# touching the pins above; the tests put their directories first on the path, so they run the source as it is now.
# shellcheck disable=SC2086  # PLUGINS is a list
"$VENV/bin/pip" install -q --no-deps $PLUGINS
rm -rf integrations/*/build
touch "$STAMP"
echo "agent clients installed in $VENV: $PACKAGES"
