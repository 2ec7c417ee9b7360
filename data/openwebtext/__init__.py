"""OpenWebText (or local files) as GPT-2 BPE tokens."""
