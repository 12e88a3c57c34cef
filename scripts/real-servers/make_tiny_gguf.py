#!/usr/bin/env python3
r"""Write a tiny random-weight llama-architecture GGUF model that llama.cpp loads and runs.

No download: the weights are random (seeded, so the file is reproducible) and the vocabulary
is learned here from a short built-in English text. The generated text is gibberish by design;
the model exists to give real inference servers something to serve.

Shape (matches the model behind /work/shared/reference/transcripts/llama-server-tiny-*):
  llama, n_embd 64, 2 layers, 4 heads (head dim 16), FFN 128, context 2048, all F32,
  vocab 503 = 3 specials + 2 ChatML control tokens + 256 byte-fallback tokens <0x00>..<0xFF>
  + 242 SentencePiece-style pieces ("▁the", "ing", ...). ~0.6 MB.

Tokenizer: `llama` (SentencePiece, SPM) with byte fallback, so any UTF-8 text is tokenizable.
Chat template: ChatML (<|im_start|>role ... <|im_end|>), with <|im_end|> as end-of-turn.

The output rows of the special tokens are zero and the other logits are scaled up, so
end-of-generation is (practically) never sampled: every request runs to max_tokens, which is
what a latency probe wants from a test model.

--no-space-prefix writes tokenizer.ggml.add_space_prefix = false. By default llama.cpp's SPM
tokenizer puts a space before the text after a special token ("<|im_start|>assistant" is
<|im_start|>, " a", ...), and its grammar-constrained sampling (tools, response_format) fails
on that: the grammar starts with the literal generation prompt "<|im_start|>assistant\n" and
rejects " a" (400 "Failed to initialize samplers"). Without the space prefix it matches.

--tool-tokens adds Qwen2.5's tool-call markers <tool_call> and </tool_call> as user-defined
tokens (vocab 505) and sets a few weights by hand so that "<tool_call>\n" comes about once in
20 tokens and </tool_call> ends the turn: served with a template that spells calls
"<tool_call>\n{...}\n</tool_call>" (Qwen2.5's, in the llama.cpp source tree), the server's
grammar turns that into real tool calls. Without it, a random model never writes the marker
and `tools` only ever get text.

Usage: make_tiny_gguf.py [--out tiny-llama.gguf] [--seed 0] [--no-space-prefix] [--tool-tokens]
"""
from __future__ import annotations

import argparse
import collections
import sys

import numpy as np

try:
    import gguf
except ImportError:  # pragma: no cover
    sys.exit("needs the gguf package: pip install gguf numpy")

N_VOCAB = 503
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
N_CTX = 2048
SPACE = "\u2581"  # SentencePiece's word-boundary marker

SPECIALS = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2
CONTROL = ["<|im_start|>", "<|im_end|>"]  # ids 3, 4
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]
# Tuned by hand on seeds 0-5: <tool_call> comes about once in 20 tokens of plain output, then
# "\n" (Qwen2.5's template opens a call with "<tool_call>\n"); after </tool_call>, the end of turn.
TOOL_OFFSET = 4.0  # added to every embedding in dimension 0
TOOL_LOGIT = 3.5  # <tool_call>'s output weight on dimension 0
NL_KICK = 8.0  # added to <tool_call>'s embedding in dimension 1
NL_LOGIT = 8.0  # "\n"'s (<0x0A>) output weight on dimension 1
END_KICK = 8.0  # added to </tool_call>'s embedding in dimension 2
END_LOGIT = 8.0  # <|im_end|>'s (end of turn) output weight on dimension 2

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CORPUS = """
The quick brown fox jumps over the lazy dog. Hello, how are you today? I am fine, thank you.
This is a small text that gives the tokenizer some common English pieces to learn from.
A probe sends a request to the server and measures the time to the first token and the total
time of the answer. The model is tiny and its weights are random, so what it says means nothing,
but the server still streams tokens one by one, like a real deployment would do.
Write a short story about a cat who lives in a house near the sea and likes to watch the ships.
What is the capital of France? Please answer in one word. Count from one to ten.
Summarize the following text in two sentences. Translate this sentence into German.
"""


