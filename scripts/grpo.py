"""GRPO post-training on Countdown with AdamW, AdamS or Lion, through TRL's GRPOTrainer: the AdamS
paper's Figure 5 (TinyZero's R1-Zero replication), at CPU scale or at the paper's.

    python -m data.countdown.prepare && python train.py config/repro/countdown_sft.py   # a starting policy
    python export.py out/countdown_sft out/countdown_sft/hf
    python -m scripts.grpo out/countdown_sft/hf --evaluate-only                          # its test reward
    python -m scripts.grpo out/countdown_sft/hf --optimizer adams --lr 3e-5 --seed 1 --out out/grpo/adams_1
    python -m scripts.grpo out/countdown_sft/hf --compare --lr 1e-4 --seeds 1 2 3 --out out/grpo
    python -m scripts.grpo --table out/grpo/*/                                                    # start, best, final

    # the paper's scale (GPU): TinyZero's settings, on Qwen2.5-3B or DeepSeek-R1-Distill-Llama-8B
    python -m data.countdown.prepare --max-number 99 --rl-train 327680 --test 1024 --out data/countdown_tinyzero
    python -m scripts.grpo Qwen/Qwen2.5-3B --preset tinyzero --data data/countdown_tinyzero --compare --seeds 1 \
        --out out/grpo_tinyzero_qwen3b

``--preset cpu`` (the default) is a small-scale run for a CPU. ``--preset tinyzero``
is TinyZero's Countdown setup (Pan et al., 2025: its prompt and reward, and from its
scripts/train_tiny_zero.sh the batch, lengths and lr) on problems of its sizes (3 or 4 numbers up to
99) generated here, which are easier in structure than its Hub dataset's: each is solvable left to
right in the order its numbers are listed, with a target up to 100 (data/countdown/task.py). Trained
with GRPO as the veRL GRPO examples
shipped inside TinyZero set it (examples/grpo_trainer/*.sh: TinyZero's own script runs PPO, with a
critic), which the paper kept ("all other hyperparameters maintained as in the original project"):
AdamW lr 1e-6, β (0.9, 0.999), weight decay 0.01 (veRL's AdamW defaults); 256 prompts a rollout,
5 completions each (rollout.n), 4 optimizer steps of 64 prompts per rollout (ppo_mini_batch_size),
one pass (ppo_epochs 1), clip 0.2, gradient clip 1.0; the KL to the starting policy as a loss term
at 0.001 (use_kl_loss, the low-variance k3 estimator, as TRL's); responses of up to 1,024 tokens
sampled at temperature 1; a constant lr; TinyZero's prompt for base models; 15 epochs of the
training problems; the test set scored every 100 rollouts (400 steps). TinyZero's veRL counts its
micro-batch in prompts, ``--micro-batch`` here counts completions. Two of TRL's defaults that veRL
does not share are off, as TinyZero trains: ``use_bias_correction_kl`` (the KL term multiplied by the
importance ratio) and ``vllm_importance_sampling_correction`` (a correction for vLLM's own
log-probabilities); run.json records both. veRL clamps the k3 KL estimate to ±10, TRL does not. The batch is the preset's at
any process count that divides it (each process takes its share; run.json records
prompts_per_rollout, prompts_per_step, steps_per_rollout and epochs). Left as TRL has them: the
loss is TRL's token mean per micro-batch (``bnpo``, veRL's masked mean); TinyZero's entropy bonus
(0.001) has no TRL counterpart; and the KL term's sign. TRL adds β·KL to the loss, the penalty
GRPO defines (Shao et al., 2024: the objective subtracts it); the veRL inside TinyZero subtracts it
(verl/workers/actor/dp_actor.py: ``policy_loss - kl_loss * kl_loss_coef``), which rewards moving
away from the starting policy. We keep the defined penalty; at β = 0.001 either is a small term. On CUDA the policy trains in bf16
autocast with fp32 weights and optimizer state, with gradient checkpointing, and vLLM generates
(colocated, 40% of the GPU, TinyZero's share) where it is installed. An 8B policy with AdamW's
fp32 state needs about 128 GB before activations: more than one GPU holds (the paper ran it on
veRL's FSDP over several); under ``accelerate launch`` or torchrun the trainer builds our optimizer
when it builds its own (``create_optimizer``), after wrapping the model, so the launch's FSDP or
DeepSpeed settings shard it; every process trains and evaluates, and the first writes the run's files.
Any option given on the command line overrides the preset's value.

MODEL is any Hugging Face causal LM (a directory with a tokenizer, or a Hub name) (export.py writes one); for a
byte-level model the newline ends a completion. The optimizers follow the paper's rules
(Section 4.3): AdamW β (0.9, 0.999), weight decay 0.01, at ``--lr``; AdamS the same but β2 =
0.95; Lion 0.1x the lr, 10x the weight decay, β (0.95, 0.98), every parameter decaying (as veRL's
optimizer does). Each is built by us inside the trainer, at a constant learning rate.

GRPO (Shao et al., 2024): for every prompt, ``--generations`` completions are sampled; each
completion's advantage is its reward minus the group's mean, over the group's standard
deviation; the loss is the clipped policy-gradient surrogate averaged per sequence (TRL's
``loss_type="grpo"``), no KL term by default (``--beta``). The reward is TinyZero's rule
(data/countdown/task.py: 1 right, 0.1 well-formed, 0 none, on the last line of the completion up to
its end-of-sequence token; an expression too large to evaluate safely, such as ``9**9**9``, scores 0.1),
read from the completion's token ids the same way in training and in evaluation (``completion_text``).

Two curves, both by optimizer step: the mean reward of each step's sampled training rollouts, the
quantity the paper's Figure 5 plots ("mean critic scores": veRL's ``critic/score/mean``, logged by TRL
as ``reward`` at the step its rollout was sampled), and the greedy test reward: every ``--eval-every``
steps, and before the first, the policy answers the test problems greedily.

A run writes OUT/metrics.jsonl (kind 'eval': step, test_reward, test_accuracy; kind 'train':
TRL's logs, every step). ``--compare`` runs 3 optimizers x the seeds (skipping finished runs; ``--adams-lr``
adds AdamS at a learning rate of its own) and writes OUT/summary.csv and OUT/summary.png: both curves,
mean ± std over seeds (the training reward's as a trailing mean of SMOOTH rollouts), in two panels.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import warnings
from pathlib import Path

import torch

import cli
import contents
import folders
from data.countdown.prepare import read_problems
from data.countdown.task import Problem, prompt, score, tinyzero_prompt
from errors import UserError
from folders import read_json
from scripts import csv_bytes, figure_bytes

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "countdown"
COMPARED = ("adamw", "adams", "lion")


# Each preset's settings; the command line overrides any of them (see the module docstring).
PRESETS = {
    "cpu": dict(lr=1e-4, steps=200, epochs=None, prompts=16, generation_prompts=None, generations=8, micro_batch=None,
                max_completion_length=40, beta=0.0, loss_type="grpo", eval_every=10, template="short",
                gradient_checkpointing=False, test_problems=256),
    "tinyzero": dict(lr=1e-6, steps=None, epochs=15, prompts=64, generation_prompts=256, generations=5, micro_batch=8,
                     max_completion_length=1024, beta=0.001, loss_type="bnpo", eval_every=400, template="tinyzero",
                     gradient_checkpointing=True, test_problems=1024),
}


# TRL defaults that change the objective from the one TinyZero's veRL trains: off, as there (run.json records them)
AS_VERL = dict(use_bias_correction_kl=False, vllm_importance_sampling_correction=False)


def optimizer_spec(name: str, lr: float, weight_decay: float = 0.01) -> tuple[type, dict]:
    """(class, keyword arguments) by the paper's Section 4.3 rules, from AdamW's lr and weight decay."""
    from adams_optim import AdamS, Lion

    if name == "adamw":
        return torch.optim.AdamW, dict(lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    if name == "adams":
        return AdamS, dict(lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    if name == "lion":
        return Lion, dict(lr=0.1 * lr, betas=(0.95, 0.98), weight_decay=10 * weight_decay)
    raise UserError(f"--optimizer {name}: choose one of {', '.join(COMPARED)}")


def main_process() -> bool:
    """Whether this is the process that writes the run's files: rank 0 of a launch, or the only one."""
    return int(os.environ.get("RANK", "0")) == 0


