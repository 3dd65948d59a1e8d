#!/usr/bin/env bash
# DA-WID on GLUE RTE (Tables 1 and 2 of the paper; README.md): roberta.base fine-tuned by
# fairseq's GLUE recipe (the teacher), DA-WID for EPOCHS (20) epochs, fused, scored on the dev
# set with fairseq-validate. Run prepare-glue.sh RTE first; DRY_RUN=1 prints the pipeline.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
dawid_glue_row RTE
