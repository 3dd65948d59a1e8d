"""Knowledge-distillation helpers: the sequence-level KD data pipeline (:mod:`.distill`).

The ``translation_seqkd`` task and the ``word_kd`` criterion live with the other fairseq
components (``lightcompress/tasks``, ``lightcompress/criterions``).
"""
