"""C4 English (Raffel et al., 2020), the AdamS paper's Llama 2 data, or local files like it."""
