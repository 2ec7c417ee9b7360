"""Pretrain a GPT with AdamS, AdamW, Lion, Adam-mini or the paper's baselines.

One process (CPU, CUDA, MPS):
    python train.py                                       # the embedded default: minutes on a laptop
    python train.py config/train_gpt2_small_adams.py --batch_size=8

DDP on one node of 8 GPUs:
    torchrun --standalone --nproc_per_node=8 train.py config/train_gpt2_small_adams.py
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import shutil
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

import checkpoint
import configurator
import dataset
import distributed
import faults
from configurator import TrainConfig
from errors import UserError
from model import GPT, GPTConfig
from optim import build_optimizer, hyperparameters

# Dense bf16/fp16 tensor-core peak FLOP/s, from the vendors' data sheets, for the MFU estimate.
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12, "4090": 165e12}


def get_lr(it: int, cfg: TrainConfig) -> float:
    """Linear warmup to learning_rate, then cosine decay to min_lr at lr_decay_iters."""
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.lr_decay_iters:
        return cfg.min_lr
    progress = (it - cfg.warmup_iters) / max(1, cfg.lr_decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (cfg.learning_rate - cfg.min_lr)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((flops for key, flops in PEAK_FLOPS.items() if key in name), None)


def build_model(cfg: TrainConfig, data_vocab: int, resume_state: dict | None) -> GPT:
    if resume_state is not None:  # the weights are loaded once the model is wrapped (FSDP shards them)
        return GPT(GPTConfig(**resume_state["model_args"]))
    if cfg.init_from in ("scratch", "auto"):  # auto with no checkpoint yet starts from scratch
        return GPT(GPTConfig(block_size=cfg.block_size, vocab_size=dataset.model_vocab(data_vocab), n_layer=cfg.n_layer,
                             n_head=cfg.n_head, n_embd=cfg.n_embd, dropout=cfg.dropout, bias=cfg.bias))
    try:
        model = GPT.from_pretrained(cfg.init_from, dropout=cfg.dropout)
    except OSError as e:
        raise UserError(f"init_from='{cfg.init_from}' is neither 'scratch', 'resume', nor a GPT-2 name or local "
                        f"Hugging Face directory that can be loaded here ({e.__class__.__name__})") from e
    if cfg.block_size > model.config.block_size:
        raise UserError(f"block_size={cfg.block_size} is longer than {cfg.init_from}'s {model.config.block_size}")
    if cfg.block_size < model.config.block_size:
        model.crop_block_size(cfg.block_size)
    for key in ("n_layer", "n_head", "n_embd", "bias"):
        setattr(cfg, key, getattr(model.config, key))  # the checkpoint decides the architecture
    return model


def optimizer_kwargs(cfg: TrainConfig) -> dict:
    """The config's optimizer settings that the chosen optimizer takes (SGD has no betas, ...)."""
    candidates = dict(lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay,
                      eps=cfg.eps, bias_correction=cfg.bias_correction)
    accepted = hyperparameters(cfg.optimizer)
    return {k: v for k, v in candidates.items() if k in accepted}


def main(cfg: TrainConfig) -> dict:
    dist_ = distributed.setup(cfg.backend, cfg.device)
    try:
        return train(cfg, dist_)
    finally:
        distributed.teardown()
        torch.set_flush_denormal(False)  # leave the process as we found it (tests, notebooks call main)


def prepare_out_dir(cfg: TrainConfig, dist_: distributed.Dist) -> dict | None:
    """Check out_dir, decide between resuming and starting fresh; return the checkpoint to resume."""
    out_dir = Path(cfg.out_dir)
    metrics_path = out_dir / "metrics.jsonl"
    has_checkpoint = checkpoint.latest(out_dir) is not None
    if cfg.init_from == "resume" or (cfg.init_from == "auto" and has_checkpoint):
        return checkpoint.load(out_dir)
    if (has_checkpoint or metrics_path.exists()) and not cfg.overwrite and cfg.init_from != "auto":
        raise UserError(f"out_dir '{out_dir}' already holds a run; continue it with --init_from=resume, "
                        "choose another --out_dir, or pass --overwrite=True to replace it")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write_test.{dist_.rank}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise UserError(f"out_dir '{out_dir}' is not writable ({e.strerror}); choose another --out_dir") from e
    distributed.barrier()  # every rank has looked before rank 0 clears anything
    if dist_.is_main:  # a fresh start: what is left here is a replaced run, or a log with no checkpoint
        shutil.rmtree(out_dir / checkpoint.FOLDER, ignore_errors=True)
        metrics_path.unlink(missing_ok=True)
    distributed.barrier()
    return None


