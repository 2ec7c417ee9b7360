"""GRPO post-training on Countdown with AdamW, AdamS or Lion, through TRL's GRPOTrainer: the AdamS
paper's Figure 5 (TinyZero's R1-Zero replication) at CPU scale.

    python -m data.countdown.prepare && python train.py config/repro/countdown_sft.py   # a starting policy
    python export.py out/countdown_sft out/countdown_sft/hf
    python -m scripts.grpo out/countdown_sft/hf --evaluate-only                          # its test reward
    python -m scripts.grpo out/countdown_sft/hf --optimizer adams --lr 3e-5 --seed 1 --out out/grpo/adams_1
    python -m scripts.grpo out/countdown_sft/hf --compare --lr 1e-4 --seeds 1 2 3 --out results/runs/grpo
    python -m scripts.grpo --table results/runs/grpo/*/                                     # start, best, final

MODEL is any Hugging Face causal LM directory with a tokenizer (export.py writes one); for a
byte-level model the newline ends a completion. The optimizers follow the paper's rules
(Section 4.3): AdamW β (0.9, 0.999), weight decay 0.01, at ``--lr``; AdamS the same but β2 =
0.95; Lion 0.1x the lr, 10x the weight decay, β (0.95, 0.98). Each is built by us and handed to
the trainer (``optimizers=(optimizer, None)``, a constant learning rate).

GRPO (Shao et al., 2024): for every prompt, ``--generations`` completions are sampled; each
completion's advantage is its reward minus the group's mean, over the group's standard
deviation; the loss is the clipped policy-gradient surrogate averaged per sequence (TRL's
``loss_type="grpo"``), no KL term by default (``--beta``). The reward is TinyZero's
(data/countdown/task.py: 1 right, 0.1 well-formed, 0 none). Every ``--eval-every`` steps, and
before the first, the policy answers the test problems greedily; the mean reward is the curve.

A run writes OUT/metrics.jsonl (kind 'eval': step, test_reward, test_accuracy; kind 'train':
TRL's logs). ``--compare`` runs 3 optimizers x the seeds (skipping finished runs; ``--adams-lr``
adds AdamS at a learning rate of its own) and writes OUT/summary.csv and OUT/summary.png: the
mean test reward by step, mean ± std over seeds. results/README.md ("GRPO on Countdown") has the
runs behind the committed figure: at this scale AdamS does not take AdamW's learning rate.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run by path, not with -m: make the repo's modules importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data.countdown.prepare import read_problems
from data.countdown.task import Problem, prompt, score

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "data" / "countdown"
COMPARED = ("adamw", "adams", "lion")


def build_optimizer(name: str, params, lr: float, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """The paper's Section 4.3 rules, from AdamW's lr and weight decay."""
    from optim import AdamS, Lion

    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    if name == "adams":
        return AdamS(params, lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)
    if name == "lion":
        return Lion(params, lr=0.1 * lr, betas=(0.95, 0.98), weight_decay=10 * weight_decay)
    raise SystemExit(f"--optimizer {name}: choose one of {', '.join(COMPARED)}")


def load_policy(model_dir: Path):
    """Model and tokenizer; a byte-level tokenizer gets the newline as its end and padding token."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (model_dir / "config.json").is_file():
        raise SystemExit(f"{model_dir} is not a Hugging Face model directory; make one with export.py")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    if tokenizer.eos_token is None:  # the byte-level tokenizer: a completion is one line
        newline = tokenizer.convert_ids_to_tokens(tokenizer("\n")["input_ids"])[0]
        tokenizer.eos_token = newline
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


@torch.no_grad()
def evaluate(model, tokenizer, problems: list[dict], max_new_tokens: int, batch: int = 64) -> dict[str, float]:
    """Greedy answers to ``problems``: mean reward and the fraction solved."""
    was_training = model.training
    model.eval()
    rewards = []
    for i in range(0, len(problems), batch):
        chunk = problems[i:i + batch]
        texts = [prompt(Problem(tuple(p["numbers"]), p["target"], "")) for p in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True)
        out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        answers = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)
        rewards += [score(a.split(tokenizer.eos_token)[0], p["numbers"], p["target"]) for a, p in zip(answers, chunk)]
    model.train(was_training)
    return dict(test_reward=statistics.mean(rewards), test_accuracy=sum(r == 1.0 for r in rewards) / len(rewards))


