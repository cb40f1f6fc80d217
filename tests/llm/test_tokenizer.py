"""tg_core.llm.tokenizer and chat: byte-level BPE by merge rank, the pre-tokenizers (against the `regex`
module's \\p{L}/\\p{N} as the reference), special tokens, round trips, UTF-8-safe streaming, SmolLM2's prompt
ids (llm.md 7.2) and chat templates."""
from __future__ import annotations

import pytest

from tg_core.llm.chat import CHATML, ChatTemplate, ChatTemplateError
from tg_core.llm.tokenizer import CONTROL, NORMAL, PRE_TOKENIZERS, Tokenizer, _byte_chars, pretokenize

SAMPLES = ["Hello world", "  two  spaces\n\nand newlines\n", "I'm sure you've 2 dogs, they'll DON'T",
           "numbers 1234567 and 3.14159", "héllo wörld ✓ 日本語 😀 ñ", "tabs\tand\r\nCRLF", "!!!???...", "x" * 50,
           "a\u00a0b\u2003c", "emoji👍🏽 family👨‍👩‍👧", "mixed123abc456 ٣٤٥ Ⅻ", ""]

# the pre-tokenizers' regexes as llama.cpp writes them, with Unicode properties (for the `regex` module)
REFERENCE = {
    "gpt2": [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
    "llama-bpe": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+"],
    "qwen2": [r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
              r"\s+(?!\S)|\s+"],
    "smollm": [r"\p{N}", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"],
}


def _reference_split(text: str, pats: list[str]) -> list[str]:
    regex = pytest.importorskip("regex")
    pieces = [text]
    for p in pats:
        out = []
        for piece in pieces:
            pos = 0
            for m in regex.finditer(p, piece):
                if m.start() > pos:
                    out.append(piece[pos:m.start()])
                out.append(m.group())
                pos = m.end()
            if pos < len(piece):
                out.append(piece[pos:])
        pieces = out
    return pieces


def test_byte_table_is_gpt2s():
    t = _byte_chars()
    assert len(set(t)) == 256 and t[ord(" ")] == "Ġ" and t[ord("\n")] == "Ċ" and t[ord("a")] == "a"
    assert all(ord(c) < 0x200 for c in t)


@pytest.mark.parametrize("pre", sorted(REFERENCE))
def test_pretokenizers_match_the_unicode_regexes(pre):
    for s in SAMPLES:
        assert pretokenize(s, pre) == _reference_split(s, REFERENCE[pre]), (pre, s)
        assert "".join(pretokenize(s, pre)) == s


def test_every_listed_pre_tokenizer_compiles():
    for pre in PRE_TOKENIZERS:
        assert "".join(pretokenize("Hi 42 there!\n", pre)) == "Hi 42 there!\n"


def _toy(merges, pre="gpt2", extra=()):
    """A vocabulary of the 256 byte tokens, the merged tokens, then control tokens."""
    b = list(_byte_chars())
    merged = []
    for m in merges:
        left, right = m.split(" ")
        merged.append(left + right)
    tokens = b + merged + list(extra)
    types = [NORMAL] * (len(b) + len(merged)) + [CONTROL] * len(extra)
    return Tokenizer(tokens, types, merges, pre, bos_id=None, eos_id=len(tokens) - 1 if extra else None)


def test_bpe_merges_by_rank_not_by_id():
    # ranks: "b c" first, then "a bc"; the id order of the merged tokens is the reverse of their rank order
    tok = _toy(["b c", "a b", "a bc"])
    ids = {t: i for i, t in enumerate(tok.tokens)}
    assert tok.encode("abc") == [ids["abc"]]   # bc (rank 0), then a+bc (rank 2); never ab (rank 1)
    assert tok.encode("ab") == [ids["ab"]]
    assert tok.encode("cab") == [ids["c"], ids["ab"]]
    tok2 = _toy(["a b", "b c", "ab c"])
    ids2 = {t: i for i, t in enumerate(tok2.tokens)}
    assert tok2.encode("abc") == [ids2["abc"]]  # ab first, then ab+c


def test_special_tokens_are_split_out():
    tok = _toy(["h i"], extra=["<|end|>", "<|x|>"])
    end = tok.tokens.index("<|end|>")
    ids = tok.encode("hi<|end|> hi")
    assert ids[0] == tok.tokens.index("hi") and ids[1] == end
    assert tok.decode(ids) == "hi<|end|> hi"
    assert end not in tok.encode("hi<|end|>", allow_special=False)
    assert tok.decode(ids, skip_special=True) == "hi hi"


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="pre-tokenizer 'nope' is not supported.*llama-bpe"):
        Tokenizer(list(_byte_chars()), pre="nope")
    with pytest.raises(NotImplementedError, match="'llama'.*SentencePiece"):
        Tokenizer.from_gguf_metadata({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": []})
    with pytest.raises(IndexError, match="token id 999 is outside the vocabulary of 256"):
        Tokenizer(list(_byte_chars())).decode([999])


def test_stream_decoder_waits_for_whole_characters():
    tok = Tokenizer(list(_byte_chars()))  # byte tokens only: every multi-byte character is split
    text = "aé✓😀b"
    ids = tok.encode(text)
    assert len(ids) == len(text.encode())
    dec, pieces = tok.stream(), []
    for i in ids:
        pieces.append(dec.feed(i))
    assert "".join(pieces) + dec.flush() == text
    assert pieces[:3] == ["a", "", "é"] and "\ufffd" not in "".join(pieces)
    dec2 = tok.stream()
    dec2.feed(ids[1])
    assert dec2.flush() == "\ufffd"  # a character cut off at the end of the stream


# ---- SmolLM2 -------------------------------------------------------------------------------------------

PROMPT = "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
PROMPT_IDS = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]


@pytest.fixture(scope="module")
def smol_tok(smollm2):
    return Tokenizer.from_gguf_metadata(smollm2.metadata)


def test_smollm2_prompt_ids(smol_tok):
    assert smol_tok.pre == "smollm" and smol_tok.bos_id == 1 and smol_tok.eos_id == 2 and not smol_tok.add_bos
    assert smol_tok.encode(PROMPT) == PROMPT_IDS
    assert smol_tok.decode([504, 3575, 282, 4649, 314, 7042, 30]) == "The capital of France is Paris."
    assert smol_tok.stop_ids == {2}


def test_smollm2_round_trip_and_digits(smol_tok):
    for s in SAMPLES:
        assert smol_tok.decode(smol_tok.encode(s)) == s
    one = [smol_tok.tokens[i] for i in smol_tok.encode("12345")]
    assert one == list("12345")  # smollm splits every digit


def test_smollm2_template(smollm2, smol_tok):
    t = ChatTemplate.from_gguf_metadata(smollm2.metadata)
    text = t.render([{"role": "user", "content": "What is the capital of France?"}])
    assert text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert text.endswith(PROMPT)
    with_system = t.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert with_system == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert smol_tok.encode(text)[-len(PROMPT_IDS):] == PROMPT_IDS


def test_chatml_fallback_and_template_helpers():
    t = ChatTemplate(None)
    assert t.source == CHATML
    assert t.render([{"role": "user", "content": "What is the capital of France?"}]) == PROMPT
    assert t.render([{"role": "user", "content": "x"}], add_generation_prompt=False) == "<|im_start|>user\nx<|im_end|>\n"
    j = ChatTemplate("{{ messages[0] | tojson }}{{ bos_token }}", bos_token="<s>")
    assert j.render([{"role": "user", "content": "<b>&"}]) == '{"role": "user", "content": "<b>&"}<s>'
    r = ChatTemplate("{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}{% endif %}")
    with pytest.raises(ChatTemplateError, match="system first"):
        r.render([{"role": "user", "content": "x"}])
    with pytest.raises(ValueError, match="role 'robot'"):
        t.render([{"role": "robot", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for %}")
