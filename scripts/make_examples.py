"""Write the example workloads examples/arxiv.jsonl and examples/bwb.jsonl (deterministic, seeded).

Both files hold synthetic text whose *lengths* follow published statistics; the words are
pseudo-English (arXiv) and pseudo-pinyin (BWB) filler. Each prompt's character count is chosen
so that tuner's offline estimate (`tuner.core.workload.estimate_tokens`: ceil(characters / 4), plus
`CHAT_MESSAGE_OVERHEAD_TOKENS` per chat message) gives exactly the intended prompt length; a real
tokenizer will count this filler differently.

arxiv.jsonl — arXiv paper summarisation, OpenAI Batch API format (/v1/chat/completions, model
"llama-3-8b", one user message "Summarize the following paper.\\n\\n" + paper, max_tokens =
summary length).

* Prompt median 2730 / P90 3702 tokens and output median 167 / P90 372 tokens, with
  prompt + output <= 4096: the published percentiles of the filtered arXiv-summarisation trace
  that ships with Microsoft's Vidur simulator (arxiv_summarization_stats_llama2_tokenizer_
  filtered_v2.csv, Llama-2 tokenizer, total <= 4096; figures quoted in shared/traces/README.md).
  The trace's rows are not read here: only these four percentiles are used.
* For context, Sarathi-Serve (Table 2) reports the *unfiltered* dataset at prompt
  median 7059 / P90 12985 and output median 208 / P90 371: the 4096-token cap (which Vasuki,
  Vasuki §6.1.4, also uses: "context lengths up to 4096") keeps the shorter papers.
* Model: prompt ~ LogNormal(mu_p, sigma_p) truncated to [64, 4095]; output | prompt ~
  LogNormal(mu_o, sigma_o) truncated to [1, 4096 - prompt]. Both pairs are fitted
  (`fit_truncated_lognormal`) so that the marginals *after* truncation have the published
  median and P90: the 4096 cap binds on the longest prompts and squeezes their outputs, the
  negative dependence a length-filtered trace has. (The reverse, truncating prompts given
  independent outputs, did not reach the published pair: at prompt P90 3702 its prompt
  median stayed near 2870, falling only slowly as sigma grows.) Fitted: mu_p 7.984,
  sigma_p 0.344 (untruncated median 2937); mu_o 5.171, sigma_o 0.627 (untruncated median
  176). Achieved on the 400 requests: prompt median 2730 / P90 3699, output median 166 /
  P90 379. Not modelled: the trace's long output tail (its output P99 is ~3270 tokens), so
  the overall P:D here is ~13.5 where the trace's is ~8.9 (both from `workload_stats`).
* 400 requests (the file stays under ~5 MB).

bwb.jsonl — BWB (Bilingual Web Book, Jiang et al. 2022: Chinese web novels translated into
English), plain {"prompt", "max_tokens"} format, prompt "Translate the following Chinese text
into English.\\n\\n" + passage.

* Seed 000 (Vasuki) §6.1.3 says only that BWB has a low prompt-to-decode (P:D) ratio, "< 1 on
  average": the translation is as long as or longer than the input; §6.1.4 caps context at
  4096 tokens and uses Llama-3-8B. It publishes no length percentiles, so the rest is our choice:
* Prompt ~ LogNormal fitted (after truncation) to median 800 / P90 1400 tokens: a chapter
  excerpt of under a thousand tokens, so that source + translation (~2.25x the source) fits in
  the 4096-token context with room to spare for nearly all requests (P90: 1400 * 2.25 = 3150).
* Output = round(prompt * r), r ~ LogNormal(ln 1.25, 0.15) (r between ~0.98 and ~1.60 for 90%
  of requests): the English translation runs ~25% more tokens than the Chinese source, so the
  per-request P:D median is ~0.8 and the overall P:D is below 1, as Vasuki reports. Output
  median ~1000 tokens.
* prompt * (1 + r) <= 4096: the prompt is truncated given r (fitted: mu 6.737, sigma 0.532).
  Achieved: prompt median 801 / P90 1402, output median 994 / P90 1765, P:D 0.79.
* 400 requests.

Sampling is Latin-hypercube stratified (one draw per 1/n quantile slice of each variable, in a
seeded random order), so even 400 requests land close to the target percentiles.

Run from the repository root:  python scripts/make_examples.py [--out-dir examples]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import NormalDist

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tuner.core.workload import (  # noqa: E402  (after the sys.path fix-up)
    CHARS_PER_TOKEN,
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    chat_message_text,
    load_workload,
    workload_stats,
)

SEED = 2024
MAX_TOTAL = 4096  # trace filter (total <= 4096) and Vasuki §6.1.4 context limit
MIN_PROMPT = 64  # floor on prompt tokens (keeps room for the instruction prefix)
Z90 = NormalDist().inv_cdf(0.9)  # 1.2816

# arXiv summarisation: published percentiles of the filtered Vidur trace (see docstring).
ARXIV_N = 400
ARXIV_PROMPT_P50, ARXIV_PROMPT_P90 = 2730, 3702
ARXIV_OUTPUT_P50, ARXIV_OUTPUT_P90 = 167, 372
ARXIV_INSTRUCTION = "Summarize the following paper.\n\n"
ARXIV_MODEL = "llama-3-8b"

# BWB translation: our choice within Vasuki's constraints (P:D < 1, context <= 4096).
BWB_N = 400
BWB_PROMPT_P50, BWB_PROMPT_P90 = 800, 1400
BWB_RATIO_MEDIAN, BWB_RATIO_SIGMA = 1.25, 0.15  # output tokens / prompt tokens
BWB_INSTRUCTION = "Translate the following Chinese text into English.\n\n"

_ND = NormalDist()
_norm_cdf = np.vectorize(_ND.cdf, otypes=[float])
_norm_ppf = np.vectorize(_ND.inv_cdf, otypes=[float])


# ---------------------------------------------------------------------------------------
# Distributions


def lognormal_from_percentiles(p50: float, p90: float) -> tuple[float, float]:
    """(mu, sigma) of the log-normal with this median and P90."""
    return math.log(p50), math.log(p90 / p50) / Z90


def truncated_lognormal_ppf(
    u: np.ndarray, mu: float, sigma: float, lo: float, hi: np.ndarray
) -> np.ndarray:
    """Quantile u of LogNormal(mu, sigma) truncated to [lo, hi] (hi per sample)."""
    f_lo = _norm_cdf((math.log(lo) - mu) / sigma)
    f_hi = _norm_cdf((np.log(hi) - mu) / sigma)
    q = np.clip(f_lo + u * (f_hi - f_lo), 1e-12, 1 - 1e-12)
    return np.exp(mu + sigma * _norm_ppf(q))


def _mixture_quantile(q: float, mu: float, sigma: float, lo: float, caps: np.ndarray) -> float:
    """Quantile q of the prompt marginal: an equal mixture of truncations to [lo, cap_k]."""
    f_lo = _norm_cdf((math.log(lo) - mu) / sigma)
    f_caps = _norm_cdf((np.log(caps) - mu) / sigma)

    def cdf(x: float) -> float:
        fx = _norm_cdf((math.log(min(x, caps.max())) - mu) / sigma)
        return float(np.mean(np.clip((np.minimum(fx, f_caps) - f_lo) / (f_caps - f_lo), 0, 1)))

    a, b = lo, float(caps.max())
    for _ in range(60):
        m = 0.5 * (a + b)
        a, b = (m, b) if cdf(m) < q else (a, m)
    return 0.5 * (a + b)


def fit_truncated_lognormal(
    p50: float, p90: float, lo: float, caps: np.ndarray
) -> tuple[float, float]:
    """(mu, sigma) such that LogNormal(mu, sigma) truncated to [lo, cap] (cap drawn from
    `caps`, a quantile grid of the other variable) has median p50 and P90 p90.

    Newton's method on (mu, ln sigma) with a finite-difference Jacobian and step halving; the
    untruncated fit is the start. (Truncation makes P90 fall as sigma grows past a point, so a
    naive fixed-point update does not converge.)"""
    target = np.log([p50, p90])

    def resid(x: np.ndarray) -> np.ndarray:
        mu, sigma = float(x[0]), math.exp(float(x[1]))
        q = [_mixture_quantile(p, mu, sigma, lo, caps) for p in (0.5, 0.9)]
        return np.log(q) - target

    mu0, s0 = lognormal_from_percentiles(p50, p90)
    x = np.array([mu0, math.log(s0)])
    r = resid(x)
    for _ in range(100):
        if np.abs(r).max() < 1e-6:
            return float(x[0]), math.exp(float(x[1]))
        h = 1e-5
        jac = np.column_stack([(resid(x + h * e) - r) / h for e in np.eye(2)])
        step = np.linalg.solve(jac, -r)
        t = 1.0
        while t > 1e-4:
            x_new = x + t * step
            r_new = resid(x_new)
            if np.abs(r_new).max() < np.abs(r).max():
                break
            t /= 2
        x, r = x_new, r_new
    raise RuntimeError(f"fit did not converge (residual {r})")


def lhs_uniforms(rng: np.random.Generator, n: int, dims: int) -> np.ndarray:
    """Latin-hypercube uniforms, shape (dims, n): each row has one draw per 1/n slice."""
    return np.stack([(rng.permutation(n) + rng.random(n)) / n for _ in range(dims)])


def _grid(n: int = 2000) -> np.ndarray:
    return (np.arange(n) + 0.5) / n


# ---------------------------------------------------------------------------------------
# Lengths


def arxiv_lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, dict]:
    p_hi = float(MAX_TOTAL - 1)  # leave room for at least one output token
    mu_p, s_p = fit_truncated_lognormal(
        ARXIV_PROMPT_P50, ARXIV_PROMPT_P90, MIN_PROMPT, np.array([p_hi])
    )

    def prompts(u: np.ndarray) -> np.ndarray:
        p = np.rint(truncated_lognormal_ppf(u, mu_p, s_p, MIN_PROMPT, np.full(u.shape, p_hi)))
        return np.clip(p, MIN_PROMPT, p_hi).astype(np.int64)

    caps = (MAX_TOTAL - prompts(_grid())).astype(float)
    mu_o, s_o = fit_truncated_lognormal(ARXIV_OUTPUT_P50, ARXIV_OUTPUT_P90, 1.0, caps)
    u_p, u_o = lhs_uniforms(rng, n, 2)
    prompt = prompts(u_p)
    cap = MAX_TOTAL - prompt
    out = np.rint(truncated_lognormal_ppf(u_o, mu_o, s_o, 1.0, cap.astype(float)))
    out = np.clip(out, 1, cap).astype(np.int64)
    params = {"prompt_mu": mu_p, "prompt_sigma": s_p, "output_mu": mu_o, "output_sigma": s_o}
    return prompt, out, params


def bwb_lengths(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, dict]:
    mu_r, s_r = math.log(BWB_RATIO_MEDIAN), BWB_RATIO_SIGMA

    def caps_for(r: np.ndarray) -> np.ndarray:  # largest p with p + round(p * r) <= MAX_TOTAL
        return np.floor((MAX_TOTAL - 0.5) / (1.0 + r))

    grid_r = np.exp(mu_r + s_r * _norm_ppf(_grid()))
    mu_p, s_p = fit_truncated_lognormal(
        BWB_PROMPT_P50, BWB_PROMPT_P90, MIN_PROMPT, caps_for(grid_r)
    )
    u_r, u_p = lhs_uniforms(rng, n, 2)
    r = np.exp(mu_r + s_r * _norm_ppf(u_r))
    cap = caps_for(r)
    prompt = np.rint(truncated_lognormal_ppf(u_p, mu_p, s_p, MIN_PROMPT, cap))
    prompt = np.clip(prompt, MIN_PROMPT, cap).astype(np.int64)
    out = np.maximum(np.rint(prompt * r), 1).astype(np.int64)
    assert (prompt + out <= MAX_TOTAL).all()
    params = {"ratio_mu": mu_r, "ratio_sigma": s_r, "prompt_mu": mu_p, "prompt_sigma": s_p}
    return prompt, out, params


# ---------------------------------------------------------------------------------------
# Filler text


_ENGLISH_FUNCTION_WORDS = [
    "the",
    "of",
    "and",
    "in",
    "to",
    "a",
    "is",
    "we",
    "that",
    "for",
    "with",
    "on",
    "by",
    "this",
    "as",
    "are",
    "model",
    "results",
    "show",
    "which",
]
_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "st",
    "pr",
    "tr",
    "gr",
    "cl",
    "th",
    "sh",
    "ch",
]
_VOWELS = ["a", "e", "i", "o", "u", "ea", "io", "ou"]
_CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "tion", "ment", "ing", "ed", "al"]
_PINYIN = [
    "zhong",
    "guo",
    "ren",
    "de",
    "shi",
    "wo",
    "ni",
    "ta",
    "shuo",
    "le",
    "yi",
    "ge",
    "bu",
    "zai",
    "you",
    "zhe",
    "na",
    "men",
    "lai",
    "qu",
    "dao",
    "xin",
    "tian",
    "jian",
    "xiang",
    "kan",
    "hou",
    "yang",
    "sheng",
    "zi",
    "xiao",
    "jia",
    "li",
    "wang",
    "chen",
    "mei",
    "hao",
    "feng",
    "yun",
    "shan",
    "long",
    "jiang",
    "hua",
    "ming",
    "yue",
    "xue",
    "qing",
    "lian",
]


def _english_vocab(rng: np.random.Generator, size: int = 3000) -> list[str]:
    words = set(_ENGLISH_FUNCTION_WORDS)
    while len(words) < size:
        k = int(rng.integers(1, 4))
        w = "".join(str(rng.choice(_ONSETS)) + str(rng.choice(_VOWELS)) for _ in range(k))
        words.add(w + str(rng.choice(_CODAS)))
    return sorted(words, key=lambda w: (w not in _ENGLISH_FUNCTION_WORDS, len(w), w))


def _pinyin_vocab(rng: np.random.Generator, size: int = 1500) -> list[str]:
    words = set(_PINYIN)
    while len(words) < size:
        words.add("".join(str(s) for s in rng.choice(_PINYIN, size=int(rng.integers(2, 4)))))
    return sorted(words, key=lambda w: (len(w), w))


class Filler:
    """Sentences of words drawn Zipf-like (rank^-1) from a vocabulary; exact character counts."""

    def __init__(self, vocab: list[str], rng: np.random.Generator) -> None:
        self.vocab = np.asarray(vocab, dtype=object)
        w = 1.0 / np.arange(1, len(vocab) + 1)
        self.p = w / w.sum()
        self.rng = rng
        self.mean_len = float((self.p * np.array([len(v) + 1 for v in vocab])).sum())

    def text(self, n_chars: int) -> str:
        """Exactly n_chars characters of filler (no leading/trailing space)."""
        if n_chars <= 0:
            return ""
        parts: list[str] = []
        size = 0
        while size < n_chars:
            k = int(n_chars / self.mean_len * 1.1) + 8
            words = self.rng.choice(self.vocab, size=k, p=self.p)
            lens = self.rng.integers(8, 21, size=k // 8 + 1)
            i = 0
            for sentence_len in lens:
                chunk = list(words[i : i + sentence_len])
                i += sentence_len
                if not chunk:
                    break
                chunk[0] = chunk[0].capitalize()
                s = " ".join(chunk) + ". "
                parts.append(s)
                size += len(s)
        text = "".join(parts)[:n_chars]
        return text[:-1] + "." if text.endswith(" ") else text


# ---------------------------------------------------------------------------------------
# Writers


def _chat_content_chars(prompt_tokens: int) -> int:
    """Characters of user-message content that the loader's estimate counts as prompt_tokens:
    ceil(len("user\\n" + content) / 4) + overhead == prompt_tokens."""
    return CHARS_PER_TOKEN * (prompt_tokens - CHAT_MESSAGE_OVERHEAD_TOKENS) - len(
        chat_message_text("user", "")
    )


def write_arxiv(path: Path, rng: np.random.Generator) -> dict:
    prompt, out, params = arxiv_lengths(rng, ARXIV_N)
    filler = Filler(_english_vocab(rng), rng)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for i, (p, o) in enumerate(zip(prompt.tolist(), out.tolist(), strict=True)):
            n_text = _chat_content_chars(p) - len(ARXIV_INSTRUCTION)
            content = ARXIV_INSTRUCTION + filler.text(n_text)
            rec = {
                "custom_id": f"arxiv-{i:04d}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": ARXIV_MODEL,
                    "messages": [{"role": "user", "content": content}],
                    "max_tokens": o,
                },
            }
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return params


def write_bwb(path: Path, rng: np.random.Generator) -> dict:
    prompt, out, params = bwb_lengths(rng, BWB_N)
    filler = Filler(_pinyin_vocab(rng), rng)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for p, o in zip(prompt.tolist(), out.tolist(), strict=True):
            n_text = CHARS_PER_TOKEN * p - len(BWB_INSTRUCTION)  # ceil(len / 4) == p exactly
            rec = {"prompt": BWB_INSTRUCTION + filler.text(n_text), "max_tokens": o}
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return params


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=REPO / "examples")
    args = ap.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for k, (name, writer) in enumerate((("arxiv.jsonl", write_arxiv), ("bwb.jsonl", write_bwb))):
        path = args.out_dir / name
        params = writer(path, np.random.default_rng([SEED, k]))
        w = load_workload(path)
        st = workload_stats(w)
        fitted = ", ".join(f"{key}={v:.4f}" for key, v in params.items())
        print(
            f"{name}: {st['count']} requests, {path.stat().st_size / 1e6:.2f} MB; "
            f"prompt p50/p90 {st['prompt']['p50']:.0f}/{st['prompt']['p90']:.0f}, "
            f"output p50/p90 {st['output']['p50']:.0f}/{st['output']['p90']:.0f}, "
            f"max total {int((w.prompt_tokens + w.output_tokens).max())}, "
            f"P:D {st['pd_ratio']:.2f} (median {st['pd_ratio_median']:.2f}); fitted {fitted}"
        )


if __name__ == "__main__":
    main()
