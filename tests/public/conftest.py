"""The public projects here are test fixtures (their own Python 2 source, kept byte for byte), not
tests: pytest must not collect them (``tools/test_net.py`` would be taken for a test module)."""

collect_ignore_glob = ["*"]