def reward_fn(prompts, completions, numbers, target, **kwargs) -> list[float]:
    return [score(c, n, t) for c, n, t in zip(completions, numbers, target)]


def run(args, optimizer_name: str, seed: int, out: Path, lr: float | None = None) -> list[dict]:
    """One GRPO run at ``lr`` (default ``args.lr``; AdamW's, the others by the paper's rules);
    returns its eval records."""
    lr = args.lr if lr is None else lr
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(seed)
    model, tokenizer = load_policy(args.model)
    train_problems = read_problems(args.data / "rl_train.jsonl")
    test_problems = read_problems(args.data / "test.jsonl")[:args.test_problems]
    dataset = Dataset.from_list([dict(prompt=prompt(Problem(tuple(p["numbers"]), p["target"], "")), numbers=p["numbers"],
                                      target=p["target"]) for p in train_problems])
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "metrics.jsonl"
    log_path.unlink(missing_ok=True)
    records = []

    def log(kind: str, **record):
        with open(log_path, "a") as f:
            f.write(json.dumps(dict(kind=kind, **record)) + "\n")

    class TestReward(TrainerCallback):
        def on_train_begin(self, targs, state, control, model=None, **kw):
            self.record(0, model)

        def on_step_end(self, targs, state, control, model=None, **kw):
            if state.global_step % args.eval_every == 0 or state.global_step == state.max_steps:
                self.record(state.global_step, model)

        def on_log(self, targs, state, control, logs=None, **kw):
            log("train", step=state.global_step, **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))})

        def record(self, step, model):
            result = dict(step=step, **evaluate(model, tokenizer, test_problems, args.max_completion_length))
            records.append(result)
            log("eval", **result)
            print(f"{optimizer_name} seed {seed} step {step}: test reward {result['test_reward']:.3f}, "
                  f"accuracy {result['test_accuracy']:.3f}", flush=True)

    config = GRPOConfig(
        output_dir=str(out / "trl"), max_steps=args.steps, per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations, max_completion_length=args.max_completion_length, temperature=1.0,
        beta=args.beta, loss_type="grpo", logging_steps=args.eval_every, save_strategy="no", report_to=[],
        use_cpu=True, seed=seed, data_seed=seed, disable_tqdm=True, learning_rate=lr, lr_scheduler_type="constant",
    )
    optimizer = build_optimizer(optimizer_name, model.parameters(), lr, args.weight_decay)
    trainer = GRPOTrainer(model=model, reward_funcs=reward_fn, args=config, train_dataset=dataset,
                          processing_class=tokenizer, optimizers=(optimizer, None), callbacks=[TestReward()])
    trainer.train()
    (out / "run.json").write_text(json.dumps(dict(optimizer=optimizer_name, seed=seed, lr=lr,
                                                  weight_decay=args.weight_decay, steps=args.steps, done=True)))
    return records


def finished(out: Path) -> bool:
    path = out / "run.json"
    return path.exists() and json.loads(path.read_text()).get("done", False)


def eval_records(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in lines if r["kind"] == "eval"]


def table_row(run: Path, last: int = 5) -> dict:
    """One finished run: its optimizer and lr, the test reward before GRPO, the best, and the mean
    of the last ``last`` evaluations (the final reward, less noisy than the last point)."""
    meta, rewards = json.loads((run / "run.json").read_text()), [r["test_reward"] for r in eval_records(run)]
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


