"""Writes a small Llama-style model with random weights (transformers' save_pretrained)
and a byte-level BPE tokenizer trained here, so vLLM can serve it with nothing
downloaded. Four attention heads over two KV heads, so tensor parallelism 2 splits
both. The sizes can be raised for benchmarks (bench/vllm_refit.sh).
    make_model.py OUT_DIR [--hidden H --intermediate I --layers L --heads N --kv-heads K
                           --vocab V]"""
import argparse

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TOKENIZER_VOCAB = 512


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--intermediate", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=TOKENIZER_VOCAB)
    args = parser.parse_args()
    out = args.out
    corpus = ["The quick brown fox jumps over the lazy dog.",
              "Reinforcement learning moves new weights into inference engines.",
              "Once upon a time there was a small model with random weights."] * 20
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>", pad_token="<pad>").save_pretrained(out)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                         pad_token_id=3, tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main()
