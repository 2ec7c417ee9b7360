"""A train.py checkpoint as a Hugging Face directory (GPT2LMHeadModel or LlamaForCausalLM), for transformers,
lm-eval-harness or TRL.

    python export.py OUT_DIR HF_DIR                                # the run's latest checkpoint, .pt or sharded .dcp
    python export.py OUT_DIR/checkpoints/ckpt_00001200.pt HF_DIR   # a particular one

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(HF_DIR)           # our logits, to float rounding
    tokenizer = AutoTokenizer.from_pretrained(HF_DIR)

HF_DIR gets config.json and model.safetensors (a GPT2LMHeadModel, or a LlamaForCausalLM for a
``--model=llama`` run), and the tokenizer where the vocabulary is one we know:

- GPT-2's BPE (50,257 tokens): vocab.json and merges.txt, the same content as tiktoken's GPT-2
  files (read from tiktoken's cache, ``TIKTOKEN_CACHE_DIR``, or downloaded);
- bytes (256 tokens, the embedded corpus): a byte-level tokenizer whose ids are the UTF-8 bytes,
  so any text round-trips;
- anything else: no tokenizer, and the command says so.

A vocabulary padded for fast matmuls (50,304) is cropped back to the data's (50,257): the logits
of every real token are unchanged; the padding rows were never a target. A model without biases
(``bias=False``) gets zero biases, which HF's GPT-2 always has. HF_DIR is written beside and swapped in
complete (folders.py); an existing export in HF_DIR is replaced only with --overwrite, and anything
else there (a run, a dataset, other files) never.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import checkpoint
import cli
import contents
import folders
import vocabulary
from errors import UserError, require


def data_vocab(state: dict) -> int:
    """The vocabulary of the data the model was trained on (the model's may be padded)."""
    return state.get("data_vocab", state["model_args"]["vocab_size"])


def export(source: str | Path, hf_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the checkpoint at ``source`` (an out_dir or a checkpoint) to ``hf_dir``; returns it. ``hf_dir`` is
    written beside and swapped in whole; it may replace only an export, and only with ``overwrite``."""
    hf_dir = Path(hf_dir)
    with folders.Destination(hf_dir, makes=contents.EXPORT, option="HF_DIR", command="export.py") as dest:
        dest.allow(overwrite=overwrite)
        require("transformers", "hf")
        model, state = checkpoint.load_model(source)
        vocab = data_vocab(state)
        tmp = dest.stage()
        cli.library_bars_on_terminals_only()
        try:
            model.to_hf(vocab).save_pretrained(tmp)
        except Exception as e:  # safetensors' own error (a full disk, a file-size limit) is no OSError: name the place
            if isinstance(e, OSError) and e.filename:
                raise
            raise UserError(f"{hf_dir}: the weights could not be written ({type(e).__name__}: {str(e)[:160]}); free space "
                            "or raise the file-size limit, then export again (nothing of this export was kept)") from None
        if vocab <= 256:
            tokenizer = vocabulary.byte_tokenizer()
        elif vocab == vocabulary.GPT2_VOCAB:
            tokenizer = vocabulary.gpt2_tokenizer(tmp)
        else:
            tokenizer = None
            print(f"note: a vocabulary of {vocab} tokens is neither bytes nor GPT-2's; no tokenizer written")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / "adams_gpt.json").write_text(json.dumps(dict(source=str(source), iter=state["iter_num"],
                                                            config=state.get("config", {})), indent=2))
        # safetensors made its file private: the export is the user's, readable as theirs are
        mask = folders.umask()
        for path in [tmp, *tmp.rglob("*")]:
            os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
        dest.swap(tmp)
    return hf_dir


def main(argv=None) -> None:
    parser = cli.Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=cli.existing, help="a train.py out_dir (its latest checkpoint) or a checkpoint file or .dcp folder")
    parser.add_argument("hf_dir", type=cli.place, help="the Hugging Face directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace hf_dir if it holds something")
    args = parser.parse_args(argv)

    def write():
        out = export(args.source, args.hf_dir, args.overwrite)
        print(f"wrote {out}: " + ", ".join(sorted(p.name for p in out.iterdir())))

    write()


if __name__ == "__main__":
    raise SystemExit(cli.main(main))
