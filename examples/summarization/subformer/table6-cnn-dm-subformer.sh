#!/usr/bin/env bash
# Table 6 SUBFORMER-BASE on CNN-DailyMail (subformer_cnn_dm: SUBFORMER-BASE with d_e 256, d 512,
# d_s 1024, sandwich FFN 3072, separate source and target tables; 57M, ROUGE-1/2/L 40.9 / 18.3 /
# 37.7). Data: ./prepare-cnn-dm.sh. Trains with the Subformer MT recipe, tunes the minimum
# summary length on valid over 40 / 50 / 60 (MIN_LEN fixes it), decodes test with beam 4 and
# trigram blocking (--no-repeat-ngram-size 3), and scores ROUGE-1/2/L F1 with rouge-score
# (examples/summarization/lightformer/score_rouge.py) into SAVE_ROOT/cnndm/subformer-base/results.txt.
# Schedule and environment: ../../translation/subformer/common.sh.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=../../translation/subformer/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../translation/subformer/common.sh"
sf_cnndm
sf_summarization_row subformer-base --arch subformer_cnn_dm
