"""The demo's ``GET /run`` page: a run's figures, training curves and newest evaluation, as HTML.

Rendered on the server from :func:`.runview.RunView.summary` so that it reads without JavaScript
and with a screen reader: headings, tables with captions and header cells, images with text
alternatives. Every value from the run's files is escaped.
"""

from __future__ import annotations

from html import escape
from pathlib import PurePath
from typing import Any

PLOT_TITLES = {
    "loss_accuracy_vs_iters.png": "Loss and accuracy against iterations",
    "loss_accuracy_vs_seconds.png": "Loss and accuracy against seconds",
    "lr_vs_iters.png": "Learning rate against iterations",
}
EVAL_TITLES = {
    "confusion.png": "Confusion matrix: true classes in rows, predicted classes in columns",
    "mistakes.png": "The most confident mistakes, with true and predicted labels",
}
SKIPPED = {"NumIters", "Seconds", "LearningRate", "measured_by", "iteration"}

STYLE = """
  body { font-family: system-ui, sans-serif; margin: 2rem; max-width: 64rem; color: #222; }
  h1 { font-size: 1.4rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
  table { border-collapse: collapse; margin: .5rem 0; }
  th, td { border: 1px solid #ccc; padding: .25rem .6rem; text-align: left; }
  td.num { text-align: right; font-variant-numeric: tabular-nums; }
  caption { text-align: left; font-weight: 600; padding: .3rem 0; }
  .figures { display: flex; flex-wrap: wrap; gap: 1rem; }
  figure { margin: 1rem 0; flex: 1 1 26rem; } img { max-width: 100%; height: auto; border: 1px solid #ddd; }
  a:focus, a:focus-visible { outline: 3px solid #3b7dd8; outline-offset: 2px; }
  .muted { color: #555; }
"""


def render(summary: dict[str, Any], query: str = "") -> str:
    name = escape(str(summary.get("name") or "run"))
    return (f'<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>Run {name} — caffetool demo</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
            f'<nav aria-label="Pages"><a href="/{escape(query)}">Classify images</a></nav>\n'
            f"<main>\n<h1>Run {name}</h1>\n{_about(summary)}\n{_final(summary)}\n{_curves(summary)}\n"
            f"{_evaluation(summary.get('evaluation'))}\n</main>\n</body>\n</html>\n")


def _about(summary: dict[str, Any]) -> str:
    parts = [f"model {summary.get('model')}", f"data set {summary.get('dataset')}",
             f"{summary.get('iterations')} iterations", f"status {summary.get('status')}"]
    total = (summary.get("timings_s") or {}).get("total")
    if isinstance(total, (int, float)):
        parts.append(f"{total:.1f} s in all")
    return f'<p class="muted">{escape(" · ".join(parts))}</p>'


def _final(summary: dict[str, Any]) -> str:
    final = summary.get("final") or {}
    rows = []
    if isinstance(final.get("train_loss"), (int, float)):
        rows.append(("train", "loss", _number(final["train_loss"])))
    for key, values in sorted(final.items()):
        if key.startswith("test") and isinstance(values, dict):
            rows += [(f"test net #{key[4:]}", name, _number(value)) for name, value in values.items()
                     if name not in SKIPPED and isinstance(value, (int, float))]
    timings = summary.get("timings_s") or {}
    rows += [("time", f"{name} (s)", f"{value:.1f}") for name, value in timings.items()
             if isinstance(value, (int, float)) and not isinstance(value, bool)]
    if not rows:
        return ""
    body = "".join(f"<tr><td>{escape(net)}</td><th scope=\"row\">{escape(name)}</th>"
                   f'<td class="num">{text}</td></tr>' for net, name, text in rows)
    iteration = final.get("iteration")
    caption = f"Final figures (iteration {escape(str(iteration))})" if iteration is not None else "Final figures"
    return (f'<section aria-labelledby="final-h"><h2 id="final-h">Final figures</h2>\n<table id="final">'
            f'<caption>{caption}</caption><thead><tr><th scope="col">net</th><th scope="col">figure</th>'
            f'<th scope="col">value</th></tr></thead><tbody>{body}</tbody></table></section>')


def _curves(summary: dict[str, Any]) -> str:
    plots = summary.get("plots") or []
    if not plots:
        return ('<section aria-labelledby="curves-h"><h2 id="curves-h">Training curves</h2>'
                '<p>This run has no plots yet.</p></section>')
    figures = "\n".join(_figure(p["url"], PLOT_TITLES.get(p["name"], p["name"]),
                                "plot-" + p["name"].removesuffix(".png")) for p in plots)
    return (f'<section aria-labelledby="curves-h"><h2 id="curves-h">Training curves</h2>\n'
            f'<div class="figures">{figures}</div></section>')


def _evaluation(evaluation: dict[str, Any] | None) -> str:
    head = '<section aria-labelledby="eval-h"><h2 id="eval-h">Evaluation</h2>\n'
    if not evaluation:
        return head + ("<p>This run has not been evaluated yet: <code>caffetool evaluate RUN</code> writes a confusion "
                       "matrix and per-class figures, shown here.</p></section>")
    k = evaluation.get("k", 5)
    weights = PurePath(str(evaluation.get("weights"))).name
    facts = [f"{evaluation.get('count')} images of the {evaluation.get('split', 'test')} set", f"weights {weights}",
             f"top-1 {_number(evaluation.get('top1'))}", f"top-{k} {_number(evaluation.get('topk'))}"]
    caffe_test = evaluation.get("caffe_test")
    if isinstance(caffe_test, dict) and "accuracy" in caffe_test:
        facts.append(f"caffe test accuracy {_number(caffe_test['accuracy'])}")
    images = {image["name"]: image["url"] for image in evaluation.get("images") or []}
    figures = "\n".join(_figure(images[name], title, name.removesuffix(".png"))
                        for name, title in EVAL_TITLES.items() if name in images)
    return (head + f'<p id="eval-facts">{escape(" · ".join(facts))}</p>\n'
            f"{_per_class(evaluation.get('per_class') or [])}\n{figures}</section>")


def _per_class(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    body = "".join(f'<tr><th scope="row">{escape(str(row.get("class")))}</th>'
                   + "".join(f'<td class="num">{_number(row.get(key))}</td>'
                             for key in ("precision", "recall", "f1", "support")) + "</tr>" for row in rows)
    return ('<table id="per-class"><caption>Per class</caption><thead><tr><th scope="col">class</th>'
            '<th scope="col">precision</th><th scope="col">recall</th><th scope="col">F1</th>'
            f'<th scope="col">support</th></tr></thead><tbody>{body}</tbody></table>')


def _figure(url: str, title: str, ident: str) -> str:
    return (f'<figure><img id="{escape(ident)}" src="{escape(url)}" alt="{escape(title)}">'
            f"<figcaption>{escape(title)}</figcaption></figure>")


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return escape(str(value))
    return str(value) if isinstance(value, int) else f"{value:.4f}"
