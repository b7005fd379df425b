"""Run summary plots from a synthetic metrics.jsonl: a valid PNG and an HTML page naming the metrics."""

import json
import math

from reasonrl.utils.plots import main, plot_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_metrics(path, steps=30):
    with open(path, "w") as f:
        for step in range(steps):
            row = {
                "step": step,
                "time": 1000.0 + step,
                "reward/mean": 1 - math.exp(-step / 10),
                "reward/accuracy": step / steps,
                "response/length_mean": 100 + 5 * step,
                "policy/kl": None if step == 3 else 0.001 * step,  # a non-finite value logged as null
                "time/step": 2.5,
            }
            f.write(json.dumps(row) + "\n")
            if step % 10 == 0:  # eval logged by a separate call at the same step
                f.write(
                    json.dumps({"step": step, "time": 1000.0 + step, "eval/math500/pass@4": 0.1 + step / 100}) + "\n"
                )


def test_plot_run_writes_png_and_html(tmp_path):
    metrics = tmp_path / "exp" / "metrics.jsonl"
    metrics.parent.mkdir()
    write_metrics(metrics)
    plotted = plot_run(metrics, tmp_path / "out" / "summary.png", tmp_path / "out" / "summary.html")
    # policy/entropy is missing and skipped; eval series are added
    assert plotted == [
        "reward/mean",
        "reward/accuracy",
        "response/length_mean",
        "policy/kl",
        "time/step",
        "eval/math500/pass@4",
    ]
    png = (tmp_path / "out" / "summary.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 10_000
    page = (tmp_path / "out" / "summary.html").read_text()
    for name in plotted:
        assert name in page
    assert "data:image/png;base64," in page
    assert "<td>0</td><td>0.1</td><td>20</td><td>0.3</td>" in page  # eval first/last from the merged rows


def test_plot_run_without_data_still_writes_a_png(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(json.dumps({"step": 0, "time": 1.0, "other/thing": 1.0}) + "\n")
    assert plot_run(metrics, tmp_path / "a.png") == []
    assert (tmp_path / "a.png").read_bytes().startswith(PNG_MAGIC)
    assert plot_run(tmp_path / "missing.jsonl", tmp_path / "b.png", tmp_path / "b.html") == []
    assert "no steps" in (tmp_path / "b.html").read_text()


def test_command_line(tmp_path, capsys):
    metrics = tmp_path / "metrics.jsonl"
    write_metrics(metrics, steps=5)
    main([str(metrics), str(tmp_path / "c.png"), "--html", str(tmp_path / "c.html")])
    assert (tmp_path / "c.png").exists() and (tmp_path / "c.html").exists()
    assert "wrote" in capsys.readouterr().out


def test_kl_panel_falls_back_to_approx_kl_and_skips_redundant_eval_series(tmp_path):
    """Without a reference model (no policy/kl) the KL panel shows policy/approx_kl; num_prompts / pass@1 are
    not plotted (pass@1 equals avg@1); SFT runs get their loss / lr / grad-norm panels."""
    metrics = tmp_path / "metrics.jsonl"
    rows = [
        {"step": s, "reward/mean": 0.1 * s, "policy/approx_kl": 0.01 * s, "policy/entropy": 1.0 - 0.1 * s}
        | {"eval/h/avg@1": 0.5, "eval/h/pass@1": 0.5, "eval/h/num_prompts": 200, "sft/loss": 2.0 - 0.1 * s}
        for s in range(5)
    ]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plotted = plot_run(metrics, tmp_path / "a.png")
    assert plotted == ["reward/mean", "policy/approx_kl", "policy/entropy", "sft/loss", "eval/h/avg@1"]
    rows[0]["policy/kl"] = 0.0
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "policy/approx_kl" not in plot_run(metrics, tmp_path / "b.png")
