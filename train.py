"""Pretrain a GPT with AdamS, AdamW, Lion, Adam-mini or the paper's baselines.

One process (CPU, CUDA, MPS):
    python train.py                                       # the embedded default: minutes on a laptop
    python train.py config/train_gpt2_small_adams.py --batch_size=8

DDP on one node of 8 GPUs:
    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adams.py
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

import torch
from adams_optim import build_optimizer

import checkpoint
import cli as cli_
import configurator
import data_parallel
import dataset
import plan
import reporting
import sample
from configurator import TrainConfig
from errors import Interrupted, UserError
from model import LanguageModel
from run_folder import RunFolder
from step import Guard, build_model, gradients, optimizer_kwargs


def get_lr(it: int, cfg: TrainConfig) -> float:
    """Linear warmup to learning_rate, then cosine (or linear) decay to min_lr at lr_decay_iters."""
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.lr_decay_iters:
        return cfg.min_lr
    progress = (it - cfg.warmup_iters) / max(1, cfg.lr_decay_iters - cfg.warmup_iters)
    remaining = 1.0 - progress if cfg.decay_shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr + remaining * (cfg.learning_rate - cfg.min_lr)


def check_memory(cfg: TrainConfig, data_vocab: int, device: torch.device, announce: bool) -> None:
    """Refuse, before anything is allocated, settings that cannot fit: a lower bound of what training needs
    (fp32 weights, gradients and one state tensor, and a fraction of the activations), against what the device
    has free, or on a CPU what the tightest of the machine and its cgroup limits (v1 or v2) leaves. A run this
    lets through may still run out of memory; that is one error line too (``main``). On a GPU plan.py says more."""
    free, source = data_parallel.free_memory(device)
    if cfg.init_from not in ("scratch", "auto"):
        return
    if free is None:
        if announce and device.type == "cpu":
            print(f"note: the memory this process may use is unknown ({source}); the batch is not checked against it")
        return
    d, layers, vocab = cfg.n_embd, cfg.n_layer, dataset.model_vocab(data_vocab)
    params = 12 * layers * d * d + (vocab + cfg.block_size) * d
    activations = cfg.batch_size * cfg.block_size * (layers * 8 * d + vocab)  # far below what a step keeps
    need = 4 * (3 * params + activations)
    if need > free:
        raise UserError(f"this model and batch need at least {need / 2**30:,.1f} GiB ({params:,} parameters, "
                        f"{cfg.batch_size} x {cfg.block_size} tokens a micro-step) and {free / 2**30:,.1f} GiB are free "
                        f"({source}); lower batch_size, block_size, n_embd or n_layer")


def main(cfg: TrainConfig, explicit: set[str] | None = None) -> dict:
    """Train (or, with eval_only, evaluate) as ``cfg`` says. Resuming, the run's own settings are the
    base and only the ``explicit`` keys of ``cfg`` (those a config file or the command line set)
    override them; None: the keys whose values differ from the defaults."""
    dist_ = data_parallel.setup(cfg.backend, cfg.device)
    try:
        with contextlib.ExitStack() as cleanup:  # the run folder's lock, held until the run ends
            return train(cfg, dist_, explicit, cleanup)
    except (torch.OutOfMemoryError, MemoryError) as e:
        raise UserError(f"out of memory on {dist_.device} ({str(e).splitlines()[0][:160]}); lower batch_size (and raise "
                        "gradient_accumulation_steps to keep the batch), block_size, or the model's size") from None
    except RuntimeError as e:
        if "can't allocate memory" not in str(e):
            raise
        raise UserError(f"out of memory on {dist_.device} ({str(e).splitlines()[0][-120:]}); lower batch_size (and "
                        "raise gradient_accumulation_steps to keep the batch), block_size, or the model's size") from None
    finally:
        data_parallel.teardown()
        torch.set_flush_denormal(False)  # leave the process as we found it (tests, notebooks call main)


def resume_config(cfg: TrainConfig, resume: dict, explicit: set[str] | None, world_size: int, announce: bool):
    """The config a resumed run continues with: the run's own, with the invocation's explicit keys on top."""
    if explicit is None:
        explicit = {k for k, v in vars(cfg).items() if v != getattr(TrainConfig(), k)}
    if resume.get("model_source", "scratch") != "scratch":  # a Hugging Face model's shape was never the config's
        explicit = explicit - set(configurator.MODEL_SHAPE)
    cfg, changed = configurator.resumed(resume.get("config", {}), cfg, explicit, f"out_dir '{cfg.out_dir}'")
    if cfg.fsdp and not torch.distributed.is_initialized() and "fsdp" not in explicit:  # a sharded run, resumed
        changed["fsdp"] = (True, False)  # without torchrun: unsharded
        cfg.fsdp = False
    configurator.check(cfg, world_size)
    if changed and announce:
        print("resuming with " + ", ".join(f"{k}={new!r} (the run had {old!r})" for k, (old, new) in changed.items()))
    return cfg


def train(cfg: TrainConfig, dist_: data_parallel.Dist, explicit: set[str] | None, cleanup: contextlib.ExitStack) -> dict:
    device, main_rank = dist_.device, dist_.is_main
    if cfg.init_from != "resume":
        cfg = configurator.per_process(cfg, dist_.world_size, explicit, dist_.is_main)
        configurator.check(cfg, dist_.world_size)  # (a resumed run's config is checked once merged with the run's)
    # the run's folder, opened once: its lock first, then the decision (resume its checkpoint, or start fresh,
    # writing nothing until the first step is taken: a run it replaces goes only once no input can fail this one)
    folder = RunFolder(cfg.out_dir, dist_, read_only=cfg.eval_only)
    cleanup.callback(folder.close)
    resume = folder.open(cfg.init_from, cfg.overwrite)
    if resume is not None:
        cfg = resume_config(cfg, resume, explicit, dist_.world_size, main_rank)
    if cfg.fsdp and not torch.distributed.is_initialized():
        raise UserError("fsdp=True shards over the processes that torchrun starts; launch with torchrun "
                        "--nproc_per_node=N, or drop --fsdp to train unsharded in one process")
    if device.type == "cpu":
        torch.set_flush_denormal(True)  # denormals slow CPU math many-fold as weights and grads shrink
    data = load_data(cfg, resume, main_rank)
    check_memory(cfg, data["vocab_size"], device, main_rank)
    # on a GPU the plan first, before anything is allocated (rank 0 plans for all); a resumed run fitted when it began
    if device.type == "cuda" and not cfg.eval_only and resume is None:
        data_parallel.agree(lambda: plan.refuse_if_unfit(cfg, dist_.world_size, device))
    raw_model, model, autocast, optimizer, scaler, dtype = build(cfg, dist_, data["vocab_size"], resume)
    progress = checkpoint.Progress()
    if resume is not None:
        progress = checkpoint.restore(resume, raw_model, optimizer, scaler, dist_)
        folder.truncate(progress.iter)
        if main_rank:
            print(f"resuming from iteration {progress.iter} ({checkpoint.latest(cfg.out_dir)})")
    source = resume["model_source"] if resume else "scratch" if cfg.init_from in ("scratch", "auto") else cfg.init_from
    meta = dict(config=configurator.as_dict(cfg), model_args=vars(raw_model.config).copy(), data_vocab=data["vocab_size"],
                model_type=resume.get("model_type", "gpt2") if resume else cfg.model, model_source=source,
                data=data["fingerprint"])
    resume = None  # free it
    micro_steps = cfg.gradient_accumulation_steps // dist_.world_size  # this rank's share of an iteration
    derived = dict(describe(cfg, meta["config"], raw_model, dist_, dtype, micro_steps) if main_rank else {},
                   data=data["fingerprint"])
    wandb = dict(project=cfg.wandb_project, name=cfg.wandb_run_name) if cfg.wandb_log else None
    begin = functools.partial(folder.begin, dict(config=meta["config"], derived=derived), wandb)
    if not folder.fresh and not cfg.eval_only:
        begin()
    for line in reporting.warnings(cfg, len(data["train"]), cfg.tokens_per_iter, progress.iter) if main_rank else []:
        print(f"warning: {line}")
    guard = Guard(optimizer, scaler, cfg.grad_clip, cfg.max_consecutive_skips, device)
    report = reporting.Report(cfg, folder, raw_model, guard, progress, cfg.tokens_per_iter, device, main_rank)
    params = [p for p in raw_model.parameters() if p.requires_grad]

    def batch(stream: int, it: int, index: int, split: str = "train"):
        return dataset.get_batch(data[split], cfg.seed, stream, it, index, cfg.batch_size, cfg.block_size,
                                 raw_model.config.vocab_size, device)

    def eval_and_save(it: int) -> None:
        report.read(it)  # the skips so far (the checkpoint counts them); a diverged run stops before it saves
        started = time.time()
        losses = evaluate(model, batch, cfg.eval_iters, dist_, autocast)
        report.evaluated(it, get_lr(it, cfg), losses, time.time() - started)
        if it > 0 and not cfg.eval_only and (losses["val"] < progress.best_val_loss or cfg.always_save_checkpoint):
            progress.best_val_loss = min(progress.best_val_loss, losses["val"])
            folder.save(raw_model, optimizer, scaler, progress, meta, cfg.keep_checkpoints, sharded=cfg.fsdp)

    # this rank's micro-batches of every iteration from here on, each drawn while the model runs on the one before
    batches = dataset.ahead(batch(dataset.TRAIN, it, micro * dist_.world_size + dist_.rank)
                            for it in itertools.count(progress.iter) for micro in range(micro_steps))
    model.train()
    try:
        if progress.iter == 0 or cfg.eval_only:  # a resumed run evaluated this iteration before it stopped
            eval_and_save(progress.iter)
        for it in range(progress.iter, progress.iter if cfg.eval_only else cfg.max_iters):
            lr = get_lr(it, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr * group.get("lr_scale", 1.0)
            loss, norm = gradients(model, itertools.islice(batches, micro_steps), micro_steps, autocast, scaler,
                                   optimizer, params, cfg.grad_clip)
            # the mean loss over the ranks (the norm is the same on every rank): no rank waits for its value
            loss, norm = data_parallel.all_reduce_sum(torch.stack([loss.float(), norm.float()])) / dist_.world_size
            guard.step(it, loss, norm)  # skipped if the loss or norm is not finite (a device flag, where it can)
            optimizer.zero_grad(set_to_none=True)
            progress.iter, progress.tokens = it + 1, progress.tokens + cfg.tokens_per_iter
            if not folder.begun:
                begin()  # the run is under way: it takes its folder
            report.step(it, lr)  # at log intervals, the one wait for the device
            if progress.iter % cfg.eval_interval == 0 or progress.iter == cfg.max_iters:
                eval_and_save(progress.iter)
        if not folder.begun and not cfg.eval_only:  # max_iters=0: an evaluation, then done
            begin()
    except BaseException as e:  # the log's last line says why the run stopped (else it was killed: metrics.py)
        with contextlib.suppress(Exception):
            report.stopped(e)
        raise
    finally:
        report.close()  # before any error message, so that message is the last line
    if not cfg.eval_only:
        finish(cfg, raw_model, dist_, data["vocab_size"], folder)
        folder.end("finished", progress.iter)
    folder.finish()
    return dict(report.summary, skipped_steps=progress.skipped_steps)


def load_data(cfg: TrainConfig, resume: dict | None, main_rank: bool) -> dict:
    """The run's token files; a resumed run's must be those it began on (or the user allowed others: said)."""
    data = dataset.load(cfg.data_dir, cfg.dataset, cfg.block_size)
    said = resume and not cfg.eval_only and dataset.check_unchanged(  # (an evaluation may take any data)
        resume.get("data"), data["fingerprint"], f"{cfg.data_dir}/{cfg.dataset}", cfg.allow_new_data)
    if said and main_rank:
        print(f"warning: {said}")
    return data


def build(cfg: TrainConfig, dist_: data_parallel.Dist, data_vocab: int, resume: dict | None):
    """(the model, the module a step calls, its autocast, the optimizer, the loss scaler, the dtype)."""
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    raw_model = build_model(cfg, data_vocab, resume)
    if not cfg.fsdp:  # (FSDP2 moves each block to the GPU as it shards it: the unsharded model is never there whole)
        raw_model = raw_model.to(dist_.device)
    torch.manual_seed(cfg.seed + dist_.rank)  # dropout differs across ranks
    dtype = cfg.dtype
    if dtype == "auto":
        dtype = "bfloat16" if dist_.device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    model, autocast = data_parallel.parallelize(raw_model, raw_model.blocks, dist_, getattr(torch, dtype),
                                                fsdp=cfg.fsdp, compile=cfg.compile)
    optimizer = build_optimizer(cfg.optimizer, raw_model, implementation=cfg.implementation,
                                embedding_lr_scale=cfg.embedding_lr_scale, **optimizer_kwargs(cfg, announce=dist_.is_main))
    scaler = torch.amp.GradScaler(dist_.device.type, enabled=(dtype == "float16"))
    return raw_model, model, autocast, optimizer, scaler, dtype


def finish(cfg: TrainConfig, model: LanguageModel, dist_: data_parallel.Dist, data_vocab: int, folder: RunFolder) -> None:
    """The end of a run: a sample of what the model learned, and where the run's files are."""
    if cfg.sample_tokens and (dist_.is_main or cfg.fsdp):  # under FSDP every rank takes part in the forward
        text = sample.after_training(model, dist_.device, cfg.seed, data_vocab, cfg.sample_tokens)
        if dist_.is_main:
            print(f"\n--- sample ---\n{text}\n--------------")
    if dist_.is_main:
        print(f"metrics: {folder.log_path}\ncheckpoint: {checkpoint.latest(cfg.out_dir)}\nconfig: {Path(cfg.out_dir) / 'config.json'}")