def build_optimizer(name: str, params, lr: float, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """The paper's Section 4.3 rules, from AdamW's lr and weight decay; every parameter decays, as veRL's."""
    cls, kwargs = optimizer_spec(name, lr, weight_decay)
    return cls(params, **kwargs)


def resolve_dtype(name: str, device: str) -> str:
    """'float32' or 'bfloat16' for ``--dtype`` ('auto': bf16 on a GPU that has it)."""
    if name == "auto":
        return "bfloat16" if device == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    return name


def use_vllm(choice: str, device: str) -> bool:
    """Whether vLLM generates: 'auto' where it is installed and the policy is on CUDA."""
    import importlib.util

    if choice == "off":
        return False
    installed = importlib.util.find_spec("vllm") is not None
    if choice == "on" and not (installed and device == "cuda"):
        raise UserError("--vllm on needs vLLM installed (pip install vllm) and a CUDA GPU; use --vllm auto")
    return installed and device == "cuda"


def memory_lines(args, optimizer_name: str, processes: int, device: str, kind: str | None = None,
                 tokenizer=None) -> list[str]:
    """scripts/_grpo_memory.py's count for this run, before its weights are loaded (an FSDP launch that would
    gather the whole model is refused here). ``kind``: a GPU kind to plan for (default: this GPU's, if known)."""
    import plan
    from scripts import _grpo_memory as grpo_memory

    shape = grpo_memory.shape(args.model)
    grpo_memory.check_sharding(shape)
    fsdp, per_layer = grpo_memory.launch_sharding()
    if kind is None and device == "cuda":
        kind = plan.kind_of(torch.cuda.get_device_name())
    gpu = plan.KINDS.get(kind)
    longest = make_prompt(dict(numbers=[99] * 4, target=999), args.template)  # the longest a problem can spell
    vllm = args.vllm == "on" or (args.vllm == "auto" and (device == "cuda" or kind is not None))
    terms = grpo_memory.estimate(
        shape, gpu.total if gpu else 0, processes, optimizer_name, args.beta, vllm and gpu is not None,
        batch_plan(args, processes, 1)["per_device_train_batch_size"], grpo_memory.prompt_length(longest, tokenizer),
        args.max_completion_length, args.generation_prompts or args.prompts, args.generations,
        args.gradient_checkpointing, fsdp or (kind is not None and processes > 1), per_layer or not fsdp)
    where = f"on {processes} x {kind}" + (" with FSDP per decoder layer" if processes > 1 else "") if gpu else ""
    return grpo_memory.lines(terms, gpu.usable(processes) if gpu else None, where)


def make_prompt(problem: dict, template: str) -> str:
    p = Problem(tuple(problem["numbers"]), problem["target"], "")
    return tinyzero_prompt(p) if template == "tinyzero" else prompt(p)


def check_policy(model: str) -> None:
    """Refuse, in one line, a local folder that is not a Hugging Face model with a tokenizer."""
    folder = Path(model)
    if not folder.exists():
        if folder.is_absolute() or model.startswith((".", "~")) or model.count("/") != 1:
            raise UserError(f"{model} does not exist; pass a Hugging Face model directory (export.py writes one) "
                             "or a Hub name such as Qwen/Qwen2.5-3B")
        return  # a Hub name: transformers downloads it
    if (folder / "checkpoints").is_dir() or (folder / "metrics.jsonl").is_file():
        raise UserError(f"{folder} is a train.py run, not a Hugging Face model; export it first: "
                         f"python export.py {folder} {folder / 'hf'}")
    if not (folder / "config.json").is_file():
        raise UserError(f"{folder} is not a Hugging Face model directory (no config.json); make one with export.py")
    if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json",
                                                       "tokenizer.model")):
        raise UserError(f"{folder} has no tokenizer; GRPO needs one to write and score text. Export the model "
                         "with export.py (it writes the tokenizer), or save the tokenizer into the folder")