def summarize(root: Path, optimizers, seeds) -> list[dict]:
    """Mean ± std of the test reward over seeds, by optimizer and step; CSV and PNG."""
    rows = []
    for name in optimizers:
        runs = [eval_records(root / f"{name}_seed={s}") for s in seeds if finished(root / f"{name}_seed={s}")]
        if not runs:
            continue
        for step in sorted(set.intersection(*({r["step"] for r in run} for run in runs))):
            values = [next(r["test_reward"] for r in run if r["step"] == step) for run in runs]
            acc = [next(r["test_accuracy"] for r in run if r["step"] == step) for run in runs]
            rows.append(dict(optimizer=name, step=step, n=len(values), reward_mean=statistics.mean(values),
                             reward_std=statistics.stdev(values) if len(values) > 1 else 0.0,
                             accuracy_mean=statistics.mean(acc)))
    with open(root / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, root / "summary.png")
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = {"adamw": "AdamW", "adams": "AdamS (AdamW's lr)", "lion": "Lion (0.1x lr, 10x wd)"}
    for name in dict.fromkeys(r["optimizer"] for r in rows):
        mine = [r for r in rows if r["optimizer"] == name]
        steps = [r["step"] for r in mine]
        mean = [r["reward_mean"] for r in mine]
        std = [r["reward_std"] for r in mine]
        label = labels.get(name, name.replace("adams_lr=", "AdamS at lr "))
        ax.plot(steps, mean, label=f"{label} (n={mine[0]['n']})")
        ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
    ax.set(xlabel="GRPO step", ylabel="mean reward on the test problems (greedy)",
           title="GRPO on Countdown (mean ± std over seeds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, nargs="?", help="a Hugging Face model directory with a tokenizer (export.py's output)")
    parser.add_argument("--optimizer", default="adams", choices=COMPARED)
    parser.add_argument("--lr", type=float, default=1e-4,
                        help="AdamW's learning rate (1e-4: the best of a scan for the Countdown starting policy); the others follow the paper's rules")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW's (Lion gets 10x)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt (the GRPO group)")
    parser.add_argument("--max-completion-length", type=int, default=40, help="tokens per completion")
    parser.add_argument("--beta", type=float, default=0.0, help="KL penalty against the starting policy")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--test-problems", type=int, default=256)
    parser.add_argument("--data", type=Path, default=DATA, help="folder with rl_train.jsonl and test.jsonl")
    parser.add_argument("--out", type=Path, default=Path("out/grpo"))
    parser.add_argument("--evaluate-only", action="store_true", help="print the model's test reward and stop")
    parser.add_argument("--compare", action="store_true", help="AdamW, AdamS and Lion x --seeds, then the figure")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--adams-lr", type=float, metavar="LR",
                        help="with --compare: AdamS at this lr of its own too (runs adams_lr=LR_seed=S), in the figure")
    parser.add_argument("--table", type=Path, nargs="+", metavar="RUN",
                        help="print a markdown table of finished runs (start, best and final test reward) and stop")
    args = parser.parse_args(argv)
    if args.table:
        rows = [table_row(run) for run in args.table if finished(run)]
        print(markdown(rows))
        return rows
    if args.model is None:
        parser.error("MODEL is required (a Hugging Face model directory; export.py writes one)")
    if not (args.data / "test.jsonl").is_file():
        raise SystemExit(f"{args.data} has no test.jsonl; run python -m data.countdown.prepare first")

    if args.evaluate_only:
        model, tokenizer = load_policy(args.model)
        result = evaluate(model, tokenizer, read_problems(args.data / "test.jsonl")[:args.test_problems],
                          args.max_completion_length)
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
            if finished(out):
                print(f"{out.name}: finished, skipped")
                continue
            run(args, name, seed, out, lr)
    rows = summarize(args.out, [label for label, _, _ in compared], args.seeds)
    last = max(r["step"] for r in rows)
    for r in (r for r in rows if r["step"] in (0, last)):
        print(f"{r['optimizer']:6} step {r['step']:4}: test reward {r['reward_mean']:.3f} ± {r['reward_std']:.3f} "
              f"(accuracy {r['accuracy_mean']:.3f}, n={r['n']})")
    print(f"wrote {args.out / 'summary.csv'} and {args.out / 'summary.png'}")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
