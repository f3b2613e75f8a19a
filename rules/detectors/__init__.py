"""One module per pack; each exposes a detector class and its `RULES`."""
