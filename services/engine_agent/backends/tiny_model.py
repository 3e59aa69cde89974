"""Build a tiny random-weight Qwen3-style model and a byte-level BPE tokenizer, locally.

Real engines need a model, and no hub is reachable: this builds one in about two seconds from
nothing but ``transformers``, ``tokenizers`` and the standard library's own source files (the
tokenizer's training text). The output is junk text and EOS almost never comes, which is what
serving tests want: ``ignore_eos`` and ``max_tokens`` fix every length.

The folder is keyed by a hash of the configuration, so a second call returns at once. Used by the
real-engine tests, ``dynbranch calibrate`` and ``dynbranch bench fidelity``; ``torch`` and
``transformers`` are imported only when a build is needed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sysconfig
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

#: Bump when the build itself changes, so cached folders are rebuilt.
BUILD_VERSION = 2
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: ChatML; with tools, Qwen3's hermes-style layout (the tools as JSON lines inside <tools> in the
#: system turn, calls as <tool_call> blocks, results as <tool_response> blocks in a user turn),
#: the same layout the gateway renders (services/gateway/http/chat.py). Every newline after a
#: block tag is written as an expression: chat templates trim the first one.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system{{ '\\n' }}"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{{ '\\n\\n' }}"
    "{% endif %}# Tools\n\nYou may call one or more functions to assist with the user query."
    "\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}"
    "{{ '\\n' }}</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% endif %}"
    "{% for m in messages %}"
    "{% if tools and loop.first and m['role'] == 'system' %}"
    "{% elif m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user"
    "{% endif %}{{ '\\n<tool_response>\\n' }}{{ m['content'] }}{{ '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}{% if m['content'] or not loop.first %}{{ '\\n' }}"
    "{% endif %}<tool_call>\n{\"name\": {{ c['function']['name'] | tojson }}, \"arguments\": "
    "{% if c['function']['arguments'] is string %}{{ c['function']['arguments'] }}"
    "{% else %}{{ c['function']['arguments'] | tojson }}{% endif %}}\n</tool_call>"
    "{% endfor %}<|im_end|>{{ '\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True, slots=True)
class TinyModelConfig:
    """Shape of the tiny model (defaults: 4.5 M parameters, 9 MB in bf16)."""

    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 512
    vocab_size: int = 8192
    max_position_embeddings: int = 4096
    seed: int = 0
    tokenizer_files: int = 400

    def key(self) -> str:
        """Short hash naming the build folder."""
        blob = json.dumps({**asdict(self), "build": BUILD_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def default_cache_root() -> Path:
    """``.dynbranch/`` at the repository root (gitignored)."""
    return Path(__file__).resolve().parents[3] / ".dynbranch"


def build_tiny_model(cache_root: Path | None = None, config: TinyModelConfig | None = None) -> Path:
    """Return the folder of the tiny model, building it on first use."""
    config = config or TinyModelConfig()
    root = (cache_root or default_cache_root()) / "models"
    target = root / f"tiny-qwen3-{config.key()}"
    if (target / "config.json").exists() and (target / "tokenizer.json").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename: a concurrent or killed build never leaves half a model.
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    _build_tokenizer(staging, config)
    _build_weights(staging, config)
    try:
        staging.rename(target)
    except OSError:  # another process finished first
        _rmtree(staging)
    logger.info("built tiny model at %s", target)
    return target


def _training_files(count: int) -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(str(p) for p in stdlib.glob("*.py"))
    files += sorted(str(p) for p in stdlib.glob("*/*.py"))
    return files[:count]


def _build_tokenizer(folder: Path, config: TinyModelConfig) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(_training_files(config.tokenizer_files), trainer)
    if tok.get_vocab_size() != config.vocab_size:
        raise RuntimeError(
            f"tokenizer has {tok.get_vocab_size()} tokens, wanted {config.vocab_size}")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        model_max_length=config.max_position_embeddings,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(folder))


def _build_weights(folder: Path, config: TinyModelConfig) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    ids = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    qcfg = Qwen3Config(
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        intermediate_size=config.intermediate_size,
        vocab_size=config.vocab_size,
        max_position_embeddings=config.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
        torch_dtype="bfloat16",
    )
    torch.manual_seed(config.seed)
    model = Qwen3ForCausalLM(qcfg).to(torch.bfloat16)
    model.save_pretrained(str(folder), safe_serialization=True)


def _rmtree(path: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(path, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            os.rmdir(os.path.join(dirpath, name))
    os.rmdir(path)


__all__ = ["TinyModelConfig", "build_tiny_model", "default_cache_root"]