@torch.no_grad()
def evaluate(model, batch, eval_iters: int, dist_: data_parallel.Dist, autocast) -> dict[str, float]:
    """Mean loss on the validation and the training data, over the same ``eval_iters`` batches
    every time (``batch(stream, it, index, split)``); each rank computes its share. Every rank runs
    the same number of forwards (a sharded model gathers its weights in each), whatever eval_iters:
    where the batches do not split evenly, a rank's last one is a repeat that is not counted."""
    model.eval()
    out = {}
    for split, stream in (("val", dataset.EVAL_VAL), ("train", dataset.EVAL_TRAIN)):
        total = torch.zeros((), device=dist_.device, dtype=torch.float64)
        for k in range(dist_.rank, -(-eval_iters // dist_.world_size) * dist_.world_size, dist_.world_size):
            with autocast:
                loss = model(*batch(stream, 0, min(k, eval_iters - 1), split))[1].double()
            total += loss if k < eval_iters else 0.0
        out[split] = data_parallel.all_reduce_sum(total).item() / eval_iters
    model.train()
    return out


def describe(cfg: TrainConfig, config: dict, model: LanguageModel, dist_: data_parallel.Dist, dtype: str,
             micro_steps: int) -> dict:
    """Print the config and what follows from it; returns the latter, for the run's config.json."""
    tokens_per_iter = cfg.tokens_per_iter
    params = model.num_params()
    tokens_per_param = tokens_per_iter * cfg.max_iters / params  # the run's length, as results/ measures it
    derived = dict(tokens_per_iter=tokens_per_iter, parameters=params, tokens_per_param=tokens_per_param,
                   world_size=dist_.world_size, micro_steps_per_rank=micro_steps, device=str(dist_.device), dtype=dtype,
                   hardware=data_parallel.hardware(dist_.device), torch=torch.__version__, threads=torch.get_num_threads())
    print("config:", json.dumps(config))
    print(f"{params:,} parameters (without position embeddings); {tokens_per_iter:,} tokens per "
          f"iteration = {cfg.gradient_accumulation_steps} accumulation x {cfg.batch_size} batch x {cfg.block_size} "
          f"tokens, {micro_steps} micro-steps on each of {dist_.world_size} rank(s); {dist_.device}, {dtype}; "
          f"{cfg.max_iters:,} iterations = {tokens_per_param:,.2f} tokens per parameter")
    if cfg.optimizer == "adams":
        print("note: AdamS usually wants a lower lr than AdamW: start at a quarter to half of a tuned AdamW lr, then "
              "scan x2 (README.md, 'AdamS in your own code')")
    return derived


def cli(argv: list[str]) -> int:
    """The command line: the run, or one ``error:`` line (under torchrun, from rank 0 alone) and a non-zero exit."""
    # what the optimizer and its groups say, once: from rank 0 under torchrun (the others warn only)
    logging.basicConfig(level=logging.INFO if os.environ.get("RANK", "0") == "0" else logging.WARNING, format="%(message)s")
    cfg = None

    def run():
        nonlocal cfg
        planning, rest = plan.take_options(argv)
        cfg, explicit = configurator.load_explicit(rest)
        if planning:
            return plan.main(cfg, **planning) and 0
        try:
            main(cfg, explicit)
        except KeyboardInterrupt:
            last = checkpoint.latest(cfg.out_dir)
            where = (f"the last checkpoint is {last}; continue with: python train.py --init_from=resume "
                     f"--out_dir={cfg.out_dir}") if last else "no checkpoint was written yet"
            raise Interrupted(f"interrupted; {where}") from None

    return cli_.run(run)


if __name__ == "__main__":
    data_parallel.exit_process(cli(sys.argv[1:]))