def _not_the_padding_warning(record: logging.LogRecord) -> bool:
    return "strongly recommend passing in an `attention_mask`" not in record.getMessage()


def load_policy(model_dir: Path):
    """Model (fp32 weights) and tokenizer; a byte-level tokenizer gets the newline as its end and padding token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cli.library_bars_on_terminals_only()
    # generate()'s cached decoding steps pass one token and no mask; when that token is the end (our padding too),
    # transformers warns that the input may be padded. It is not: the cache carries the mask. Known, harmless.
    logging.getLogger("transformers.modeling_utils").addFilter(_not_the_padding_warning)  # (added once)
    check_policy(str(model_dir))
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    except OSError as e:  # no such folder, and the Hub cannot be reached or has no such model
        where = "a folder here" if Path(model_dir).exists() else "a local folder, and the Hub cannot give it here"
        raise UserError(f"{model_dir} is not a Hugging Face model that can be loaded: not {where} "
                        f"({str(e).splitlines()[0][:160]}). Download it where there is a network (hf download "
                        f"{model_dir} --local-dir DIR) and pass DIR") from None
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise UserError(f"{model_dir}'s tokenizer has {len(tokenizer)} tokens but the model's embedding only {rows} "
                         "rows; save the tokenizer the model was trained with into the folder")
    if tokenizer.eos_token is None:  # the byte-level tokenizer: a completion is one line
        newline = tokenizer.convert_ids_to_tokens(tokenizer("\n")["input_ids"])[0]
        tokenizer.eos_token = newline
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    for config in (model.config, model.generation_config):  # aligned here, so the trainer has nothing to align or say
        config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
        config.bos_token_id = tokenizer.bos_token_id
    return model, tokenizer


@torch.no_grad()
def evaluate(model, tokenizer, problems: list[dict], max_new_tokens: int, batch: int = 64,
             template: str = "short") -> dict[str, float]:
    """Greedy answers to ``problems``: mean reward and the fraction solved."""
    was_training = model.training
    model.eval()
    rewards = []
    for i in range(0, len(problems), batch):
        chunk = problems[i:i + batch]
        texts = [make_prompt(p, template) for p in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True).to(model.device)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        rewards += rewards_of(tokenizer, out[:, enc["input_ids"].shape[1]:].tolist(), [p["numbers"] for p in chunk],
                              [p["target"] for p in chunk])
    model.train(was_training)
    return dict(test_reward=statistics.mean(rewards), test_accuracy=sum(r == 1.0 for r in rewards) / len(rewards))


def completion_text(tokenizer, ids: list[int]) -> str:
    """A completion as the reward reads it, in training (TRL's sampled ids) and in evaluation (generate's) alike:
    its tokens before the first end-of-sequence token, decoded with special tokens kept, as veRL decodes what
    TinyZero scores. TinyZero keeps the end token's text too; cut here, it changes no score (it ends the last
    line, which no answer follows), except for a byte-level policy, whose end is the newline: kept, the last line
    would always be empty."""
    ids = list(ids)
    if tokenizer.eos_token_id in ids:
        ids = ids[: ids.index(tokenizer.eos_token_id)]
    return tokenizer.decode(ids, skip_special_tokens=False)


def rewards_of(tokenizer, completion_ids, numbers, target) -> list[float]:
    """TinyZero's reward (data/countdown/task.py ``score``) of each completion, from its token ids."""
    return [score(completion_text(tokenizer, ids), n, t) for ids, n, t in zip(completion_ids, numbers, target)]