def rng_states(device: torch.device) -> dict:
    state = dict(python=random.getstate(), numpy=np.random.get_state(), torch=torch.get_rng_state())
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_states(state: dict, device: torch.device) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def truncate_metrics(path: Path, last_iter: int) -> None:
    """Drop log lines past the checkpoint we resume from: those iterations will be run again."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["iter"] <= last_iter]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def train(cfg: TrainConfig, dist_: distributed.Dist) -> dict:
    configurator.check(cfg, dist_.world_size)
    device = dist_.device
    out_dir = Path(cfg.out_dir)
    metrics_path = out_dir / "metrics.jsonl"
    resume_state = prepare_out_dir(cfg, dist_)
    if device.type == "cpu":
        torch.set_flush_denormal(True)  # denormals slow CPU math many-fold as weights and grads shrink
    torch.manual_seed(cfg.seed)  # same initial weights on every rank
    data = dataset.load(cfg.data_dir, cfg.dataset, cfg.block_size)
    if resume_state is not None and resume_state["model_source"] == "scratch":
        checkpoint.check_shape(resume_state, configurator.as_dict(cfg), f"the checkpoint in {out_dir}")
    model = build_model(cfg, data["vocab_size"], resume_state).to(device)
    model_source = resume_state["model_source"] if resume_state else ("scratch" if cfg.init_from in ("scratch", "auto") else cfg.init_from)
    if data["vocab_size"] > model.config.vocab_size:
        raise UserError(f"the dataset's vocabulary ({data['vocab_size']}) is larger than the model's "
                        f"({model.config.vocab_size}); this checkpoint cannot read this data")
    if cfg.block_size > model.config.block_size:
        raise UserError(f"block_size={cfg.block_size} is longer than the checkpoint's {model.config.block_size}")
    torch.manual_seed(cfg.seed + dist_.rank)  # dropout differs across ranks

    dtype = cfg.dtype
    if dtype == "auto":
        dtype = "bfloat16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    ptdtype = getattr(torch, dtype)
    autocast = nullcontext() if dtype == "float32" else torch.autocast(device.type, dtype=ptdtype)
    scaler = torch.amp.GradScaler(device.type, enabled=(dtype == "float16"))

    if cfg.fsdp:  # shard each block, then the rest; FSDP casts the parameters itself
        if dtype != "float32":
            policy = MixedPrecisionPolicy(param_dtype=ptdtype, reduce_dtype=torch.float32)
            autocast = nullcontext()
        else:
            policy = MixedPrecisionPolicy()
        mesh = init_device_mesh(device.type, (dist_.world_size,))
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)

    optimizer = build_optimizer(cfg.optimizer, model, implementation=cfg.implementation, **optimizer_kwargs(cfg))
    start_iter, tokens_seen, best_val, skipped = 0, 0, float("inf"), 0
    if resume_state is not None and "dcp_path" in resume_state:
        # a sharded checkpoint: torch.distributed.checkpoint reshards it into this run's layout
        model_state, optim_state = get_state_dict(model, optimizer)
        checkpoint.load_sharded(resume_state["dcp_path"], model_state, optim_state)
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optim_state)
    elif resume_state is not None:
        # a full (unsharded) state dict fits any layout, FSDP's included
        set_state_dict(model, optimizer, model_state_dict=checkpoint.clean_state_dict(resume_state["model"]),
                       optim_state_dict=resume_state["optimizer"], options=StateDictOptions(full_state_dict=True))
    if resume_state is not None:
        scaler.load_state_dict(resume_state["scaler"])
        start_iter, tokens_seen = resume_state["iter_num"], resume_state["tokens"]
        best_val, skipped = resume_state["best_val_loss"], resume_state["skipped_steps"]
        ranks = resume_state["rng"]
        if len(ranks) == dist_.world_size:
            set_rng_states(ranks[dist_.rank], device)
        elif dist_.is_main:
            print(f"warning: the checkpoint has RNG states for {len(ranks)} ranks, this run has {dist_.world_size}; "
                  "dropout masks will differ from an uninterrupted run (batches will not)")
        if dist_.is_main:
            truncate_metrics(metrics_path, start_iter)
            print(f"resuming from iteration {start_iter} ({checkpoint.latest(out_dir)})")
        resume_state = None  # free it

    raw_model = model
    if cfg.compile:
        model = torch.compile(model)
    if dist_.world_size > 1 and not cfg.fsdp:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    micro_steps = cfg.gradient_accumulation_steps // dist_.world_size
    tokens_per_iter = cfg.gradient_accumulation_steps * cfg.batch_size * cfg.block_size
    peak = peak_flops(device)
    if dist_.is_main:
        derived = dict(tokens_per_iter=tokens_per_iter, parameters=raw_model.num_params(), world_size=dist_.world_size,
                       micro_steps_per_rank=micro_steps, device=str(device), dtype=dtype)
        (out_dir / "config.json").write_text(json.dumps(dict(config=configurator.as_dict(cfg), derived=derived), indent=2))
        print("config:", json.dumps(configurator.as_dict(cfg)))
        print(f"{raw_model.num_params():,} parameters (without position embeddings); {tokens_per_iter:,} tokens per "
              f"iteration = {cfg.gradient_accumulation_steps} accumulation x {cfg.batch_size} batch x "
              f"{cfg.block_size} tokens, {micro_steps} micro-steps on each of {dist_.world_size} rank(s); "
              f"{device}, {dtype}")

    wandb_run = None
    if cfg.wandb_log and dist_.is_main:
        import wandb

        wandb_run = wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name, config=configurator.as_dict(cfg))

    def log(record: dict) -> None:
        if not dist_.is_main:
            return
        with open(metrics_path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if wandb_run is not None:
            wandb_run.log(record, step=record["iter"])

    @torch.no_grad()
    def evaluate() -> dict[str, float]:
        """Mean loss over the same eval_iters batches every time; each rank computes its share."""
        model.eval()
        out = {}
        for split, stream in (("val", dataset.EVAL_VAL), ("train", dataset.EVAL_TRAIN)):
            total = torch.zeros((), device=device, dtype=torch.float64)
            for k in range(dist_.rank, cfg.eval_iters, dist_.world_size):
                x, y = dataset.get_batch(data[split], cfg.seed, stream, 0, k, cfg.batch_size, cfg.block_size,
                                 raw_model.config.vocab_size, device)
                with autocast:
                    _, loss = model(x, y)
                total += loss.double()
            out[split] = distributed.all_reduce_sum(total).item() / cfg.eval_iters
        model.train()
        return out

    def save(it: int) -> None:
        shards = [p.to_local() if isinstance(p, DTensor) else p for p in raw_model.parameters()]
        bad = torch.tensor(float(sum(not torch.isfinite(t).all() for t in shards)))
        if distributed.all_reduce_sum(bad).item():  # every rank decides alike
            raise UserError(f"iteration {it}: the parameters hold NaN/Inf; refusing to checkpoint them. "
                            f"The last good checkpoint is {checkpoint.latest(out_dir)}")
        rng = distributed.all_gather_object(rng_states(device))  # every rank's, for an exact resume
        meta = dict(scaler=scaler.state_dict(), iter_num=it, tokens=tokens_seen, best_val_loss=best_val,
                    skipped_steps=skipped, rng=rng, data_position=dict(seed=cfg.seed, iter=it),  # batches follow from these
                    config=configurator.as_dict(cfg), model_args=vars(raw_model.config).copy(), model_source=model_source)
        if cfg.fsdp:  # each rank writes its own shards
            model_state, optim_state = get_state_dict(raw_model, optimizer)
            checkpoint.save_sharded(out_dir, model_state, optim_state, meta, cfg.keep_checkpoints, dist_.is_main)
            return
        model_state, optim_state = get_state_dict(raw_model, optimizer,
                                                  options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if dist_.is_main:
            checkpoint.save(out_dir, dict(meta, model=model_state, optimizer=optim_state), keep=cfg.keep_checkpoints,
                            during_write=faults.save_hook(it))
        distributed.barrier()

    from tqdm import tqdm

    bar = tqdm(total=cfg.max_iters, initial=start_iter, disable=not dist_.is_main, dynamic_ncols=True,
               mininterval=1.0, desc=cfg.optimizer)
    start_time = time.time()
    window_start, window_tokens, clipped, consecutive_skips = time.time(), 0, 0, 0
    params = [p for p in raw_model.parameters() if p.requires_grad]
    summary = {}
    model.train()
    try:
        for it in range(start_iter, cfg.max_iters + 1):
            resumed_here = it == start_iter and start_iter > 0  # this eval and checkpoint already exist
            if (it % cfg.eval_interval == 0 or it == cfg.max_iters or cfg.eval_only) and not resumed_here:
                evals = evaluate()
                record = dict(iter=it, tokens=tokens_seen, lr=get_lr(it, cfg), val_loss=evals["val"],
                              train_loss=evals["train"], elapsed_s=time.time() - start_time)
                log(record)
                summary.update(val_loss=evals["val"], eval_train_loss=evals["train"], iter=it)
                if dist_.is_main:  # tqdm.write prints even when the bar is disabled
                    bar.write(f"iter {it}: val loss {evals['val']:.4f}, train loss {evals['train']:.4f}")
                if it > 0 and not cfg.eval_only and (evals["val"] < best_val or cfg.always_save_checkpoint):
                    best_val = min(best_val, evals["val"])
                    save(it)
            if it == cfg.max_iters or cfg.eval_only:
                break

            faults.at_iteration_start(it)
            lr = get_lr(it, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            loss_sum = torch.zeros((), device=device)
            for micro in range(micro_steps):
                index = micro * dist_.world_size + dist_.rank  # global micro-batch index
                x, y = dataset.get_batch(data["train"], cfg.seed, dataset.TRAIN, it, index, cfg.batch_size, cfg.block_size,
                                 raw_model.config.vocab_size, device)
                if cfg.fsdp:
                    model.set_requires_gradient_sync(micro == micro_steps - 1)  # reduce only on the last micro-step
                elif dist_.world_size > 1:
                    model.require_backward_grad_sync = micro == micro_steps - 1  # sync only on the last micro-step
                with autocast:
                    _, loss = model(x, y)
                    loss = faults.corrupt_loss(it, loss) / micro_steps  # DDP averages the ranks' gradients
                scaler.scale(loss).backward()
                loss_sum += loss.detach()
            faults.corrupt_grad(it, raw_model)
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
            if isinstance(grad_norm, DTensor):
                grad_norm = grad_norm.full_tensor()
            # one sync per step: the global mean loss, and the norm (identical on every rank after DDP)
            train_loss, norm = (distributed.all_reduce_sum(torch.stack([loss_sum, grad_norm.float()]))
                                / dist_.world_size).tolist()
            # With float16 the GradScaler owns overflowing gradients: it skips those steps itself.
            if not math.isfinite(train_loss) or (not math.isfinite(norm) and not scaler.is_enabled()):
                what = "loss" if not math.isfinite(train_loss) else "gradient norm"
                consecutive_skips += 1
                if cfg.nonfinite_policy == "abort" or consecutive_skips > cfg.max_consecutive_skips:
                    reason = "nonfinite_policy='abort'" if cfg.nonfinite_policy == "abort" else \
                        f"{consecutive_skips} non-finite steps in a row (max_consecutive_skips={cfg.max_consecutive_skips})"
                    raise UserError(f"iteration {it}: the {what} is {train_loss if what == 'loss' else norm}; stopping "
                                    f"({reason}). The last good checkpoint is {checkpoint.latest(out_dir)}: resume from "
                                    "it with a lower learning_rate, or check the data")
                skipped += 1
                if dist_.is_main:
                    bar.write(f"iter {it}: the {what} is not finite; step skipped ({consecutive_skips} in a row)")
                optimizer.zero_grad(set_to_none=True)
                scaler.update()
            else:
                consecutive_skips = 0
                clipped += int(cfg.grad_clip > 0 and norm > cfg.grad_clip)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
            tokens_seen += tokens_per_iter
            window_tokens += tokens_per_iter
            bar.update(1)

            done = it + 1
            if done % cfg.log_interval == 0 or done == cfg.max_iters:
                elapsed = time.time() - window_start
                tokens_per_s = window_tokens / elapsed
                mfu = raw_model.estimate_mfu(tokens_per_s, peak) if peak else None
                steps_in_window = cfg.log_interval if done % cfg.log_interval == 0 else done % cfg.log_interval
                record = dict(iter=done, tokens=tokens_seen, lr=lr, train_loss=train_loss, grad_norm=norm,
                              clip_frac=clipped / steps_in_window, skipped_steps=skipped, tokens_per_s=tokens_per_s,
                              mfu=mfu, elapsed_s=time.time() - start_time)
                log(record)
                summary["train_loss"] = train_loss
                postfix = dict(loss=f"{train_loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:,.0f}")
                if mfu is not None:
                    postfix["mfu"] = f"{100 * mfu:.1f}%"
                bar.set_postfix(postfix)
                window_start, window_tokens, clipped = time.time(), 0, 0
    finally:
        bar.close()  # before any error message, so that message is the last line

    if not cfg.eval_only and (dist_.is_main or cfg.fsdp):  # under FSDP every rank takes part in the forward
        prompt = torch.tensor([[10]], device=device)  # a newline
        sample = raw_model.eval().generate(prompt, 300, temperature=0.8, top_k=50,
                                           generator=torch.Generator(device=device).manual_seed(cfg.seed))
        if dist_.is_main:
            print("\n--- sample ---\n" + dataset.decode(sample[0].tolist(), data["vocab_size"]) + "\n--------------")
            print(f"metrics: {metrics_path}\ncheckpoint: {checkpoint.latest(out_dir)}\nconfig: {out_dir / 'config.json'}")
    if wandb_run is not None:
        wandb_run.finish()
    summary["skipped_steps"] = skipped
    return summary


def cli(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        main(configurator.load(argv))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