def learn_pieces(n_pieces: int) -> list[tuple[str, float]]:
    """Learn SentencePiece-style pieces by BPE merges on CORPUS; every merge product is a piece.

    llama.cpp's SPM tokenizer merges adjacent symbols whose concatenation is in the vocab,
    best score first, so the merge order is kept as the score (earlier merge = higher score).
    """
    words = collections.Counter(
        SPACE + w for w in CORPUS.replace("\n", " ").split(" ") if w
    )
    seqs = {w: list(w) for w in words}
    chars = sorted({c for w in words for c in w})
    pieces: list[str] = list(chars)
    merged: list[str] = []
    while len(pieces) + len(merged) < n_pieces:
        pairs: collections.Counter[tuple[str, str]] = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        new = a + b
        merged.append(new)
        for w in words:
            s, out, i = seqs[w], [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    # Single characters score lowest; merges score by order (earlier = higher).
    scored = [(p, -1000.0 - i) for i, p in enumerate(pieces)]
    scored += [(p, -float(i)) for i, p in enumerate(merged)]
    return scored[:n_pieces]


def build_vocab(tool_tokens: bool = False) -> tuple[list[str], list[float], list[int]]:
    T = gguf.TokenType
    tokens: list[str] = []
    scores: list[float] = []
    types: list[int] = []
    for t in SPECIALS:
        tokens.append(t)
        scores.append(0.0)
        types.append(T.UNKNOWN if t == "<unk>" else T.CONTROL)
    for t in CONTROL:
        tokens.append(t)
        scores.append(0.0)
        types.append(T.CONTROL)
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(T.BYTE)
    for piece, score in learn_pieces(N_VOCAB - len(tokens)):
        tokens.append(piece)
        scores.append(score)
        types.append(T.NORMAL)
    assert len(tokens) == N_VOCAB, (len(tokens), N_VOCAB)
    if tool_tokens:
        for t in TOOL_TOKENS:
            tokens.append(t)
            scores.append(0.0)
            types.append(T.USER_DEFINED)
    assert len(tokens) == len(set(tokens)), "duplicate token"
    return tokens, scores, types


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tiny-llama.gguf")
    ap.add_argument("--seed", type=int, default=0, help="weights' RNG seed (another seed, another model)")
    ap.add_argument("--no-space-prefix", action="store_true",
                    help="tokenizer.ggml.add_space_prefix = false (needed for grammar-constrained output)")
    ap.add_argument("--tool-tokens", action="store_true",
                    help="add <tool_call> and </tool_call> (user-defined, ids 503 and 504) and make the model "
                         "open a tool call now and then")
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    tokens, scores, types = build_vocab(args.tool_tokens)
    n_vocab = len(tokens)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name("tiny-llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(n_vocab)

    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_eot_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if args.no_space_prefix:
        w.add_add_space_prefix(False)
    w.add_chat_template(CHATML)

    def rand(*shape: int, scale: float | None = None) -> np.ndarray:
        s = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (rng.standard_normal(shape) * s).astype(np.float32)

    # numpy shape is (rows, cols) = (out_features, in_features); GGUF stores it reversed.
    embd = rand(N_VOCAB, N_EMBD, scale=1.0)
    out = rand(N_VOCAB, N_EMBD, scale=0.5)
    out[: len(SPECIALS) + len(CONTROL)] = 0.0  # specials: logit 0, far below the typical max
    if args.tool_tokens:
        # Dimensions 0-2 of the residual stream are kept for the markers: embeddings are
        # TOOL_OFFSET in dimension 0 and 0 in 1-2 (except below), the layers write nothing there
        # (marker_free), and ordinary output rows read nothing there. <tool_call>'s row reads
        # dimension 0 only: its logit is then steadily near the top, so the model opens a tool
        # call every twenty tokens or so instead of never (a random model never spells a marker
        # out). The position after <tool_call> has <tool_call> as input, large in dimension 1,
        # which only "\n"'s row reads: "\n" follows, as the template's "<tool_call>\n" needs.
        # </tool_call> gets a zero row (rare in text, like the specials) but "<" and the
        # whitespace tokens read dimension 0 negatively, so that the grammar (which allows
        # whitespace in a call's JSON and closes it with "</tool_call>") gets compact JSON and
        # the token rather than a spelled-out marker; after </tool_call>, dimension 2 makes
        # <|im_end|> win, so the turn ends after one call, as a real model's does. JSON strings
        # still end only by chance ('"' is as rare as any token): bounded ones (enum,
        # maxLength) complete, free ones usually run into max_tokens.
        tool_rng = np.random.default_rng(args.seed + 1_000_003)
        embd = np.concatenate([embd, tool_rng.standard_normal((2, N_EMBD)).astype(np.float32)])
        embd[:, 0:3] = 0.0
        embd[:, 0] = TOOL_OFFSET
        tc, te = tokens.index("<tool_call>"), tokens.index("</tool_call>")
        nl, eot = tokens.index("<0x0A>"), tokens.index("<|im_end|>")
        embd[tc, 1] += NL_KICK
        embd[te, 2] += END_KICK
        extra = np.zeros((2, N_EMBD), dtype=np.float32)
        extra[0, 0] = TOOL_LOGIT
        out[:, 0:3] = 0.0  # dimensions 0-2 are for these markers only
        out = np.concatenate([out, extra])
        for t in ["<0x3C>", "<0x09>", "<0x0A>", "<0x0D>", "<0x20>", SPACE]:
            out[tokens.index(t), 0] = -TOOL_LOGIT
        out[nl, 1] = NL_LOGIT
        out[eot, 2] = END_LOGIT
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", out)
    n_embd_kv = N_EMBD // N_HEAD * N_HEAD_KV

    def marker_free(m: np.ndarray) -> np.ndarray:
        # --tool-tokens: the layers write nothing into dimensions 0-2 of the residual stream.
        if args.tool_tokens:
            m[0:3] = 0.0
        return m

    for i in range(N_LAYER):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", rand(N_EMBD, N_EMBD))
        w.add_tensor(p + "attn_k.weight", rand(n_embd_kv, N_EMBD))
        w.add_tensor(p + "attn_v.weight", rand(n_embd_kv, N_EMBD))
        w.add_tensor(p + "attn_output.weight", marker_free(rand(N_EMBD, N_EMBD)))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_up.weight", rand(N_FF, N_EMBD))
        w.add_tensor(p + "ffn_down.weight", marker_free(rand(N_EMBD, N_FF)))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.out}: vocab {n_vocab}, n_embd {N_EMBD}, {N_LAYER} layers", file=sys.stderr)


if __name__ == "__main__":
    main()