def flat(rewards: list[float], generations: int) -> bool:
    """Whether every prompt's completions scored alike (groups of ``generations`` in a row, as TRL samples them):
    then every advantage is 0 and the step learns nothing."""
    groups = [rewards[i:i + generations] for i in range(0, len(rewards), generations)]
    return all(max(g) == min(g) for g in groups)


FLAT = ("every prompt's {n} completions scored alike in a rollout (all {value}), so every advantage was 0 and the step "
        "learned nothing. ")
FLAT_AT_START = ("A starting policy that cannot yet write '<answer>...</answer>' with the given numbers scores 0 or 0.1 "
                 "everywhere: train it longer first (config/repro/countdown_sft.py's max_iters), start from a stronger "
                 "model, or raise --generations")
FLAT_LATER = ("After rollouts that did vary, this means the policy now writes one answer a prompt: converged if the test "
              "reward rose, collapsed if it fell (then a lower --lr)")


def check_context(model, tokenizer, texts: list[str], max_completion_length: int) -> None:
    """Refuse a model whose context cannot hold the longest prompt and a whole completion."""
    context = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    longest = max(len(tokenizer(t)["input_ids"]) for t in texts)
    if context is not None and longest + max_completion_length > context:
        raise UserError(f"the model's context is {context} tokens, too short for a prompt of {longest} tokens "
                         f"and a completion of {max_completion_length}; lower --max-completion-length, use "
                         "--template short, or a model with a longer context")


