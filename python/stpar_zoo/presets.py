"""Published configurations of the zoo's models, with their sources."""

from __future__ import annotations

import dataclasses

ARCHS = ("gpt", "opt", "llama", "bloom", "mixtral")


@dataclasses.dataclass
class Config:
    arch: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq: int
    kv_heads: int | None = None   # None: = heads (multi-head attention)
    experts: int = 0              # MoE: experts per layer (0 = dense FFN)
    top_k: int = 0
    tied: bool = True             # LM head shares the token embedding
    eps: float = 1e-5
    published_params: float | None = None
    source: str = ""

    def __post_init__(self):
        if self.kv_heads is None:
            self.kv_heads = self.heads

    def validate(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown architecture '{self.arch}'")
        for field in ("layers", "hidden", "heads", "ffn", "vocab", "seq",
                      "kv_heads"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of "
                             f"heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of "
                             f"kv-heads {self.kv_heads}")
        if self.kv_heads != self.heads and self.arch not in ("llama",
                                                             "mixtral"):
            raise ValueError("grouped-query attention (kv-heads != heads) "
                             "exists only for llama and mixtral")
        if (self.hidden // self.heads) % 2 and self.arch in ("llama",
                                                             "mixtral"):
            raise ValueError("rotary embedding needs an even head size")
        if self.arch == "mixtral":
            if self.experts <= 0 or not 0 < self.top_k <= self.experts:
                raise ValueError("mixtral needs --experts E and "
                                 "--top-k K with 0 < K <= E")
        elif self.experts or self.top_k:
            raise ValueError("--experts/--top-k apply to mixtral only")


_MEGATRON = ("Narayanan et al., SC'21, 'Efficient Large-Scale Language Model "
             "Training on GPU Clusters Using Megatron-LM', Table 1 "
             "(vocab 51200, seq 2048, FFN 4h)")
_GPT3 = ("Brown et al., NeurIPS'20, 'Language Models are Few-Shot Learners', "
         "Table 2.1 (d_ff = 4 d_model; GPT-2 BPE vocab 50257)")
_OPT = ("Zhang et al., 2022, 'OPT: Open Pre-trained Transformer Language "
        "Models', Table 1; HF config facebook/opt-{}")
_LLAMA2 = ("Touvron et al., 2023, 'Llama 2: Open Foundation and Fine-Tuned "
           "Chat Models', Table 1; HF config meta-llama/Llama-2-{}-hf")
_BLOOM = ("BigScience, 2022, 'BLOOM: A 176B-Parameter Open-Access "
          "Multilingual Language Model', Table 3; HF config "
          "bigscience/bloom{}")
_MIXTRAL = ("Jiang et al., 2024, 'Mixtral of Experts', Table 1; HF config "
            "mistralai/Mixtral-8x7B-v0.1")


def _megatron(params_b, heads, hidden, layers):
    return Config("gpt", layers=layers, hidden=hidden, heads=heads,
                  ffn=4 * hidden, vocab=51200, seq=2048,
                  published_params=params_b * 1e9, source=_MEGATRON)


PRESETS: dict[str, Config] = {
    # Megatron-LM's GPT-3-style family (the configurations of
    # ../shared/calibration/megatron_sc21_a100.csv).
    "gpt3-1.7b": _megatron(1.7, 24, 2304, 24),
    "gpt3-3.6b": _megatron(3.6, 32, 3072, 30),
    "gpt3-7.5b": _megatron(7.5, 32, 4096, 36),
    "gpt3-18b": _megatron(18.4, 48, 6144, 40),
    "gpt3-39b": _megatron(39.1, 64, 8192, 48),
    "gpt3-76b": _megatron(76.1, 80, 10240, 60),
    "gpt3-145b": _megatron(145.6, 96, 12288, 80),
    "gpt3-310b": _megatron(310.1, 128, 16384, 96),
    "gpt3-530b": _megatron(529.6, 128, 20480, 105),
    "gpt3-1t": _megatron(1008.0, 160, 25600, 128),
    # GPT-3 175B itself (the paper reports "175.0B"; 12*l*h^2 + (V+s)*h with
    # V = 50257 gives 174.6e9).
    "gpt3-175b": Config("gpt", layers=96, hidden=12288, heads=96, ffn=49152,
                        vocab=50257, seq=2048, published_params=174.6e9,
                        source=_GPT3),
    "opt-6.7b": Config("opt", layers=32, hidden=4096, heads=32, ffn=16384,
                       vocab=50272, seq=2048, published_params=6.66e9,
                       source=_OPT.format("6.7b")),
    "opt-175b": Config("opt", layers=96, hidden=12288, heads=96, ffn=49152,
                       vocab=50272, seq=2048, published_params=175e9,
                       source=_OPT.format("175b (metaseq)")),
    "llama-2-7b": Config("llama", layers=32, hidden=4096, heads=32,
                         kv_heads=32, ffn=11008, vocab=32000, seq=4096,
                         tied=False, eps=1e-5, published_params=6.74e9,
                         source=_LLAMA2.format("7b")),
    "llama-2-70b": Config("llama", layers=80, hidden=8192, heads=64,
                          kv_heads=8, ffn=28672, vocab=32000, seq=4096,
                          tied=False, eps=1e-5, published_params=68.98e9,
                          source=_LLAMA2.format("70b")),
    "bloom-7b1": Config("bloom", layers=30, hidden=4096, heads=32, ffn=16384,
                        vocab=250880, seq=2048, published_params=7.07e9,
                        source=_BLOOM.format("-7b1")),
    "bloom-176b": Config("bloom", layers=70, hidden=14336, heads=112,
                         ffn=57344, vocab=250880, seq=2048,
                         published_params=176.2e9, source=_BLOOM.format("")),
    "mixtral-8x7b": Config("mixtral", layers=32, hidden=4096, heads=32,
                           kv_heads=8, ffn=14336, vocab=32000, seq=32768,
                           experts=8, top_k=2, tied=False, eps=1e-5,
                           published_params=46.7e9, source=_MIXTRAL),
}

# Defaults of the `custom` choice (tiny, for tests); every field can be set.
CUSTOM_DEFAULTS = dict(layers=2, hidden=32, heads=4, ffn=64, vocab=100, seq=8)
