# A stand-in for the prompts module of the original DICE repository: the same
# variable names and placeholder structure, with editlens' own short wording.
# It is parsed, never imported; the assignment below would fail if it ran.
import does_not_exist  # noqa: F401

PRETRAIN_PROMPT_NOCHANGE = """
    Name what differs: "<COMMAND>: <object>, (<box>)".
"""

PROMPT_DIFFERENCE_COHERENCE_SYSTEM = """
Check one change against the request.
"""

PROMPT_DIFFERENCE_COHERENCE = (
    CONTENT_MESSAGE
) = """
Request: {SUBTSITUTE_PROMPT}
Change: {SUBTSITUTE_CHANGE}
"""

UNUSED_PROMPT = f"not a constant {1 + 1}"
