"""A fine-tuning run's curves.png (albert_tf.training.plots): written beside
eval_results.json, a PNG of the size matplotlib drew; --noplots writes
none; without matplotlib one line says so and the run goes on."""

import json
import struct
import sys

from albert_tf.training import plots
from albert_tf import run_classifier
from tests.fixtures_data import write_tiny_sentiment

CHARS = "好差很不是的电影"


def _train(tmp_path, name, **flags):
  return run_classifier.run(
      task_name="sentiment", data_dir=str(tmp_path),
      output_dir=str(tmp_path / name), vocab_file=str(tmp_path / "vocab.txt"),
      albert_config_file=str(tmp_path / "config.json"), max_seq_length=8,
      train_batch_size=8, train_step=4, eval_every_steps=2, log_every_steps=1,
      do_train=True, do_eval=True, **flags)


def test_a_run_writes_curves_png_and_noplots_none(tmp_path):
  write_tiny_sentiment(tmp_path, CHARS)
  _train(tmp_path, "clf")
  png = (tmp_path / "clf" / "curves.png").read_bytes()
  # PNG signature, then the IHDR chunk: width and height (two panels of
  # 6 x 4 inches at 110 dpi).
  assert png[:8] == b"\x89PNG\r\n\x1a\n"
  assert png[12:16] == b"IHDR"
  assert struct.unpack(">II", png[16:24]) == (1320, 440)
  assert len(png) > 10_000
  results = json.loads((tmp_path / "clf" / "eval_results.json").read_text())
  assert "baseline_tfidf_accuracy" in results
  _train(tmp_path, "quiet", plots=False)
  assert (tmp_path / "quiet" / "eval_results.json").exists()
  assert not (tmp_path / "quiet" / "curves.png").exists()


def test_without_matplotlib_one_line_and_no_file(tmp_path, monkeypatch,
                                                 capsys):
  monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
  assert plots.finetune_curves(str(tmp_path), "accuracy", {}) is None
  assert capsys.readouterr().out == (
      "matplotlib is not installed: no curves.png (pip install matplotlib, "
      "or albert_tf[demo]; --noplots says nothing)\n")
  assert not (tmp_path / "curves.png").exists()


def test_the_demo_report_draws_with_the_same_helper(tmp_path, monkeypatch):
  """demo/report.py's fine-tuning plot is plots.plot_panels: one panel, a
  series per init and the baseline's test figure as a line."""
  from demo import report  # pylint: disable=g-import-not-at-top
  drawn = []
  monkeypatch.setattr(plots, "plot_panels",
                      lambda path, panels: drawn.append((path, panels)) or path)

  class Demo:
    figures = {"finetune": {"tfidf": {"test_accuracy": 0.75}}}

    @staticmethod
    def path(*parts):
      return str(tmp_path.joinpath(*parts))

  for run, values in (("pretrained", (0.5, 0.6)), ("random_init", (0.5,))):
    (tmp_path / "finetune" / run).mkdir(parents=True)
    (tmp_path / "finetune" / run / "eval_log.jsonl").write_text("".join(
        json.dumps({"global_step": 10 * i, "accuracy": v}) + "\n"
        for i, v in enumerate(values)))
  path = report._plot_fine_tuning_curves(  # pylint: disable=protected-access
      Demo, str(tmp_path), "finetune", "accuracy", "accuracy", "tfidf",
      "TF-IDF + LR", "fine-tuning", "finetuning.png")
  assert path == str(tmp_path / "finetuning.png")
  assert drawn == [(path, [{"title": "fine-tuning", "series": [
      ("dev accuracy, pretrained", [0, 10], [0.5, 0.6]),
      ("dev accuracy, random init", [0], [0.5])],
                            "lines": [("TF-IDF + LR (test)", 0.75)]}])]