def batch_plan(args, processes: int, problems: int) -> dict:
    """TRL's settings for the preset's batch at any process count that divides it: prompts per rollout and
    per optimizer step, and optimizer steps, are counted over all processes (each process gets its share)."""
    completions = args.prompts * args.generations  # per optimizer step, over every process
    generation_prompts = args.generation_prompts or args.prompts
    if generation_prompts % args.prompts:
        raise UserError(f"--generation-prompts {generation_prompts} must be a multiple of --prompts {args.prompts}")
    micro = args.micro_batch or completions // processes
    if micro < 1 or completions % (micro * processes):
        raise UserError(f"a step's {completions} completions (--prompts {args.prompts} x --generations {args.generations}) do "
                        f"not split into micro-batches of {micro} on each of {processes} processes; choose a --micro-batch "
                        f"and a process count whose product divides {completions}")
    steps = args.steps if args.steps is not None else -(-args.epochs * problems // args.prompts)
    return dict(per_device_train_batch_size=micro, gradient_accumulation_steps=completions // (micro * processes),
                max_steps=steps, **({} if generation_prompts == args.prompts else
                                   dict(generation_batch_size=generation_prompts * args.generations)))


def effective_batch(config, processes: int, generations: int, problems: int) -> dict:
    """What TRL will run, read back from its config: prompts a rollout, prompts an optimizer step, optimizer
    steps a rollout, and passes over the training problems."""
    per_step = config.per_device_train_batch_size * processes * config.gradient_accumulation_steps // generations
    return dict(prompts_per_rollout=config.generation_batch_size // generations, prompts_per_step=per_step,
                steps_per_rollout=config.steps_per_generation // config.gradient_accumulation_steps,
                epochs=config.max_steps * per_step / problems)


def run(args, optimizer_name: str, seed: int, out: Path, lr: float | None = None) -> list[dict]:
    """One GRPO run at ``lr`` (default ``args.lr``; AdamW's, the others by the paper's rules); returns its
    eval records. The run is written beside ``out`` and swapped in when it has finished (folders.py), so
    ``out`` only ever holds a finished run; a finished run there is replaced only with --overwrite. Under a
    launch of several processes, the first takes the folder and writes; all of them train and evaluate."""
    import data_parallel

    lr = args.lr if lr is None else lr
    processes = int(os.environ.get("WORLD_SIZE", "1"))
    device = data_parallel.resolve_device(args.device).type
    if processes > 1:  # the process group, so that every process abides by the first one's decision
        from accelerate import PartialState

        PartialState(cpu=device == "cpu")
    dest = folders.Destination(out, makes=contents.GRPO, option="--out", command="scripts.grpo")
    with contextlib.ExitStack() as stack:
        def take():
            stack.enter_context(dest)
            dest.allow(overwrite=args.overwrite)

        data_parallel.agree(take)
        staged = dest.stage() if main_process() else None
        records, meta = train_run(args, optimizer_name, seed, lr, device, processes, staged)
        if staged is not None:
            (staged / "run.json").write_text(json.dumps(meta))
            dest.swap(staged)
    return records


def train_run(args, optimizer_name: str, seed: int, lr: float, device: str, processes: int,
              staged: Path | None) -> tuple[list[dict], dict]:
    """Train and evaluate; the first process logs into ``staged``. Returns the eval records and run.json's content."""
    import tempfile

    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(seed)
    dtype = resolve_dtype(args.dtype, device)
    check_policy(str(args.model))
    said = memory_lines(args, optimizer_name, processes, device)
    if staged is not None:
        print("\n".join(said), flush=True)
    model, tokenizer = load_policy(args.model)
    train_problems = read_problems(args.data / "rl_train.jsonl")
    test_problems = read_problems(args.data / "test.jsonl")[:args.test_problems]
    prompts = [make_prompt(p, args.template) for p in train_problems]
    check_context(model, tokenizer, prompts[:64] + [make_prompt(p, args.template) for p in test_problems[:64]],
                  args.max_completion_length)
    dataset = Dataset.from_list([dict(prompt=text, numbers=p["numbers"], target=p["target"])
                                 for text, p in zip(prompts, train_problems)])
    plan = batch_plan(args, processes, len(train_problems))
    records = []

    class Trainer(GRPOTrainer):
        def create_optimizer(self, model=None):
            # where the trainer would build its own: after DDP/FSDP wrapping where it delays that, over every parameter
            if self.optimizer is None:
                params = (self.model if model is None else model).parameters()
                self.optimizer = build_optimizer(optimizer_name, params, lr, args.weight_decay)
            return self.optimizer

    def log(kind: str, **record):
        if staged is not None:
            with open(staged / "metrics.jsonl", "a") as f:
                f.write(json.dumps(dict(kind=kind, **record)) + "\n")

    class TestReward(TrainerCallback):
        def on_train_begin(self, targs, state, control, model=None, **kw):
            self.record(0, model)

        def on_step_end(self, targs, state, control, model=None, **kw):
            if state.global_step % args.eval_every == 0 or state.global_step == state.max_steps:
                self.record(state.global_step, model)

        def on_log(self, targs, state, control, logs=None, **kw):
            log("train", step=state.global_step, **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))})

        def record(self, step, model):  # on every process: a sharded model's forward needs them all
            result = dict(step=step, **evaluate(model, tokenizer, test_problems, args.max_completion_length,
                                                template=args.template))
            records.append(result)
            log("eval", **result)
            if staged is not None:
                print(f"{optimizer_name} seed {seed} step {step}: test reward {result['test_reward']:.3f}, "
                      f"accuracy {result['test_accuracy']:.3f}", flush=True)

    vllm = use_vllm(args.vllm, device)
    fields = GRPOConfig.__dataclass_fields__  # transformers 5 renamed gradient_checkpointing (the old name warns)
    checkpointing = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    with tempfile.TemporaryDirectory(prefix="grpo_trl_") as scratch:  # TRL's output_dir: nothing is saved there
        config = GRPOConfig(
            output_dir=scratch, num_generations=args.generations, **plan,
            max_completion_length=args.max_completion_length, temperature=1.0, beta=args.beta, loss_type=args.loss_type,
            logging_steps=1,  # every step: its rollout's mean reward, Figure 5's quantity
            save_strategy="no", report_to=[], use_cpu=device == "cpu",
            bf16=dtype == "bfloat16", **{checkpointing: args.gradient_checkpointing}, seed=seed, data_seed=seed,
            disable_tqdm=True, learning_rate=lr, lr_scheduler_type="constant", dataloader_pin_memory=device == "cuda",
            **(dict(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.4) if vllm else {}),
            **{k: v for k, v in AS_VERL.items() if k in fields},
        )
        rollouts = dict(scored=0, flat=0)

        def countdown_reward(prompts, completions, completion_ids, numbers, target, **kwargs):  # (TRL logs this name)
            rewards = rewards_of(tokenizer, completion_ids, numbers, target)  # the ids, not TRL's decoded text
            rollouts["scored"] += 1
            if flat(rewards, args.generations):
                rollouts["flat"] += 1
                if rollouts["flat"] == 1 and staged is not None:  # said once, by the process that writes
                    values = sorted(set(rewards))
                    cause = FLAT_AT_START if rollouts["scored"] == 1 else FLAT_LATER
                    print("note: " + FLAT.format(n=args.generations, value=", ".join(f"{v:g}" for v in values)) + cause,
                          flush=True)
            return rewards

        trainer = Trainer(model=model, reward_funcs=countdown_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, callbacks=[TestReward()])
        trainer.remove_callback(PrinterCallback)  # its dicts of every logged number: they go to metrics.jsonl
        with warnings.catch_warnings():  # TRL calls transformers' renamed checkpointing methods: known, harmless
            warnings.filterwarnings("ignore", message=r".*`(is_)?gradient_checkpointing\w*` is deprecated", category=FutureWarning)
            trainer.train()
    meta = dict(optimizer=optimizer_name, seed=seed, lr=lr, steps=plan["max_steps"], weight_decay=args.weight_decay,
                preset=args.preset, device=device, dtype=dtype, processes=trainer.accelerator.num_processes,
                **effective_batch(config, trainer.accelerator.num_processes, args.generations, len(train_problems)),
                scored_batches=rollouts["scored"], flat_batches=rollouts["flat"],
                trl={k: getattr(config, k) for k in (*AS_VERL, "loss_type", "beta", "epsilon", "scale_rewards")
                     if hasattr(config, k)}, done=True)
    if staged is not None and rollouts["flat"]:
        print(f"{rollouts['flat']} of the {rollouts['scored']} scored batches were flat (no advantage, no gradient)")
    return records, meta


