#!/usr/bin/env bash
# The voice-agent frameworks' own TTS clients, for tests/e2e/test_agent_clients.py: LiveKit Agents with its OpenAI
# plugin, and Pipecat; and ttsq's plugins for both (integrations/). They go into a virtual environment of their own (var/agents-venv), not the project's: they pin
# versions of packages ttsq uses too (Pipecat wants soundfile < 0.14, LiveKit brings onnxruntime and grpc), and the
# test drives them in their own process against a real ttsq, as an agent would. Idempotent; pinned, so a new release
# of a framework cannot turn CI red on its own.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_BASE="${PYTHON_BASE:-python3}"
VENV="var/agents-venv"
PACKAGES="livekit-agents==1.8.9 livekit-plugins-openai==1.8.9 pipecat-ai==1.14.0 mypy==2.4.1"
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
# shellcheck disable=SC2086  # PACKAGES is a list
"$VENV/bin/pip" install -q $PACKAGES
# ttsq's own plugins for the realtime route (integrations/, one distribution each): installed as a user would, without
# touching the pins above; the tests put their directories first on the path, so they run the source as it is now.
# shellcheck disable=SC2086  # PLUGINS is a list
"$VENV/bin/pip" install -q --no-deps $PLUGINS
rm -rf integrations/*/build
touch "$STAMP"
echo "agent clients installed in $VENV: $PACKAGES"
