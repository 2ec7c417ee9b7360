"""Plan every paper-scale command on the GPUs it names, on this CPU: memory per GPU, fits, hours.

    python -m scripts.plan_paper --out results/plans            # every row (about an hour on 2 cores)
    python -m scripts.plan_paper --only llama2_7b --out /tmp/p  # the rows whose name holds this text

Each training row is ``python train.py CONFIG --plan=KIND --plan_gpus=N`` (plan.py: the run's own step on fake
tensors, through a model of the CUDA caching allocator); the GRPO rows are scripts/_grpo_memory.py's count
(``python -m scripts.grpo CONFIG_DIR --preset tinyzero --plan KINDxN``) for the published configs of the paper's
two policies, written here as config.json files. Table 1's rows are the paper's setting (8 x A100 40GB, fp16, a
1,024-token sequence, 480 sequences an iteration) with each micro-batch searched. OUT/plans.json holds every
plan, OUT/README.md the table the front page repeats.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cli
import folders
from errors import UserError

REPO = Path(__file__).resolve().parents[1]
GiB = 1 << 30

# Published config.json values of the paper's two GRPO policies (Hugging Face model cards), the shape alone.
POLICIES = {
    "Qwen2.5-3B": dict(architectures=["Qwen2ForCausalLM"], model_type="qwen2", vocab_size=151936, hidden_size=2048,
                       intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2,
                       max_position_embeddings=32768, tie_word_embeddings=True),
    "DeepSeek-R1-Distill-Llama-8B": dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=128256,
                                         hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                                         tie_word_embeddings=False),
}


def rows() -> list[dict]:
    """(name, what the paper ran, the command's arguments) of every row."""
    out = []
    for path in sorted((REPO / "config").glob("train_*.py")):
        name = path.stem.removeprefix("train_")
        out.append(dict(name=name, group="Llama 2 (Figures 1, 6)" if "llama" in name else "GPT-2 (Figures 4, Tables 2-4)",
                        kind="h100-80gb", gpus=8, args=[f"config/{path.name}"]))
    for size in ("large", "xl"):  # Table 1: the paper's max batch on 8 x A100 40GB in fp16
        for opt in ("adamw", "adams"):
            shape = {"large": "--n_layer=36 --n_head=20 --n_embd=1280", "xl": "--n_layer=48 --n_head=25 --n_embd=1600"}[size]
            out.append(dict(name=f"table1_{size}_{opt}", group="Table 1 (8 x A100 40GB, fp16)", kind="a100-40gb", gpus=8,
                            args=[f"config/train_gpt2_large_{opt}.py", *shape.split(), "--batch_size=1",
                                  "--gradient_accumulation_steps=480"]))
    for opt in ("adamw", "adams"):  # Section 4.2's "20% less memory under FSDP on 4 Hopper GPUs"
        out.append(dict(name=f"llama2_7b_{opt}_4gpus", group="Section 4.2: FSDP on 4 GPUs", kind="h100-80gb", gpus=4,
                        args=[f"config/train_llama2_7b_{opt}.py"]))
    for policy, targets in (("Qwen2.5-3B", (("h100-80gb", 1, []), ("h200-141gb", 1, []), ("h100-80gb", 2, []),
                                            ("h100-80gb", 2, ["--micro-batch", "4"]))),
                            ("DeepSeek-R1-Distill-Llama-8B", (("h100-80gb", 8, []),))):
        for kind, gpus, extra in targets:
            name = f"grpo_{policy}_{kind}x{gpus}" + "".join(extra).replace("--", "_")
            out.append(dict(name=name, group="Figure 5: GRPO (counted)", kind=kind, gpus=gpus, policy=policy, args=extra))
    return out


def run_row(row: dict, scratch: Path) -> dict:
    """One row's plan: train.py --plan's JSON, or GRPO's count per optimizer."""
    if "policy" in row:
        folder = scratch / row["policy"]
        folder.mkdir(exist_ok=True)
        (folder / "config.json").write_text(json.dumps(POLICIES[row["policy"]]))
        cmd = [sys.executable, "-m", "scripts.grpo", str(folder), "--preset", "tinyzero", "--compare", "--plan",
               f"{row['kind']}x{row['gpus']}", *row["args"]]
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if result.returncode:
            raise UserError(f"{row['name']}: {result.stderr.strip().splitlines()[-1]}")
        return dict(row, lines=result.stdout.strip().splitlines(),
                    command=" ".join([f"python -m scripts.grpo {row['policy']}/ --preset tinyzero --compare --plan",
                                      f"{row['kind']}x{row['gpus']}", *row["args"]]))
    path = scratch / f"{row['name']}.json"
    cmd = [sys.executable, "train.py", *row["args"], f"--plan={row['kind']}", f"--plan_gpus={row['gpus']}",
           f"--plan_json={path}"]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if result.returncode:
        raise UserError(f"{row['name']}: {result.stderr.strip().splitlines()[-1]}")
    shown = " ".join(["python train.py", *row["args"], f"--plan={row['kind']}", f"--plan_gpus={row['gpus']}"])
    return dict(row, plan=json.loads(path.read_text()), command=shown)


def table(done: list[dict]) -> list[str]:
    """The markdown table of the training rows (GRPO's are listed after it, in words)."""
    lines = ["| run | GPUs | micro-batch | peak a GPU, GiB (allocated / reserved) | fits | largest micro-batch | hours |",
             "| --- | --- | ---: | ---: | --- | ---: | ---: |"]
    for row in (r for r in done if "plan" in r):
        p = row["plan"]
        lines.append(f"| {row['name']} | {row['gpus']} x {row['kind']} | {p['micro_batch']} | "
                     f"{p['peak_allocated_bytes'] / GiB:.1f} / {p['peak_reserved_bytes'] / GiB:.1f} | "
                     f"{'yes' if p['fits'] else 'no'} | {p['largest_micro_batch']} | {p['run_seconds'] / 3600:,.0f} |")
    return lines


# The front page's rows: (what the paper ran, its AdamW row, its AdamS row)
FRONT = [
    ("GPT-2 Small (Figure 4)", "gpt2_small_adamw", "gpt2_small_adams"),
    ("GPT-2 Medium (Figure 4)", "gpt2_medium_adamw", "gpt2_medium_adams"),
    ("GPT-2 Large (Figure 4)", "gpt2_large_adamw", "gpt2_large_adams"),
    ("Llama 2 7B (Figure 1)", "llama2_7b_adamw", "llama2_7b_adams"),
    ("Llama 2 13B (Figure 6)", "llama2_13b_adamw", "llama2_13b_adams"),
    ("Section 4.2: Llama 2 7B on 4 GPUs", "llama2_7b_adamw_4gpus", "llama2_7b_adams_4gpus"),
    ("Table 1: GPT-2 Large, fp16 (paper: 10 / 10)", "table1_large_adamw", "table1_large_adams"),
    ("Table 1: GPT-2 XL, fp16 (paper: 1 / 3)", "table1_xl_adamw", "table1_xl_adams"),
]
KIND_NAMES = {"h100-80gb": "H100 80GB", "h200-141gb": "H200", "a100-40gb": "A100 40GB", "a100-80gb": "A100 80GB"}


def front_table(done: list[dict]) -> str:
    """The README's table of plans, from the rows made (results/plans/plans.json)."""
    by = {r["name"]: r for r in done}
    lines = ["| the paper's run | GPUs | micro-batch | peak a GPU, GiB reserved: AdamW / AdamS | fits | largest micro-batch: "
             "AdamW / AdamS | s an iteration | hours |", "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for label, adamw, adams in FRONT:
        a, s = by[adamw], by[adams]
        pa, ps = a["plan"], s["plan"]
        lines.append(f"| {label} | {a['gpus']} × {KIND_NAMES[a['kind']]} | {pa['micro_batch']} | "
                     f"{pa['peak_reserved_bytes'] / GiB:.1f} / {ps['peak_reserved_bytes'] / GiB:.1f} | "
                     f"{'yes' if pa['fits'] and ps['fits'] else 'no'} | {pa['largest_micro_batch']} / "
                     f"{ps['largest_micro_batch']} | {pa['iteration_seconds']:.2f} | {pa['run_seconds'] / 3600:,.0f} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=cli.place, default=Path("out/plans"), help="folder for plans.json and README.md")
    parser.add_argument("--only", type=cli.text(), help="plan only the rows whose name holds this text")
    parser.add_argument("--jobs", type=cli.integer(1, 64), default=2, help="plans made at once (one core each)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse the rows OUT/rows/ already holds (after a stopped or failed call); default: plan all")
    args = parser.parse_args(argv)
    todo = [r for r in rows() if args.only is None or args.only in r["name"]]
    if not todo:
        raise UserError(f"--only {args.only}: no row's name holds it; the names: {', '.join(r['name'] for r in rows())}")
    out = Path(args.out)
    folders.check_output(out / "plans.json")

    def made(row: dict) -> dict | str:
        """The row's plan, written to OUT/rows/ as soon as it is made (a failure: its error line, for the end)."""
        path = out / "rows" / f"{row['name']}.json"
        if args.keep and path.is_file():
            return json.loads(path.read_text())
        try:
            done = run_row(row, scratch)
        except UserError as e:
            return str(e)
        folders.write_output(path, json.dumps(done, indent=1).encode())
        return done

    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        scratch = Path(tmp)
        results = list(cli.progress(pool.map(made, todo), "plans", total=len(todo)))
    # the table: every row OUT/rows holds, in the rows' order (an --only call adds to or redoes some of them)
    kept = {path.stem: path for path in (out / "rows").glob("*.json")}
    done = [json.loads(kept[r["name"]].read_text()) for r in rows() if r["name"] in kept]
    lines = table(done)
    grpo = [f"- {r['command']}:\n" + "\n".join(f"  {line}" for line in r["lines"]) for r in done if "lines" in r]
    import torch

    text = "\n".join(["# Plans of the paper's commands", "", f"Made by `python -m scripts.plan_paper --out {args.out}` "
                      f"on a CPU with torch {torch.__version__} (plan.py: the run's own step on fake tensors through a "
                      "model of the CUDA caching allocator; GRPO: scripts/_grpo_memory.py's count). Memory is per GPU, "
                      "eager (an upper bound where a run compiles); hours are the step's FLOPs at the MFU measured on an "
                      "H100 (40%, assumed on the A100), communication not counted. Deterministic: the same code and "
                      "torch give the same bytes on any machine.", "", *lines, "", *grpo, ""])
    folders.write_output(out / "plans.json", json.dumps(done, indent=1).encode())
    folders.write_output(out / "README.md", text.encode())
    print("\n".join(lines))
    failed = [r for r in results if isinstance(r, str)]
    if failed:
        raise UserError(f"{len(failed)} of {len(todo)} plans failed (the rest are written; --keep reuses them): {failed[0]}")
    return done


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
