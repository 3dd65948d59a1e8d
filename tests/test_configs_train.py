"""A row's config trains through ``fairseq-hydra-train`` and its checkpoint generates: one row
per family (the plugin's architectures are fairseq legacy models; under hydra the preset's
architecture function fills their defaults in on the config), shrunk to a tiny model by
overrides, a few updates on the tiny corpus, on the CPU."""

import os

import harness
import pytest
from harness import REPO_ROOT, USER_DIR

TINY = {
    "encoder_embed_dim": 32,
    "decoder_embed_dim": 32,
    "encoder_ffn_embed_dim": 64,
    "decoder_ffn_embed_dim": 64,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
}
ROWS = [
    (
        "lightformer",
        "table7_lightformer_12_2",
        {
            **TINY,
            "encoder_layers": 4,
            "decoder_layers": 2,
            "lc_rank": 8,
            "lc_embed_rank": 8,
            "lc_encoder_groups": 2,
        },
    ),
    (
        "hypoformer",
        "table4_r4_hypoformer_no_kd",
        {
            **TINY,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "hypo_embed_rank": 2,
            "hypo_ffn_rank": 8,
        },
    ),
    (
        "subformer",
        "table2_sandwich_6_6",
        {
            **TINY,
            "encoder_layers": 4,
            "decoder_layers": 4,
            "safe_dim": 16,
            "safe_heads": 2,
            "subformer_sandwich_dim": 48,
            "subformer_sandwich_ffn_dim": 96,
            "subformer_sandwich_heads": 4,
        },
    ),
    (
        "smartformer",
        "iwslt14_smartformer_fixed",
        {**TINY, "encoder_layers": 2, "decoder_layers": 2, "sm_rank": 4},
    ),
]


@pytest.mark.parametrize("family,row,model", ROWS, ids=[r[0] for r in ROWS])
def test_a_row_trains_from_its_config_and_generates(family, row, model, tiny_data, tmp_path):
    save = tmp_path / "ckpt"
    overrides = [
        f"task.data={tiny_data}",
        f"checkpoint.save_dir={save}",
        f"common.user_dir={USER_DIR}",
        "common.cpu=true",
        "common.fp16=false",
        "common.log_interval=1",
        "optimization.max_update=3",
        "optimization.update_freq=[1]",
        "lr_scheduler.warmup_updates=2",
        "dataset.max_tokens=2048",
        "dataset.num_workers=0",
        "dataset.data_buffer_size=0",
        "checkpoint.keep_last_epochs=-1",
    ] + [f"++model.{k}={v}" for k, v in model.items()]
    proc = harness.run_cli(
        "fairseq-hydra-train",
        [
            "--config-dir",
            os.path.join(REPO_ROOT, "configs", family),
            "--config-name",
            row,
            *overrides,
        ],
        cwd=tmp_path,
        timeout=300,
    )
    log = proc.stdout + proc.stderr
    assert "num_updates: 3 >= max_update: 3" in log or "num_updates 3" in log, log[-3000:]
    assert (save / "checkpoint_last.pt").exists()
    bleu, hyps, _ = harness.generate(tiny_data, str(save / "checkpoint_last.pt"))
    assert bleu is not None and len(hyps) == 40  # every test sentence translated


def test_the_dawid_row_trains_from_its_config_fuses_and_generates(
    tiny_data, tiny_transformer, tmp_path
):
    """DA-WID's config names no teacher (``model.dawid_teacher: ???``): the run gives it; the
    training checkpoint is fused (``lightcompress-convert dawid-fuse``) before it translates."""
    save = tmp_path / "ckpt"
    teacher = os.path.join(tiny_transformer, "checkpoint_best.pt")
    overrides = [
        f"task.data={tiny_data}",
        f"checkpoint.save_dir={save}",
        f"model.dawid_teacher={teacher}",
        f"common.user_dir={USER_DIR}",
        "common.cpu=true",
        "common.fp16=false",
        "optimization.max_update=8",
        "optimization.update_freq=[1]",
        "lr_scheduler.warmup_updates=2",
        "dataset.max_tokens=2048",
        "dataset.num_workers=0",
        "dataset.data_buffer_size=0",
        "checkpoint.keep_last_epochs=-1",
        "model.dawid_calib_tokens=256",
        "model.dawid_target_sparsity=0.3",
        "model.dawid_distill_updates=3",
        "model.dawid_sparsity_warmup=6",
        "model.dawid_structure_updates=3",
    ]
    harness.run_cli(
        "fairseq-hydra-train",
        [
            "--config-dir",
            os.path.join(REPO_ROOT, "configs", "dawid"),
            "--config-name",
            "iwslt14_dawid",
            *overrides,
        ],
        cwd=tmp_path,
        timeout=300,
    )
    fused = str(tmp_path / "fused.pt")
    harness.run_cli(
        "lightcompress-convert", ["dawid-fuse", "-i", str(save / "checkpoint_last.pt"), "-o", fused]
    )
    bleu, hyps, _ = harness.generate(tiny_data, fused)
    assert bleu is not None and len(hyps) == 40
