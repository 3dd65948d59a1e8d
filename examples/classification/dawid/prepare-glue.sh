#!/usr/bin/env bash
# Download and binarize GLUE tasks for fairseq RoBERTa: prepare-glue.sh [TASK...] (default:
# SST-2 RTE MRPC STS-B, the tasks of DA-WID's Table 2). fairseq's preprocess_GLUE_tasks.sh steps:
# columns cut from the task's TSV files, GPT-2 BPE, fairseq-preprocess with RoBERTa's dictionary,
# STS-B scores scaled to [0, 1]. MRPC is formatted from the MSR Paraphrase Corpus as GLUE's
# download script does. DRY_RUN=1 prints the commands.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if (($# == 0)); then set -- SST-2 RTE MRPC STS-B; fi
for task in "$@"; do
  DATA_BIN="" dawid_glue_prepare "$task"
done
