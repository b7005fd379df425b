"""Summary of a run's curves from its ``metrics.jsonl``: a PNG grid and a small self-contained HTML page.

Uses matplotlib's Agg canvas directly (no ``pyplot``, no global backend switch), so it is safe in any process.
Command line: ``python -m reasonrl.utils.plots logs/<exp>/metrics.jsonl summary.png [--html summary.html]``.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import math
from pathlib import Path

from reasonrl.utils.metrics_file import metrics_by_step, read_metrics

PLOT_KEYS: tuple[str, ...] = (
    "reward/mean",
    "reward/accuracy",
    "response/length_mean",
    "policy/kl",  # KL to the reference model (with a kl_mode) ...
    "policy/approx_kl",  # ... else the KL between the rollout policy and the updated one (plotted if no policy/kl)
    "policy/entropy",
    "time/step",
    "sft/loss",  # SFT runs
    "sft/lr",
    "sft/grad_norm",
)
# Eval series not worth a panel: counts, and pass@1 (equal to avg@1 by definition).
_SKIPPED_EVAL_SUFFIXES = ("/num_prompts", "/pass@1")
NCOLS = 3


def _series(by_step: dict[int, dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for step, row in by_step.items():
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(step)
            ys.append(float(value))
    return xs, ys


def _ema(values: list[float], alpha: float) -> list[float]:
    out, acc = [], values[0]
    for v in values:
        acc = alpha * v + (1 - alpha) * acc
        out.append(acc)
    return out


def plot_run(metrics_jsonl: str | Path, out_png: str | Path, out_html: str | Path | None = None) -> list[str]:
    """Plot the main curves (:data:`PLOT_KEYS`, then every ``eval/*`` series) of a run; missing ones are skipped.

    Writes ``out_png`` and, if given, ``out_html`` (the PNG inlined as base64 plus a table of first/last/min/max of
    every metric in the file). Returns the names of the plotted series.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metrics_jsonl, out_png = Path(metrics_jsonl), Path(out_png)
    by_step = metrics_by_step(read_metrics(metrics_jsonl))
    all_keys = sorted({k for row in by_step.values() for k in row})
    wanted = [k for k in PLOT_KEYS if k in all_keys]
    wanted += [k for k in all_keys if k.startswith("eval/") and not k.endswith(_SKIPPED_EVAL_SUFFIXES)]
    series = {k: _series(by_step, k) for k in wanted}
    plotted = [k for k in wanted if series[k][0]]
    if "policy/kl" in plotted and "policy/approx_kl" in plotted:  # one KL panel: to the reference when there is one
        plotted.remove("policy/approx_kl")

    nrows = max(1, math.ceil(len(plotted) / NCOLS))
    fig = Figure(figsize=(4.2 * NCOLS, 3.0 * nrows), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    fig.suptitle(metrics_jsonl.parent.name or str(metrics_jsonl))
    if not plotted:
        ax = fig.add_subplot(1, 1, 1)
        ax.text(0.5, 0.5, f"no plottable metrics in {metrics_jsonl.name}", ha="center", va="center")
        ax.set_axis_off()
    for i, key in enumerate(plotted):
        ax = fig.add_subplot(nrows, NCOLS, i + 1)
        xs, ys = series[key]
        if len(xs) >= 20:  # raw curve faint, smoothed curve on top
            ax.plot(xs, ys, linewidth=0.8, alpha=0.35, color="C0")
            ax.plot(xs, _ema(ys, alpha=min(1.0, 10 / len(xs))), linewidth=1.5, color="C0")
        else:
            ax.plot(xs, ys, marker="o" if len(xs) < 50 else None, markersize=3, linewidth=1.2, color="C0")
        ax.set_title(key, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    png = buffer.getvalue()
    out_png.write_bytes(png)

    if out_html is not None:
        out_html = Path(out_html)
        out_html.parent.mkdir(parents=True, exist_ok=True)
        out_html.write_text(_html_page(metrics_jsonl, png, by_step, all_keys), encoding="utf-8")
    return plotted


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


def _html_page(metrics_jsonl: Path, png: bytes, by_step: dict[int, dict], keys: list[str]) -> str:
    rows = []
    for key in keys:
        xs, ys = _series(by_step, key)
        if not xs:
            rows.append(f"<tr><td>{html.escape(key)}</td><td colspan=6>no finite values</td></tr>")
            continue
        cells = [xs[0], _fmt(ys[0]), xs[-1], _fmt(ys[-1]), _fmt(min(ys)), _fmt(max(ys))]
        rows.append(f"<tr><td>{html.escape(key)}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    title = html.escape(metrics_jsonl.parent.name or str(metrics_jsonl))
    steps = f"steps {min(by_step)}–{max(by_step)}" if by_step else "no steps"
    image = base64.b64encode(png).decode("ascii")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:2px 8px;text-align:right}}td:first-child{{text-align:left}}</style></head>
<body><h1>{title}</h1><p>{html.escape(str(metrics_jsonl))}: {steps}</p>
<img alt="curves" src="data:image/png;base64,{image}">
<table><tr><th>metric</th><th>first step</th><th>first</th><th>last step</th><th>last</th><th>min</th><th>max</th></tr>
{chr(10).join(rows)}
</table></body></html>
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics_jsonl", type=Path)
    parser.add_argument("out_png", type=Path)
    parser.add_argument("--html", type=Path, default=None, help="also write this HTML page")
    args = parser.parse_args(argv)
    plotted = plot_run(args.metrics_jsonl, args.out_png, args.html)
    print(f"wrote {args.out_png} ({len(plotted)} curves)" + (f" and {args.html}" if args.html else ""))


if __name__ == "__main__":
    main()
