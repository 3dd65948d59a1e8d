"""Smartformer's rank search (lightcompress.search, task translation_smartformer)."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from harness import (
    build_without_data,
    generate,
    make_parallel_corpus,
    preprocess,
    run_cli,
    tiny_arch_args,
    train,
)
from torch import nn

from lightcompress.errors import ConfigError
from lightcompress.modules import CPLinear, count_unique_params
from lightcompress.search import (
    A2CAgent,
    RankSearch,
    SearchConfig,
    find_search_layers,
    replace_parameters,
    reward,
)
from lightcompress.tasks.translation_smartformer import parse_ranks

# ------------------------------------------------------------------ units


@pytest.mark.parametrize("warm", [False, True], ids=["tensorly", "warm-als"])
def test_rank_change_keeps_the_function_as_well_as_the_fit_allows(warm):
    torch.manual_seed(0)
    layer = CPLinear(32, 24, rank=12, heads=4)
    x = torch.randn(50, 32)
    w_old, y_old = layer.to_dense().detach(), layer(x).detach()
    kept = layer.set_rank(6, warm_start=warm)
    w_new = layer.to_dense().detach()
    # the new map is the re-fitted dense weight, and its error is what the fit reports
    torch.testing.assert_close(layer(x) - y_old, x @ (w_new - w_old).T, atol=1e-4, rtol=1e-4)
    rel = float((w_new - w_old).pow(2).sum() / w_old.pow(2).sum())
    assert rel == pytest.approx(1 - kept, abs=1e-4)
    assert 0 < rel < 0.9
    # at the CP bound (a rank able to represent any (24, 4, 8) tensor) the function is kept
    # as well as ALS converges
    layer.set_rank(32, n_iter_max=500, warm_start=warm)
    torch.testing.assert_close(layer(x), y_old + x @ (w_new - w_old).T, atol=5e-3, rtol=5e-3)


def test_warm_started_als_recovers_an_exact_cp_tensor_as_tensorly_does():
    from lightcompress.modules.cp import cp_als, cp_factors, cp_to_dense

    g = torch.Generator().manual_seed(1)
    true = [torch.randn(n, 3, generator=g, dtype=torch.float64) for n in (12, 4, 6)]
    w = cp_to_dense(*true).float()  # (12, 24): an exact rank-3 CP tensor
    _, kept_ref = cp_factors(w, 3, heads=4)
    start = [f + 0.3 * torch.randn(f.shape, generator=g, dtype=torch.float64) for f in true]
    factors, kept = cp_als(w.reshape(12, 4, 6), start, n_iter_max=500, tol=1e-14)
    assert kept_ref > 1 - 1e-6 and kept > 1 - 1e-6
    torch.testing.assert_close(cp_to_dense(*factors), w, atol=1e-4, rtol=1e-4)


class _Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.cp = CPLinear(16, 8, rank=4, heads=2)
        self.out = nn.Linear(8, 3)

    def forward(self, x):
        return self.out(self.cp(x))


def _step(model, opt):
    opt.zero_grad()
    model(torch.randn(5, 16)).pow(2).sum().backward()
    opt.step()


def test_after_a_rank_change_the_optimizer_updates_exactly_the_new_parameters():
    torch.manual_seed(0)
    model = _Toy()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    _step(model, opt)
    kept_state = opt.state[model.out.weight]
    old = [model.cp.w0, model.cp.w1, model.cp.w2]
    model.cp.set_rank(2)
    new = [model.cp.w0, model.cp.w1, model.cp.w2]
    mapping = {id(o): n for o, n in zip(old, new)}
    assert replace_parameters(opt, mapping) == 3
    held = [p for g in opt.param_groups for p in g["params"]]
    assert [id(p) for p in held] == [id(p) for p in model.parameters()]
    assert not any(p in opt.state for p in old)
    assert opt.state[model.out.weight] is kept_state  # the other parameters keep their moments
    before = [p.detach().clone() for p in new]
    _step(model, opt)
    assert all(not torch.equal(b, p) for b, p in zip(before, new))
    assert all(opt.state[p]["step"] == 1 for p in new)


@pytest.mark.parametrize("flat", [True, False])
def test_fp16_optimizer_masters_are_rebuilt_with_the_kept_moments(flat):
    from argparse import Namespace

    from fairseq.optim import FP16Optimizer
    from fairseq.optim.adam import FairseqAdam

    torch.manual_seed(0)
    model = _Toy()
    params = list(model.parameters())
    cfg = Namespace(
        lr=[0.01],
        adam_betas="(0.9, 0.98)",
        adam_eps=1e-8,
        weight_decay=0.0,
        use_old_adam=False,
        fp16_adam_stats=False,
        tpu=False,
    )
    if flat:
        total = sum(p.numel() for p in params)
        master = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]).float())
        master.grad = torch.zeros(total)
        masters = {None: master}  # keyed by device index, as fairseq does (None: CPU)
        inner = FairseqAdam(cfg, [master])
    else:
        masters = FP16Optimizer.build_fp32_params(cfg, params, flatten=False)
        inner = FairseqAdam(cfg, masters)
    opt = FP16Optimizer(
        Namespace(
            optimizer=cfg,
            common=Namespace(
                fp16_init_scale=1,
                fp16_scale_window=128,
                fp16_scale_tolerance=0.0,
                threshold_loss_scale=None,
                min_loss_scale=1e-4,
                fp16_no_flatten_grads=not flat,
                fp16=True,
                bf16=False,
            ),
        ),
        params,
        inner,
        masters,
    )
    opt.backward(model(torch.randn(5, 16)).pow(2).sum())
    opt.step()
    topt = inner._optimizer
    state_before = (
        {
            k: v.clone() if torch.is_tensor(v) else v
            for k, v in next(iter(topt.state.values())).items()
        }
        if flat
        else None
    )
    n_cp_old = sum(p.numel() for p in (model.cp.w0, model.cp.w1, model.cp.w2))
    old = [model.cp.w0, model.cp.w1, model.cp.w2]
    model.cp.set_rank(2)
    mapping = {id(o): n for o, n in zip(old, (model.cp.w0, model.cp.w1, model.cp.w2))}
    assert replace_parameters(opt, mapping) == 3
    assert [id(p) for p in opt.fp16_params] == [id(p) for p in model.parameters()]
    if flat:
        (new_master,) = opt.fp32_params.values()
        assert new_master.numel() == sum(p.numel() for p in model.parameters())
        n_cp_new = sum(p.numel() for p in (model.cp.w0, model.cp.w1, model.cp.w2))
        state = topt.state[new_master]
        for key in ("exp_avg", "exp_avg_sq"):
            # the CP factors come first: new zeros, then the kept parameters' moments, moved
            assert torch.equal(state[key][:n_cp_new], torch.zeros(n_cp_new))
            torch.testing.assert_close(state[key][n_cp_new:], state_before[key][n_cp_old:])
        torch.testing.assert_close(
            new_master.data, torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        )
    else:
        assert len(opt.fp32_params) == len(params)
        for p16, p32 in zip(model.parameters(), opt.fp32_params):
            torch.testing.assert_close(p16.detach().float(), p32.detach())
    before = model.cp.w0.detach().clone()
    opt.zero_grad()
    opt.backward(model(torch.randn(5, 16)).pow(2).sum())
    opt.step()
    assert not torch.equal(before, model.cp.w0.detach())


def test_agent_learns_a_bandit():
    torch.manual_seed(0)
    agent = A2CAgent(state_dim=8, num_actions=4, lr=1e-2, gamma=0.0, explore=0.5, seed=3)
    state = torch.randn(8)
    for _ in range(300):
        a = agent.act(state)
        agent.update(state, a, 1.0 if a == 2 else -1.0, state)
    prob = agent.probabilities(state)
    assert int(prob.argmax()) == 2 and float(prob[2]) > 0.8


def test_reward_follows_eq_27_with_the_tolerance():
    # loss (lower is better): within (1 + eps) of the last value -> last / now, else -now / last
    assert reward(2.0, 2.0, 0.1, False) == pytest.approx(1.0)
    assert reward(2.1, 2.0, 0.1, False) == pytest.approx(2.0 / 2.1)
    assert reward(2.5, 2.0, 0.1, False) == pytest.approx(-1.25)
    # BLEU (higher is better): within (1 - eps) -> now / before, else -before / now
    assert reward(30.0, 20.0, 0.1, True) == pytest.approx(1.5)
    assert reward(19.0, 20.0, 0.1, True) == pytest.approx(0.95)
    assert reward(10.0, 20.0, 0.1, True) == pytest.approx(-2.0)
    assert reward(0.0, 0.0, 0.1, True) == pytest.approx(1.0)


def _tiny_smartformer(rank=8, extra=()):
    return build_without_data(
        "smartformer_iwslt_de_en",
        40,
        [*tiny_arch_args("smartformer_iwslt_de_en")[2:], "--sm-rank", str(rank), *extra],
    )


@pytest.mark.parametrize(
    "cfg, message",
    [
        (SearchConfig(ranks=[4, 64]), "exceed the CP bound 32"),
        (SearchConfig(ranks=[0, 4]), "integers >= 1"),
        (SearchConfig(ranks=[]), "empty"),
        (SearchConfig(ranks=[4], epsilon=0.0), "epsilon must be in (0, 1]"),
        (SearchConfig(ranks=[4], epsilon=1.5), "epsilon must be in (0, 1]"),
        (SearchConfig(ranks=[4], interval=0), "interval must be an integer >= 1"),
    ],
)
def test_bad_search_settings_are_one_config_error(cfg, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RankSearch(_tiny_smartformer(), cfg)


def test_rank_list_parsing():
    assert parse_ranks("16, 32,64") == [16, 32, 64]
    for bad in ("", " , ", "16,x"):
        with pytest.raises(ConfigError):
            parse_ranks(bad)


def test_search_layers_pair_decoder_self_and_cross_attention():
    layers = find_search_layers(_tiny_smartformer())
    assert [(l.name, len(l.projections)) for l in layers] == [
        ("encoder.layers.0", 3),
        ("encoder.layers.1", 3),
        ("decoder.layers.0", 6),
        ("decoder.layers.1", 6),
    ]
    layers = find_search_layers(_tiny_smartformer(extra=["--sm-attn", "self"]))
    assert [len(l.projections) for l in layers] == [3, 3, 3, 3]


def test_search_state_round_trips_and_a_checkpoint_resizes_cp_layers():
    torch.manual_seed(0)
    model = _tiny_smartformer()
    search = RankSearch(model, SearchConfig(ranks=[2, 4], settle=2, seed=5))
    for metric, update in ((5.0, 5), (4.8, 10), (4.7, 15)):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        search.accumulate()
        decision, mapping = search.decide(model, metric, update)
        assert decision.rank in (2, 4) and (mapping or decision.rank == decision.rank_before)
    ranks = search.current_ranks()
    assert sorted(set(ranks.values()) - {8})  # some layer changed rank
    state = search.state_dict()
    # a fresh model at the flags' rank loads the searched weights (CP layers resized) ...
    fresh = _tiny_smartformer()
    fresh.load_state_dict(model.state_dict())
    x = torch.randint(4, 40, (2, 5))
    lengths = torch.tensor([5, 5])
    model.eval(), fresh.eval()
    torch.testing.assert_close(fresh(x, lengths, x)[0], model(x, lengths, x)[0])
    # ... and the search continues exactly where it was
    again = RankSearch(fresh, SearchConfig(ranks=[2, 4], settle=2, seed=5))
    again.load_state_dict(state)
    g = torch.Generator().manual_seed(9)
    for m in (model, fresh):
        for p in m.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        g.manual_seed(9)
    search.accumulate(), again.accumulate()
    d1, _ = search.decide(model, 4.6, 20)
    d2, _ = again.decide(fresh, 4.6, 20)
    assert (d1.layer, d1.rank, d1.reward) == (d2.layer, d2.rank, d2.reward)
    wrong = RankSearch(_tiny_smartformer(), SearchConfig(ranks=[2, 4, 8], settle=2, seed=5))
    with pytest.raises(ConfigError, match="another action space"):
        wrong.load_state_dict(state)


# ------------------------------------------------------------------ fairseq-train


@pytest.fixture(scope="module")
def data_bin(tmp_path_factory):
    root = tmp_path_factory.mktemp("rank_search")
    make_parallel_corpus(root / "raw", n_train=300, n_valid=30, n_test=20)
    return str(preprocess(str(root / "raw"), str(root / "bin")))


SEARCH = [
    "--task",
    "translation_smartformer",
    "--sm-search",
    "--sm-search-ranks",
    "2,4",
    "--sm-search-interval",
    "4",
    "--sm-search-settle",
    "2",
    "--save-interval-updates",
    "8",
    "--update-freq",
    "2",
    "--sm-search-valid-batches",
    "2",
]
MODEL = [*tiny_arch_args("smartformer_iwslt_de_en"), "--sm-rank", "8"]


def _decisions(save_dir):
    with open(os.path.join(save_dir, "rank_search.jsonl")) as f:
        records = [json.loads(line) for line in f]
    for r in records:
        r.pop("seconds")
    return records


def test_search_in_fairseq_train_decides_and_its_checkpoint_decodes(data_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    proc = train(data_bin, save, MODEL, extra=SEARCH, max_epoch=None, max_update=16)
    log = proc.stdout + proc.stderr
    records = _decisions(save)
    assert len(records) >= 2 and log.count("rank search | update") == len(records)
    assert records[0]["reward"] is None and records[1]["reward"] is not None
    assert all(r["rank"] in (2, 4) for r in records if not r["done"])
    assert records[-1]["params"] < records[0]["params"] or records[0]["rank"] != 8
    # the checkpoint holds the chosen ranks and decodes without the search (plain task)
    state = torch.load(os.path.join(save, "checkpoint_last.pt"), weights_only=True)
    saved_rank = state["model"]["encoder.layers.0.self_attn.q_proj.w0"].shape[1]
    ranks = state["task_state"]["rank_search"]["layer_ranks"]
    assert saved_rank == ranks[0] and set(ranks) != {8}
    ckpt = os.path.join(save, "checkpoint_last.pt")
    bleu, hyps, _ = generate(data_bin, ckpt, extra=["--task", "translation"])
    # (16 updates: the model is far from trained, fairseq-generate prints no line for the few
    # sentences it finalizes empty)
    assert bleu is not None and len(hyps) >= 10
    from fairseq import checkpoint_utils

    (model,), _ = checkpoint_utils.load_model_ensemble([ckpt])
    assert [layer.rank for layer in find_search_layers(model)] == ranks
    counted = json.loads(run_cli("lightcompress-params", ["--path", ckpt]).stdout)
    assert counted["total"] == records[-1]["params"] == count_unique_params(model)
    # ... and scripts/measure_speed.sh times it (its own fairseq loading path)
    speed = subprocess.run(
        [
            os.path.join(os.path.dirname(__file__), "..", "scripts", "measure_speed.sh"),
            "--path",
            f"searched={ckpt}",
            "--data",
            data_bin,
            "--num-sentences",
            "4",
            "--src-len",
            "5",
            "--runs",
            "1",
            "--warmup",
            "0",
            "--beam",
            "2",
            "--json",
            str(tmp_path / "speed.json"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
        check=False,
    )
    assert speed.returncode == 0, speed.stderr[-3000:]
    timed = json.loads((tmp_path / "speed.json").read_text())["models"][0]
    assert timed["params"] == counted["total"] and timed["tokens_per_s"] > 0
    # the decisions plot
    script = os.path.join(os.path.dirname(__file__), "..", "scripts", "plot_rank_search.py")
    png = tmp_path / "search.png"
    log = os.path.join(save, "rank_search.jsonl")
    done = subprocess.run(
        [sys.executable, script, log, "--out", str(png)],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"{len(records)} decisions" in done.stdout
    bad = subprocess.run(
        [sys.executable, script, ckpt, "--out", str(tmp_path / "b.png")],
        check=False,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b.png").exists()


def test_killed_search_resumes_with_the_same_decisions(data_bin, tmp_path):
    whole, cut = str(tmp_path / "whole"), str(tmp_path / "cut")
    train(data_bin, whole, MODEL, extra=SEARCH, max_epoch=None, max_update=24)
    train(data_bin, cut, MODEL, extra=SEARCH, max_epoch=None, max_update=14)
    # killed at update 14: what is left is the checkpoint of update 8 and a log that already
    # holds the decision of update 12
    (at_8,) = glob.glob(os.path.join(cut, "checkpoint_*_8.pt"))
    shutil.copy(at_8, os.path.join(cut, "checkpoint_last.pt"))
    assert len(_decisions(cut)) == 3
    proc = train(data_bin, cut, MODEL, extra=SEARCH, max_epoch=None, max_update=24)
    assert "rank search resumed" in proc.stdout + proc.stderr
    resumed, reference = _decisions(cut), _decisions(whole)
    assert len(resumed) == len(reference) == 6
    # the same decisions: layers, actions, ranks, settled layers. fairseq's own mid-epoch resume
    # is not bitwise identical on CPU (the validation loss of plain translation training resumed
    # at update 8 differs in the third digit at update 12), so the metric and the reward it
    # gives are compared to that precision.
    keys = ("update", "layer", "action", "rank_before", "rank", "settled", "done", "ranks")
    assert [[r[k] for k in keys] for r in resumed] == [[r[k] for k in keys] for r in reference]
    for a, b in zip(resumed, reference):
        assert a["metric"] == pytest.approx(b["metric"], rel=5e-3)
        assert (a["reward"] is None) == (b["reward"] is None)
        if a["reward"] is not None:
            assert a["reward"] == pytest.approx(b["reward"], rel=5e-3)


def test_bad_search_flags_end_fairseq_train_with_one_line(data_bin, tmp_path):
    for flags, message in (
        (["--sm-search-epsilon", "0"], "epsilon must be in (0, 1]"),
        (["--sm-search-ranks", "4,64"], "exceed the CP bound 32"),
    ):
        proc = train(
            data_bin,
            str(tmp_path / "bad"),
            MODEL,
            extra=[*SEARCH, *flags],
            max_update=2,
            check=False,
        )
        assert proc.returncode == 2
        assert message in proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr
        assert not os.path.exists(tmp_path / "bad" / "checkpoint_last.pt")


def test_epoch_interval_decides_at_the_first_update_of_every_nth_epoch(data_bin, tmp_path):
    save = str(tmp_path / "ckpt")
    at = SEARCH.index("--update-freq")
    flags = SEARCH[:at] + SEARCH[at + 2 :]
    flags += ["--sm-search-unit", "epochs", "--sm-search-interval", "1"]
    proc = train(data_bin, save, MODEL, extra=flags, max_epoch=3)
    records = _decisions(save)
    # 300 pairs at --max-tokens 300: 9 updates an epoch; epochs 2 and 3 begin after 9 and 18
    per_epoch = int(re.findall(r"\| train \| epoch 001 \|.*?num_updates (\d+)", proc.stdout)[0])
    assert [r["epoch"] for r in records] == [2, 3]
    assert [r["update"] for r in records] == [per_epoch + 1, 2 * per_epoch + 1]


def test_cpac_heads_that_do_not_split_the_width_end_fairseq_train_with_one_line(data_bin, tmp_path):
    spec = "encoder.layers.*.self_attn.[qkv]_proj = cp(rank=4, heads=3)"
    proc = train(
        data_bin,
        str(tmp_path / "bad"),
        [*MODEL, "--lc-spec", spec],
        extra=SEARCH,
        max_update=2,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "divisible by heads=3" in proc.stderr.strip().splitlines()[-1]
