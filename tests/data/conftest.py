# Fixture files under tests/data are data, not tests: the stand-in DICE prompts
# module must be parsed by editlens, never imported (doctest collection would import it).
collect_ignore_glob = ["*"]
