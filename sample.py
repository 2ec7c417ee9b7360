"""Sample from a trained model: the latest checkpoint of a train.py run, GPT-2, or a Hugging Face directory.

    python sample.py --out_dir=out                                   # the run `python train.py` made
    python sample.py --out_dir=out --start="def main(" --temperature=0 --max_new_tokens=100
    python sample.py --init_from=gpt2 --start=FILE:prompt.txt --num_samples=3   # OpenAI's weights (download)
    python sample.py --init_from=path/to/hf_dir                      # e.g. what export.py wrote

Text is encoded as the model's data was: UTF-8 bytes for a byte-level vocabulary (the embedded
corpus), GPT-2's BPE (tiktoken) for 50,257 tokens, or the Hugging Face directory's own
tokenizer. ``--temperature=0`` is greedy decoding. The same seed gives the same samples.
"""

from __future__ import annotations

import argparse
from contextlib import nullcontext
from pathlib import Path

import torch

import checkpoint
import cli
import configurator
import export
import vocabulary
from architectures import architecture, hf_model_type
from data_parallel import resolve_device
from errors import UserError, require
from model import LanguageModel


def load(args) -> tuple[LanguageModel, int, Path | None]:
    """The model, the vocabulary its data used, and the HF directory it came from (if one)."""
    if args.init_from == "resume":
        if checkpoint.latest(args.out_dir) is None:
            raise UserError(f"no checkpoint in {Path(args.out_dir) / checkpoint.FOLDER}; train first "
                            "(python train.py --out_dir=...), or pass --init_from=gpt2 or a Hugging Face directory")
        model, state = checkpoint.load_model(args.out_dir)
        return model, export.data_vocab(state), None
    require("transformers", "hf")
    try:
        model = architecture(hf_model_type(args.init_from))[0].from_pretrained(args.init_from)
    except Exception as e:  # transformers' errors on a path that is not a model, whatever their class
        raise UserError(f"init_from='{args.init_from}' is neither 'resume' nor a GPT-2 name or Hugging Face directory "
                        f"that can be loaded here ({type(e).__name__})") from e
    hf_dir = Path(args.init_from) if Path(args.init_from).is_dir() else None
    return model.eval(), model.config.vocab_size, hf_dir


def prompt_text(start: str) -> str:
    if not start.startswith("FILE:"):
        try:
            start.encode("utf-8")
        except UnicodeEncodeError as e:  # bytes the shell passed that are not UTF-8 (Python keeps them as surrogates)
            raise UserError(f"--start is not UTF-8 text (character {e.start}); give the prompt in UTF-8, or "
                            "--start=FILE:path") from None
        return start
    path = Path(start.removeprefix("FILE:"))
    if not path.is_file():
        raise UserError(f"--start=FILE:{path}: no such file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"--start=FILE:{path} is not UTF-8 text (byte {e.start}); save the prompt as UTF-8") from None


def sample(args) -> list[str]:
    device = resolve_device(args.device)
    model, vocab, hf_dir = load(args)
    model.to(device)
    encode, decode = vocabulary.encoder_for(vocab, hf_dir)
    ids = encode(prompt_text(args.start))
    if not ids:
        raise UserError("the prompt is empty; give at least one character with --start")
    if max(ids) >= vocab:
        raise UserError(f"the prompt encodes to token id {max(ids)}, outside the model's vocabulary of {vocab}; "
                        "use text the model's tokenizer covers")
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    autocast = nullcontext() if dtype == torch.float32 else torch.autocast(device.type, dtype=dtype)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    x = torch.tensor([ids], dtype=torch.long, device=device)
    out = []
    with autocast:
        for _ in range(args.num_samples):
            y = model.generate(x, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                               generator=generator, vocab_size=vocab)
            out.append(decode(y[0].tolist()))
    return out


def after_training(model: LanguageModel, device: torch.device, seed: int, vocab_size: int, length: int = 300) -> str:
    """A sample of ``length`` tokens after a newline, to see what a run just learned (train.py prints it)."""
    prompt = torch.tensor([[vocabulary.newline(vocab_size)]], device=device)
    out = model.eval().generate(prompt, length, temperature=0.8, top_k=50,
                                generator=torch.Generator(device=device).manual_seed(seed))
    return vocabulary.decode(out[0].tolist(), vocab_size)


# 0 is greedy; a positive temperature below 1e-3 divides the logits past what a float holds (use 0 for greedy)
TEMPERATURE = cli.Kind("0 (greedy) or a number from 0.001 to 1e6", float,
                       lambda t: t == 0 or 1e-3 <= t <= 1e6, float)


def parse_args(argv=None) -> argparse.Namespace:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", type=cli.text("a run's folder"), default="out", help="the run to sample from (its latest checkpoint)")
    parser.add_argument("--init_from", type=cli.text(), default="resume", help="'resume' (out_dir), a GPT-2 name, or a Hugging Face directory")
    parser.add_argument("--start", default="\n", help="the prompt, or FILE:path to read it from a file")
    parser.add_argument("--num_samples", type=cli.integer(1, 10_000), default=1)
    parser.add_argument("--max_new_tokens", type=cli.integer(0, 10_000_000), default=300)
    parser.add_argument("--temperature", type=TEMPERATURE, default=0.8, help="0: greedy; below 1: more conservative")
    parser.add_argument("--top_k", type=cli.count, default=200, help="sample among the k most likely tokens")
    parser.add_argument("--seed", type=cli.seed, default=1337)
    parser.add_argument("--device", type=configurator.kinds()["device"][1], default="auto", help="'cpu', 'cuda', 'cuda:N', 'mps', or 'auto'")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)

    def show():
        for text in sample(args):
            print(text)
            print("---------------")

    show()


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
