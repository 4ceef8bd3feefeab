#!/usr/bin/env python3
"""Prefill, decode and MTP benchmark against an OpenAI-compatible vLLM server.

The method of the reference setup's A/B test (seed 000, section 6):
- every prompt starts with a 64-character random UUID and goes on with random words from a word list,
  so nothing comes from the prefix cache;
- warm-up: 2 short requests, then one request at each measured size (20K, 60K);
- measured: 20K tokens x3 at max_tokens=256, then 60K x2 at max_tokens=128, streamed;
- per run: context tokens (usage, with stream_options.include_usage), TTFT, prefill tok/s =
  prompt_tokens / TTFT, decode tok/s = (completion_tokens - 1) / (last token time - first token time),
  MTP acceptance = delta accepted / delta drafted tokens from /metrics around the run, and the prompt tokens
  the prefix cache served (delta of its hit counter; a run with any is named in the log: not a cold prefill).
Prompt length: tokenizers differ, so two short probes calibrate tokens per word first (prompt_tokens of
the UUID alone and of the UUID plus known words), and every warm-up's real count refines it.

    bench.py [run] [--base-url URL] [--model NAME] [--api-key-file PATH] [--sizes 20000:3:256,60000:2:128]
                   [--warmup-short 2] [--warmup-sized 1] [--label NAME] [--json-out FILE]

Every run decodes max_tokens tokens (vLLM's ignore_eos). The A/B summary of two results is compare_table, printed
by the control side (vllm_rig/stages/bench/charts.py compare, and the guarded fork update).

The API key comes from --api-key-file (the service's env file, or a file holding the bare key), else the environment
variable VLLM_API_KEY (none: no key sent). /metrics is read by prometheus_client's parser: the deploy runs this with
the tools venv's python, which holds it (server_client.py).
Exit codes: 0 done, 2 the server could not be used (unreachable, refused, a bad answer).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from . import server_client

DEFAULT_SIZES = "20000:3:256,60000:2:128"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTED = "vllm:spec_decode_num_draft_tokens_total"
# Prompt tokens served from the prefix cache, counted by the engine whatever the request asked (vLLM 0.27.1
# v1/metrics/loggers.py:595-598, a Counter, so exposed with _total). usage.prompt_tokens_details.cached_tokens
# is null unless the server runs with --enable-prompt-tokens-details (chat_completion/serving.py:89-95), which the
# unit never passes.
CACHE_HITS = "vllm:prefix_cache_hits_total"
SHORT_WORDS = 32  # words in a short warm-up request
METRICS_SETTLE_S = 0.2  # the server records a request's last step stats just after its last chunk
TEXT_KEYS = (*server_client.TEXT_KEYS, "tool_calls")  # a delta that carries tokens

# Plain English words of one to three syllables; any list would do, only its randomness matters.
WORD_LIST = """
able about above across act add after again against age ago agree air all allow almost alone along already
also always among amount animal answer any appear apply area arm around arrive art ask away back bad bank
base basic bear beat become bed before begin behind believe best better between big bill bird black blood
blue board boat body book born both box boy break bring brother build burn business buy call camp car card
care carry case catch cause cell center chair chance change charge check child choice church city claim
class clear close coast cold color come common cost could country course court cover create crop cross cup
cut dark data day dead deal death decide deep degree design detail develop die differ dinner direct dog
door down draw dream drive drop dry during each early earth east easy eat edge effect egg eight either end
enjoy enough enter even event ever every exact example expect face fact fall family far farm fast father
fear feel few field fight figure fill final find fine fire firm first fish five floor fly follow food foot
force forest form forward four free fresh friend front fruit full fun game garden gas general get gift
girl give glass go gold good grass great green ground group grow guess gun hair half hand happen happy hard
hat have head hear heart heat heavy help here high hill hold hole home hope horse hot hour house huge human
hunt idea inch iron island job join joy jump just keep key kind king kitchen know lake land language large
last late laugh law lay lead learn least leave left leg less letter level lie life lift light like line
list listen little live long look lose loud love low machine main major make man many map mark market
master matter mean measure meet member method middle might mile milk mind minute miss model moment money
month moon more morning most mother motion mount mouth move much music must name nation near need never
new news next night nine noise north note nothing notice now number object ocean offer office often oil
old once only open order other own page paint pair paper parent park part party pass past path pay peace
people perhaps period person pick picture piece place plan plant play please point poor position possible
pound power press pretty price print problem produce prove pull push quick quiet race radio rain raise
range reach read ready real reason record red region remember repeat reply report rest result return rich
ride right ring rise river road rock role room root rope rose round rule run safe sail salt same sand save
say scale school science score sea season seat second section see seed seem sell send sense serve set
seven shape share sharp ship shoe shop short shoulder show side sign silver simple since sing single sister
sit six size skill skin sky sleep slow small smell smile snow soft soil soldier solve song soon sound south
space speak special speed spell spend spring square stand star start state station stay steam steel step
stick still stone stop store story straight strange stream street strong student study subject success
sudden sugar summer sun supply sure surface system table tail take talk tall teach team tell ten test
thank thick thin thing think third though thousand three through throw tie time tiny today together tone
tool top total touch toward town track trade train travel tree trip true try turn twenty type under unit
until upon usual valley value very view village visit voice wait walk wall want warm wash watch water wave
way wear weather week weight well west wheel while white whole wide wild will win wind window winter wire
wish woman wonder wood word work world write year yellow young
"""
WORDS = WORD_LIST.split()
PROBE_WORDS = len(WORDS)  # the calibration probe holds the whole list once (see make_prompt)


class BenchError(Exception):
    """The server could not be used: unreachable, an HTTP error, an answer without usage."""


# ---- talking to the server (server_client.py: the start check's and the watchdog's client too) ---------------
@dataclass(frozen=True)
class Server:
    base_url: str
    api_key: str | None
    timeout: float

    @contextlib.contextmanager
    def open(self, method: str, path: str, body: dict | None = None) -> Iterator[http.client.HTTPResponse]:
        """The response to one request (status 200, else BenchError); the connection closes after it."""
        try:
            with server_client.open_request(self.base_url, method, path, self.api_key, body, self.timeout) as resp:
                if resp.status != 200:
                    raise BenchError(_http_error(method, path, resp))
                yield resp
        except (OSError, http.client.HTTPException) as exc:
            raise BenchError(f"cannot reach {self.base_url}: {exc}") from exc

    def get_json(self, path: str) -> Any:
        with self.open("GET", path) as resp:
            return json.loads(resp.read())

    def post_json(self, path: str, body: dict) -> Any:
        with self.open("POST", path, body) as resp:
            return json.loads(resp.read())

    def metrics(self) -> str:
        with self.open("GET", "/metrics") as resp:
            return resp.read().decode(errors="replace")


def _http_error(method: str, path: str, resp: http.client.HTTPResponse) -> str:
    message = server_client.error_text(resp.read().decode(errors="replace"), 500)
    hint = " (give the API key: VLLM_API_KEY or --api-key-file)" if resp.status == 401 else ""
    return f"{method} {path}: HTTP {resp.status}: {message}{hint}"


# ---- one streamed request -----------------------------------------------------------------------------
@dataclass
class Stream:
    """What one streamed chat completion showed: times of the first and last token, and usage."""

    sent: float
    first: float | None = None
    last: float | None = None
    usage: dict[str, Any] = field(default_factory=dict)

    def see(self, at: float, chunk: dict) -> None:
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if any(_carries_tokens(choice) for choice in chunk.get("choices") or []):
            self.first = self.first if self.first is not None else at
            self.last = at


def _carries_tokens(choice: dict) -> bool:
    delta = choice.get("delta") or {}
    return any(delta.get(key) for key in TEXT_KEYS) or bool(choice.get("text"))


def chat_body(model: str, prompt: str, max_tokens: int, ignore_eos: bool, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM's extra parameter: every run decodes max_tokens tokens
    return body


def stream_chat(server: Server, body: dict[str, Any]) -> Stream:
    stream = Stream(sent=time.perf_counter())
    with server.open("POST", "/v1/chat/completions", body) as resp:
        for at, chunk in server_client.sse_events(resp):
            said = server_client.server_error(chunk)
            if said is not None:
                raise BenchError(f"the server failed inside the stream: {said}")
            stream.see(at, chunk)
    if not stream.usage:
        raise BenchError("the stream ended without usage (does the server honour stream_options.include_usage?)")
    if stream.first is None:
        raise BenchError("the stream carried no token")
    return stream


# ---- /metrics ------------------------------------------------------------------------------------------
def metric_total(values: dict[str, list[float]], name: str) -> float | None:
    """Sum of a counter over all its label sets (one per engine); None when the server has no such counter."""
    return sum(values[name]) if name in values else None


@dataclass(frozen=True)
class SpecCounters:
    accepted: float | None
    drafted: float | None
    cache_hits: float | None = None

    @classmethod
    def read(cls, server: Server) -> SpecCounters:
        try:
            values = server_client.metric_values(server.metrics())
        except (BenchError, ValueError):  # no /metrics (a proxy in front?): no acceptance figure, the rest counts
            return cls(None, None)
        return cls(metric_total(values, ACCEPTED), metric_total(values, DRAFTED), metric_total(values, CACHE_HITS))

    def cached_since(self, before: SpecCounters) -> int | None:
        """Prompt tokens the prefix cache served between two readings; None without the counter."""
        if self.cache_hits is None or before.cache_hits is None:
            return None
        return int(self.cache_hits - before.cache_hits)

    def since(self, before: SpecCounters) -> tuple[float | None, float | None]:
        accepted, drafted, accepted_before, drafted_before = (
            self.accepted,
            self.drafted,
            before.accepted,
            before.drafted,
        )
        if accepted is None or drafted is None or accepted_before is None or drafted_before is None:
            return None, None
        return accepted - accepted_before, drafted - drafted_before


# ---- prompts -------------------------------------------------------------------------------------------
def uuid64() -> str:
    """64 random hex characters: two UUID4s, so no two prompts share a first cache block."""
    return uuid.uuid4().hex + uuid.uuid4().hex


def make_prompt(words: int, rng: random.Random) -> str:
    """The UUID, then `words` words: the list in shuffled rounds, so every prompt of a length has about
    the same token count (independent draws would scatter it by a percent or two at 2K tokens)."""
    chosen: list[str] = []
    while len(chosen) < words:
        round_ = list(WORDS)
        rng.shuffle(round_)
        chosen += round_[: words - len(chosen)]
    return " ".join([uuid64(), *chosen])


@dataclass
class Calibration:
    """prompt_tokens = base + per_word * words, for this server's tokenizer and chat template."""

    base: float
    per_word: float

    def words_for(self, tokens: int) -> int:
        return max(int(round((tokens - self.base) / self.per_word)), 1)

    def refine(self, words: int, prompt_tokens: int) -> None:
        """A long prompt's real count pins tokens per word down better than the short probe."""
        if words > 0 and prompt_tokens > self.base:
            self.per_word = (prompt_tokens - self.base) / words


