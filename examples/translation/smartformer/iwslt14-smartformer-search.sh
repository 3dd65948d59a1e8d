#!/usr/bin/env bash
# Smartformer on IWSLT'14 De-En: the dense Transformer 6-6 (trained first unless TEACHER is set)
# is CP-transferred at rank SM_START_RANK (default: the largest of SM_RANKS) into
# smartformer_iwslt_de_en, then trained with the A2C rank search (task translation_smartformer,
# --sm-search): every SM_INTERVAL updates the least important attention layer gets a rank from
# SM_RANKS. Results: results.txt, result.json, speed.txt, rank_search.jsonl / .png.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
sm_search_row
