"""A small chat tokenizer that is a real Transformers tokenizer.

Qwen3's special tokens and its chat format (ChatML: `<|im_start|>role\\n
content<|im_end|>\\n`, `<|im_end|>` ending a turn and generation,
`<|endoftext|>` as padding, no BOS), over a vocabulary of one token per
character of the task's alphabet plus the role names as whole tokens. It is a
`tokenizers` WordLevel model behind `PreTrainedTokenizerFast` with the chat
template set, so `save_pretrained` writes the standard files (the template as
chat_template.jinja), `AutoTokenizer.from_pretrained` reads them back, and TRL
applies the template to `messages` datasets. Padding is on the left, as
greedy generation of a batch needs (TRL's collator pads training batches
itself, on the right).
"""
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from .task import ALPHABET

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
ROLES = ("system", "user", "assistant")

# Qwen3's template without the thinking blocks; the assistant's reply is marked
# with {% generation %} as in TRL's training variants of chat templates
# (trl/chat_templates/qwen3_training.jinja), so that SFTConfig(assistant_only_loss=True)
# can train on the replies alone.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- generation %}{{- message['content'] + '<|im_end|>' }}{%- endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    chars = sorted(set(alphabet) | {"\n"})
    vocab = {tok: i for i, tok in enumerate([PAD, IM_START, IM_END, *ROLES, *chars])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # every character alone
    core.decoder = decoders.Fuse()  # characters join without spaces
    # Role names are matched whole, before the split into characters.
    core.add_tokens([AddedToken(r, normalized=False) for r in ROLES])
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in (PAD, IM_START, IM_END)])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, eos_token=IM_END, padding_side="left")
    tok.chat_template = CHAT_TEMPLATE
    return tok
