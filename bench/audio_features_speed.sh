#!/usr/bin/env bash
# Speech feature extraction throughput on one core (seconds of audio per second), per stage and
# for the whole pipeline, on N (default 1000) clips of the prepared keyword-spotting training set
# (scripts/prepare_speech_data.sh): 22050 Hz WAV -> 16 kHz -> log-mel / MFCC.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${AUDIO_FEATURES_SPEED:-build/bin/audio_features_speed}
"$bin" "${KILN_SPEECH_DATA_DIR:-data/speech}/commands/train" "${N:-1000}" 16000