def prompt_tokens(server: Server, model: str, prompt: str) -> int:
    answer = server.post_json("/v1/chat/completions", chat_body(model, prompt, 1, False, stream=False))
    try:
        return int(answer["usage"]["prompt_tokens"])
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchError(f"the answer has no usage.prompt_tokens: {str(answer)[:200]}") from exc


def calibrate(server: Server, model: str, rng: random.Random) -> Calibration:
    base = prompt_tokens(server, model, make_prompt(0, rng))
    longer = prompt_tokens(server, model, make_prompt(PROBE_WORDS, rng))
    if longer <= base:
        raise BenchError(f"calibration failed: {PROBE_WORDS} words added {longer - base} tokens")
    return Calibration(float(base), (longer - base) / PROBE_WORDS)


# ---- runs ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Size:
    tokens: int
    runs: int
    max_tokens: int

    @property
    def label(self) -> str:
        return f"{self.tokens // 1000}K" if self.tokens % 1000 == 0 else str(self.tokens)


def parse_sizes(text: str) -> list[Size]:
    """ "20000:3:256,60000:2:128" -> target tokens : measured runs : max_tokens, per size."""
    sizes = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"size {item!r} is not TOKENS:RUNS:MAX_TOKENS (positive integers)")
        sizes.append(Size(*(int(p) for p in parts)))
    return sizes