def finished(out: Path) -> bool:
    path = out / "run.json"
    meta = read_json(path) if path.exists() else {}
    return isinstance(meta, dict) and bool(meta.get("done", False))


def eval_records(out: Path) -> list[dict]:
    from metrics import records

    lines = records(out / "metrics.jsonl")  # a last line cut short by a crash is left out
    return [r for r in lines if r["kind"] == "eval"]


def table_row(run: Path, last: int = 5) -> dict:
    """One finished run: its optimizer and lr, the test reward before GRPO, the best, and the mean
    of the last ``last`` evaluations (the final reward, less noisy than the last point)."""
    meta, rewards = read_json(run / "run.json"), [r["test_reward"] for r in eval_records(run)]
    return dict(run=run.name, optimizer=meta["optimizer"], lr=meta["lr"], seed=meta["seed"], steps=meta["steps"],
                start=rewards[0], best=max(rewards), final=statistics.mean(rewards[-last:]))


def markdown(rows: list[dict]) -> str:
    lines = ["| run | optimizer | `--lr` | seed | steps | test reward: start | best | final (last 5) |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['run']} | {r['optimizer']} | {r['lr']:g} | {r['seed']} | {r['steps']} | {r['start']:.3f} | "
              f"{r['best']:.3f} | {r['final']:.3f} |" for r in rows]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["run"].split("_seed=")[0], []).append(r)
    if any(len(g) > 1 for g in groups.values()):  # seeds of one setting: mean ± std
        lines += ["", "| runs | seeds | best | final (last 5) |", "| --- | ---: | ---: | ---: |"]
        for name, group in groups.items():
            cells = [f"{statistics.mean(v):.3f} ± {statistics.stdev(v) if len(v) > 1 else 0.0:.3f}"
                     for v in ([r["best"] for r in group], [r["final"] for r in group])]
            lines.append(f"| {name} | {len(group)} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


SMOOTH = 10  # rollouts in the trailing mean of the training reward's curve


def summarize(root: Path, optimizers, seeds) -> list[dict]:
    """By optimizer and step, mean ± std over seeds of two quantities: ``train``, the mean reward of the training
    rollouts (the paper's Figure 5: veRL's ``critic/score/mean``, which TRL logs as ``reward`` at the step its
    rollout was sampled), and ``test``, the greedy test reward (with its accuracy); CSV and PNG."""
    rows = []
    for name in optimizers:
        done = [root / f"{name}_seed={s}" for s in seeds if finished(root / f"{name}_seed={s}")]
        if not done:
            continue
        for quantity, key in (("train", "reward"), ("test", "test_reward")):
            kind = "train" if quantity == "train" else "eval"
            runs = [{r["step"]: r for r in records_of(run) if r.get("kind") == kind and key in r} for run in done]
            for step in sorted(set.intersection(*(set(run) for run in runs))):
                values = [run[step][key] for run in runs]
                rows.append(dict(optimizer=name, quantity=quantity, step=step, n=len(values),
                                 reward_mean=statistics.mean(values),
                                 reward_std=statistics.stdev(values) if len(values) > 1 else 0.0,
                                 accuracy_mean=statistics.mean(run[step]["test_accuracy"] for run in runs)
                                 if quantity == "test" else ""))
    folders.write_atomic(root / "summary.csv", csv_bytes(rows))
    plot(rows, root / "summary.png")
    return rows


def records_of(run: Path) -> list[dict]:
    from metrics import records

    return records(run / "metrics.jsonl")


def trailing_mean(values: list[float], window: int) -> list[float]:
    return [statistics.mean(values[max(0, i + 1 - window):i + 1]) for i in range(len(values))]


def plot(rows: list[dict], path: Path) -> None:
    """Figure 5 as the paper plots it (the training rollouts' mean reward), beside the greedy test reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = {"adamw": "AdamW", "adams": "AdamS (AdamW's lr)", "lion": "Lion (0.1x lr, 10x wd)"}
    for ax, quantity in zip(axes, ("train", "test")):
        for name in dict.fromkeys(r["optimizer"] for r in rows):
            mine = [r for r in rows if r["optimizer"] == name and r["quantity"] == quantity]
            if not mine:
                continue
            steps, mean, std = ([r[k] for r in mine] for k in ("step", "reward_mean", "reward_std"))
            if quantity == "train":
                mean, std = trailing_mean(mean, SMOOTH), trailing_mean(std, SMOOTH)
            label = labels.get(name, name.replace("adams_lr=", "AdamS at lr "))
            ax.plot(steps, mean, label=f"{label} (n={mine[0]['n']})")
            ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
        ax.legend()
    axes[0].set(xlabel="GRPO step", ylabel="mean reward of the training rollouts",
                title=f"Figure 5's quantity: sampled rollouts (trailing mean of {SMOOTH})")
    axes[1].set(xlabel="GRPO step", ylabel="mean reward on the test problems (greedy)", title="test problems, greedy")
    fig.suptitle("GRPO on Countdown (mean ± std over seeds)")
    fig.tight_layout()
    folders.write_atomic(path, figure_bytes(fig, dpi=130))


def parse_args(argv=None) -> argparse.Namespace:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", type=cli.text(), help="a Hugging Face model directory with a tokenizer (export.py's output), or a Hub name")
    parser.add_argument("--preset", choices=PRESETS, default="cpu", help="the settings marked (preset) as a set (default: cpu)")
    parser.add_argument("--optimizer", default="adams", choices=COMPARED)
    parser.add_argument("--lr", type=cli.nonnegative,
                        help="(preset) AdamW's learning rate (cpu's: the best of a scan for the Countdown starting "
                             "policy); the others follow the paper's rules")
    parser.add_argument("--weight-decay", type=cli.nonnegative, default=0.01, help="AdamW's (Lion gets 10x)")
    parser.add_argument("--seed", type=cli.seed, default=1)
    parser.add_argument("--steps", type=cli.integer(1, 10**9), help="(preset) optimizer steps; default: --epochs over the training problems")
    parser.add_argument("--epochs", type=cli.integer(1, 10**6), help="(preset) passes over the training problems, when --steps is not given")
    parser.add_argument("--prompts", type=cli.integer(1, 1 << 20), help="(preset) prompts per optimizer step")
    parser.add_argument("--generation-prompts", type=cli.integer(1, 1 << 20),
                        help="(preset) prompts per rollout (a multiple of --prompts; default: --prompts)")
    parser.add_argument("--generations", type=cli.integer(2, 1024), help="(preset) completions per prompt (the GRPO group)")
    parser.add_argument("--micro-batch", type=cli.integer(1, 1 << 20), help="(preset) completions per forward pass (default: a whole step)")
    parser.add_argument("--max-completion-length", type=cli.integer(1, 1 << 20), help="(preset) tokens per completion")
    parser.add_argument("--beta", type=cli.nonnegative, help="(preset) KL penalty against the starting policy")
    parser.add_argument("--loss-type", choices=("grpo", "bnpo", "dr_grpo", "dapo"), help="(preset) TRL's loss_type")
    parser.add_argument("--template", choices=("short", "tinyzero"),
                        help="(preset) the prompt: a one-line problem (short), or TinyZero's for base models")
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=None, help="(preset)")
    parser.add_argument("--eval-every", type=cli.integer(1, 10**9), help="(preset) optimizer steps between test evaluations")
    parser.add_argument("--test-problems", type=cli.integer(1, 10**7), help="(preset) how many test problems to score")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="auto: cuda where a GPU is visible (pick it with CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--dtype", default="auto", choices=("auto", "float32", "bfloat16"),
                        help="autocast dtype of training (auto: bf16 on a GPU that has it); weights stay fp32")
    parser.add_argument("--vllm", default="auto", choices=("auto", "on", "off"),
                        help="generate with vLLM (colocated) where it is installed and on CUDA")
    parser.add_argument("--data", type=cli.folder, default=DATA, help="folder with rl_train.jsonl and test.jsonl")
    parser.add_argument("--out", type=cli.place, default=Path("out/grpo"), help="the run's folder (with --compare: the runs' parent)")
    parser.add_argument("--overwrite", action="store_true", help="replace a finished run in --out")
    parser.add_argument("--evaluate-only", action="store_true", help="print the model's test reward and stop")
    parser.add_argument("--compare", action="store_true", help="AdamW, AdamS and Lion x --seeds, then the figure")
    parser.add_argument("--seeds", type=cli.seed, nargs="+", default=[1, 2, 3])
    parser.add_argument("--adams-lr", type=cli.nonnegative, metavar="LR",
                        help="with --compare: AdamS at this lr of its own too (runs adams_lr=LR_seed=S), in the figure")
    parser.add_argument("--plan", type=cli.text("a GPU kind, optionally xN"), metavar="KIND[xN]",
                        help="print the memory each process needs on N GPUs of KIND (h100-80gb, h200-141gb, a100-40gb, "
                             "a100-80gb; N > 1: FSDP per decoder layer) and stop; MODEL needs only its config.json")
    parser.add_argument("--table", nargs="+", type=cli.text("a run folder"), metavar="RUN",
                        help="print a markdown table of finished runs (start, best and final test reward) and stop")
    parser.show_sets(PRESETS, "preset")
    args = parser.parse_args(argv)
    for key, value in PRESETS[args.preset].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("prompts", "generations", "max_completion_length", "eval_every", "test_problems"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} must be at least 1, got {getattr(args, key)}")
    if args.generations < 2:
        parser.error("--generations must be at least 2: GRPO's advantage compares completions within a group")
    if args.steps is None and args.epochs is None:
        parser.error("give --steps or --epochs")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.table:
        rows = [table_row(Path(run)) for run in args.table if finished(Path(run))]
        print(markdown(rows))
        return rows
    if args.model is None:
        raise UserError("MODEL is required (a Hugging Face model directory; export.py writes one)")
    if args.plan:
        from scripts._grpo_memory import parse_target

        kind, processes = parse_target(args.plan)
        said = []
        for name in COMPARED if args.compare else (args.optimizer,):
            said += [f"{name}: {line}" for line in memory_lines(args, name, processes, "cuda", kind)]
        print("\n".join(said))
        return said
    if not (args.data / "test.jsonl").is_file():
        raise UserError(f"{args.data} has no test.jsonl; run python -m data.countdown.prepare first")

    if args.evaluate_only:
        model, tokenizer = load_policy(args.model)
        import data_parallel

        problems = read_problems(args.data / "test.jsonl")[:args.test_problems]
        check_context(model, tokenizer, [make_prompt(p, args.template) for p in problems[:64]], args.max_completion_length)
        model.to(data_parallel.resolve_device(args.device))
        result = evaluate(model, tokenizer, problems, args.max_completion_length, template=args.template)
        print(json.dumps(result))
        return result
    if not args.compare:
        return run(args, args.optimizer, args.seed, args.out)
    compared = [(name, name, None) for name in COMPARED]  # (label, optimizer, lr)
    if args.adams_lr is not None:
        compared.append((f"adams_lr={args.adams_lr:g}", "adams", args.adams_lr))
    for label, name, lr in compared:
        for seed in args.seeds:
            out = args.out / f"{label}_seed={seed}"
            if finished(out) and not args.overwrite:
                if main_process():
                    print(f"{out.name}: finished, skipped")
                continue
            run(args, name, seed, out, lr)
    if not main_process():
        return []
    rows = summarize(args.out, [label for label, _, _ in compared], args.seeds)
    last = max(r["step"] for r in rows)
    for r in (r for r in rows if r["quantity"] == "test" and r["step"] in (0, last)):
        print(f"{r['optimizer']:6} step {r['step']:4}: test reward {r['reward_mean']:.3f} ± {r['reward_std']:.3f} "
              f"(accuracy {r['accuracy_mean']:.3f}, n={r['n']})")
    print(f"wrote {args.out / 'summary.csv'} and {args.out / 'summary.png'}")
    return rows


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
