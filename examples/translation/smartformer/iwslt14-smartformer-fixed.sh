#!/usr/bin/env bash
# The comparison row of iwslt14-smartformer-search.sh: smartformer_iwslt_de_en with one fixed CP
# rank for every Q/K/V map, the rank whose parameter count is closest to the searched model's,
# CP-transferred from the same teacher and trained with the same schedule (no search).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
use_dataset iwslt14
sm_fixed_row
