"""Token files: the header is checked against the file, and writes are all-or-nothing."""

import numpy as np
import pytest

from errors import UserError
from tokens import HEADER, TokenWriter, read_tokens, write_tokens


@pytest.mark.parametrize("vocab, dtype", [(256, np.uint16), (50257, np.uint16), (100_277, np.uint32)])
def test_round_trip_and_dtype(tmp_path, vocab, dtype):
    tokens = np.array([0, 1, vocab - 1, 7], dtype=np.int64)
    write_tokens(tmp_path / "t.bin", tokens, vocab)
    read, read_vocab = read_tokens(tmp_path / "t.bin")
    assert read_vocab == vocab and read.dtype == dtype
    assert read.tolist() == tokens.tolist()
    assert (tmp_path / "t.bin").stat().st_size == HEADER.size + 4 * np.dtype(dtype).itemsize


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "t.bin"
    write_tokens(path, np.arange(100), 256)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(UserError, match="t.bin is .* bytes but its header promises 100 tokens .* truncated"):
        read_tokens(path)


def test_foreign_file_is_a_clear_error(tmp_path):
    path = tmp_path / "t.bin"
    np.arange(100, dtype=np.uint16).tofile(path)  # nanoGPT's headerless format
    with pytest.raises(UserError, match="is not a token file \\(bad magic\\)"):
        read_tokens(path)


def test_wrong_dtype_in_header_is_a_clear_error(tmp_path):
    path = tmp_path / "t.bin"
    write_tokens(path, np.arange(10), 256)
    raw = bytearray(path.read_bytes())
    raw[12:16] = (4).to_bytes(4, "little")  # claims uint32 tokens for a 256-token vocabulary
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="stores 4-byte tokens, wrong for vocab size 256"):
        read_tokens(path)


def test_missing_file_names_the_fix(tmp_path):
    with pytest.raises(UserError, match="does not exist; run the dataset's prepare.py"):
        read_tokens(tmp_path / "nope.bin")


def test_interrupted_write_leaves_nothing_complete_looking(tmp_path):
    path = tmp_path / "t.bin"
    with pytest.raises(RuntimeError):
        with TokenWriter(path, 256) as w:
            w.write(np.arange(50))
            raise RuntimeError("killed")
    assert not path.exists() and not list(tmp_path.iterdir())


def test_writer_refuses_tokens_outside_the_vocabulary(tmp_path):
    with pytest.raises(ValueError, match="token id 300 is >= vocab_size 256"):
        write_tokens(tmp_path / "t.bin", np.array([1, 300]), 256)
    assert not (tmp_path / "t.bin").exists()


def test_concurrent_writers_of_one_file_do_not_collide(tmp_path):
    # two writers of the same file at once (a sweep's first runs, or a run's ranks, preparing the
    # embedded dataset together): each finishes, and the file is whole
    path = tmp_path / "d" / "train.bin"
    first, second = TokenWriter(path, 256), TokenWriter(path, 256)
    first.write(np.arange(1000) % 256)
    second.write(np.arange(1000) % 256)
    first.close()
    second.close()
    tokens, _ = read_tokens(path)
    assert np.array_equal(tokens, np.arange(1000) % 256)
    assert [p.name for p in path.parent.iterdir()] == ["train.bin"]  # no temporary file left behind