@dataclass
class Run:
    size: str
    run: int
    target_tokens: int
    max_tokens: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    ttft_s: float
    prefill_tps: float
    decode_tps: float | None
    decode_s: float
    accepted: float | None
    drafted: float | None
    acceptance: float | None
    e2e_s: float


def measure(server: Server, model: str, prompt: str, size: Size, run: int) -> Run:
    """One streamed request, with the spec-decode counters read just before and just after it."""
    before = SpecCounters.read(server)
    stream = stream_chat(server, chat_body(model, prompt, size.max_tokens, True, stream=True))
    done = time.perf_counter()
    time.sleep(METRICS_SETTLE_S)
    after = SpecCounters.read(server)
    accepted, drafted = after.since(before)
    return _run_figures(stream, size, run, accepted, drafted, done, after.cached_since(before))


def _run_figures(
    stream: Stream,
    size: Size,
    run: int,
    accepted: float | None,
    drafted: float | None,
    done: float,
    cached: int | None = None,
) -> Run:
    usage = stream.usage
    prompt, completion = int(usage["prompt_tokens"]), int(usage.get("completion_tokens") or 0)
    first, last = stream.first, stream.last
    if first is None or last is None:  # stream_chat raised already; this tells the type checker
        raise BenchError("the stream carried no token")
    ttft = first - stream.sent
    decode_s = last - first
    return Run(
        size=size.label,
        run=run,
        target_tokens=size.tokens,
        max_tokens=size.max_tokens,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached if cached is not None else (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        ttft_s=ttft,
        prefill_tps=prompt / ttft,
        decode_tps=(completion - 1) / decode_s if completion > 1 and decode_s > 0 else None,
        decode_s=decode_s,
        accepted=accepted,
        drafted=drafted,
        acceptance=accepted / drafted if accepted is not None and drafted else None,
        e2e_s=done - stream.sent,
    )


@dataclass
class Bench:
    server: Server
    model: str
    options: argparse.Namespace
    rng: random.Random
    log: Callable[[str], None]
    calibration: Calibration
    warmups: list[dict[str, Any]] = field(default_factory=list)

    def sized(self, size: Size, run: int) -> tuple[int, Run]:
        words = self.calibration.words_for(size.tokens)
        return words, measure(self.server, self.model, make_prompt(words, self.rng), size, run)

    def warm_up(self, sizes: list[Size]) -> None:
        for i in range(self.options.warmup_short):
            self.log(f"warm-up: short request {i + 1}")
            stream_chat(self.server, chat_body(self.model, make_prompt(SHORT_WORDS, self.rng), 16, True, True))
        for size in sizes:
            for i in range(self.options.warmup_sized):
                self.log(f"warm-up: {size.label} ({i + 1})")
                words, run = self.sized(size, 0)
                self.calibration.refine(words, run.prompt_tokens)
                self.warmups.append({"size": size.label, "prompt_tokens": run.prompt_tokens, "ttft_s": run.ttft_s})

    def measured(self, sizes: list[Size]) -> list[Run]:
        runs = []
        for size in sizes:
            for i in range(1, size.runs + 1):
                _, run = self.sized(size, i)
                self.log(f"{size.label} run{i}: {run.prompt_tokens} tok, TTFT {run.ttft_s:.3f} s")
                if run.cached_tokens:
                    self.log(
                        f"{size.label} run{i}: {run.cached_tokens} of its {run.prompt_tokens} prompt tokens came from "
                        "the prefix cache: its TTFT and prefill are not a cold prefill's"
                    )
                runs.append(run)
        return runs


def run_bench(options: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    server = Server(options.base_url, server_client.read_key(options.api_key_file), options.timeout)
    model = options.model or first_model(server)
    rng = random.Random(options.seed)
    bench = Bench(server, model, options, rng, log, calibrate(server, model, rng))
    log(f"calibration: {bench.calibration.base:.0f} tokens + {bench.calibration.per_word:.3f} per word")
    bench.warm_up(options.sizes)
    runs = bench.measured(options.sizes)
    return {
        "label": options.label,
        "base_url": options.base_url,
        "model": model,
        "started": started,
        "method": {
            "sizes": [asdict(s) for s in options.sizes],
            "warmup_short": options.warmup_short,
            "warmup_sized": options.warmup_sized,
            "ignore_eos": True,
            "calibration": asdict(bench.calibration),
        },
        "warmups": bench.warmups,
        "runs": [asdict(r) for r in runs],
        "summary": summarize([asdict(r) for r in runs]),
    }


def first_model(server: Server) -> str:
    models = server.get_json("/v1/models").get("data") or []
    if not models:
        raise BenchError("the server lists no model")
    return models[0]["id"]


# ---- summaries and tables -------------------------------------------------------------------------------
METRICS = (  # key in a run, summary name, how the seed's table writes it
    ("ttft_s", "TTFT", "s"),
    ("prefill_tps", "Prefill", "tok/s"),
    ("decode_tps", "Decode", "tok/s"),
    ("acceptance", "MTP", "%"),
)


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per size: the mean of each figure over its measured runs, and n."""
    summary: dict[str, dict[str, Any]] = {}
    for size in dict.fromkeys(r["size"] for r in runs):
        group = [r for r in runs if r["size"] == size]
        entry: dict[str, Any] = {"n": len(group), "prompt_tokens": _mean([r["prompt_tokens"] for r in group])}
        for key, _, _ in METRICS:
            entry[key] = _mean([r[key] for r in group])
        summary[size] = entry
    return summary


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _f1(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def runs_table(runs: list[dict[str, Any]]) -> str:
    """The seed's table: Run, context, TTFT (s), Prefill (tok/s), Decode (tok/s), MTP Acceptance."""
    rows = [("Run", "Context", "TTFT (s)", "Prefill (tok/s)", "Decode (tok/s)", "MTP Acceptance")]
    for r in runs:
        rows.append(
            (
                f"run{r['run']}",
                f"{r['prompt_tokens']:,} tok",
                f"{r['ttft_s']:.3f}",
                _f1(r["prefill_tps"]),
                _f1(r["decode_tps"]),
                _pct(r["acceptance"]),
            )
        )
    return _table(rows)


def means_lines(summary: dict[str, dict[str, Any]]) -> str:
    return "\n".join(
        f"{size} mean: TTFT {_figure('ttft_s', s['ttft_s'])}, prefill {_figure('prefill_tps', s['prefill_tps'])}, "
        f"decode {_figure('decode_tps', s['decode_tps'])}, MTP {_pct(s['acceptance'])} (n={s['n']})"
        for size, s in summary.items()
    )


def _figure(key: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    if key == "ttft_s":
        return f"{value:.3f}s"
    if key == "acceptance":
        return _pct(value)
    return f"{value:,.1f} tok/s"


def _difference(key: str, a: float | None, b: float | None) -> str:
    """B against A: percent, or percentage points for the acceptance rate (as the seed writes it)."""
    if a is None or b is None:
        return "n/a"
    if key == "acceptance":
        return f"{100 * (b - a):+.1f}pp"
    return f"{100 * (b - a) / a:+.1f}%" if a else "n/a"


def compare_table(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The seed's summary: metric, A mean, B mean, difference; sizes with fewer than 3 runs are starred."""
    names = (a.get("label") or "A", b.get("label") or "B")
    if names[0] == names[1]:
        names = (f"{names[0]} (A)", f"{names[1]} (B)")
    rows = [("Metric", f"{names[0]} mean", f"{names[1]} mean", "Difference")]
    few = []
    for size in [s for s in a["summary"] if s in b["summary"]]:
        sa, sb = a["summary"][size], b["summary"][size]
        star = "*" if min(sa["n"], sb["n"]) < 3 else ""
        if star:
            few.append(f"{size}: {sa['n']} and {sb['n']} runs")
        for key, name, _ in METRICS:
            rows.append(
                (
                    f"{size} {name}",
                    _figure(key, sa[key]),
                    _figure(key, sb[key]),
                    _difference(key, sa[key], sb[key]) + star,
                )
            )
    text = _table(rows)
    if few:
        text += f"\n\n* fewer than 3 samples ({'; '.join(few)}): high variance, not statistically significant"
    return text


# ---- command line ----------------------------------------------------------------------------------------
def run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench.py", description="Prefill/decode/MTP benchmark of a vLLM server.")
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="server URL (default %(default)s)")
    p.add_argument("--model", help="served model name (default: the first of /v1/models)")
    p.add_argument("--api-key-file", help="file holding the API key (default: env VLLM_API_KEY)")
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        default=parse_sizes(DEFAULT_SIZES),
        help=f"TOKENS:RUNS:MAX_TOKENS,... ({DEFAULT_SIZES})",
    )
    p.add_argument("--warmup-short", type=int, default=2, help="short warm-up requests (default 2)")
    p.add_argument("--warmup-sized", type=int, default=1, help="warm-up requests at each size (default 1)")
    p.add_argument("--label", default="", help="name of this configuration, for compare (e.g. FP8 KV)")
    p.add_argument("--json-out", help="write every figure to this JSON file")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one request may take (default 900)")
    p.add_argument("--seed", type=int, help="seed for the word choice (the UUIDs stay random)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = run_parser().parse_args(argv[1:] if argv[:1] == ["run"] else argv)
    try:
        result = run_bench(options, log=lambda line: print(line, file=sys.stderr, flush=True))
    except BenchError as exc:
        print(f"bench.py: {exc}", file=sys.stderr)
        return 2
    print(runs_table(result["runs"]))
    print()
    print(means_lines(result["summary"]))
    if options.json_out:
        with open(options.json_out, "w") as out:
            json.dump(result, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
