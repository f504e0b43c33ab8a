"""A character-level tokenizer that is a real Transformers tokenizer.

One token per character of the task's alphabet plus <pad>, <bos> and <eos>, as
a `tokenizers` WordLevel model behind `PreTrainedTokenizerFast`, so that
`save_pretrained` writes the standard files and `AutoTokenizer.from_pretrained`
reads them back. Encoding prepends <bos>; padding is on the left, as greedy
generation of a batch needs.
"""
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from .task import ALPHABET

PAD, BOS, EOS = "<pad>", "<bos>", "<eos>"


def build_tokenizer(alphabet: str = ALPHABET) -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, *alphabet])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=PAD))
    core.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")  # every character alone
    core.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B", special_tokens=[(BOS, vocab[BOS])])
    core.decoder = decoders.Fuse()  # characters join without spaces
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=PAD, bos_token=BOS,
                                   eos_token=EOS, padding_side="left")
