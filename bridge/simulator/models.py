"""The models the simulator offers, and agy's answer to an unknown ``--model``."""

from __future__ import annotations

# (id, display name) as `agy models` and the "Available models" error list them.
MODELS: tuple[tuple[str, str], ...] = (
    ("gemini-3.8-flash-low", "Gemini 3.8 Flash (Low)"),
    ("gemini-3.8-flash-high", "Gemini 3.8 Flash (High)"),
    ("gemini-3.1-pro-high", "Gemini 3.1 Pro (High)"),
    ("claude-sonnet-4.6-thinking", "Claude Sonnet 4.6 (Thinking)"),
    ("gpt-oss-120b-medium", "GPT-OSS 120B (Medium)"),
    ("sim-echo", "Simulator Echo"),
)

# Any name with one of these prefixes is "known", so tests can invent model names freely.
KNOWN_PREFIXES = ("gemini-", "claude-", "gpt-", "sim-")

DEFAULT_MODEL = "gemini-3.8-flash-low"


def is_known(model: str) -> bool:
    return model.startswith(KNOWN_PREFIXES)


def listing() -> str:
    return "".join(f"{model_id}\n" for model_id, _ in MODELS)


def invalid_model_error(model: str, effort: str) -> str:
    available = "\n".join(f"  {name}" for _, name in MODELS)
    return (
        f'invalid model selection (--model "{model}" --effort "{effort}"): model {model} is '
        "not recognized as a known model or custom model in settings\n"
        f"Available models:\n{available}"
    )
