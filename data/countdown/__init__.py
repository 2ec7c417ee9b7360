"""The Countdown numbers game (TinyZero's), for GRPO post-training: problems, prompts, the reward."""
