"""Fine-tuning's fast path: --mixed_precision=auto, --length_buckets and
--micro_batches for every family (`training.fast_path`,
`data.length_buckets`, `modeling.models.MicroBatched`).

The speed is a benchmark (benchmarks/finetune_throughput.py --fast_path);
these tests pin what must hold whatever the speed: auto's choice from the
CPU's flags (a cpuinfo file written here, not this machine's) and a resumed
run keeping its precision; bucketed batches that hold the same examples
per window and lose padding only, resumed exactly; the loss and gradients
of a cut, micro-batched batch equal to the padded batch's; a classifier
run's loss equal to the plain run's; a tagger's written predictions the
plain path's, token for token; bad values as one line before anything is
written.
"""

import json

from absl import flags
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.core import features as F
from albert_tf import run_classifier
from albert_tf import run_ner
from albert_tf import run_race
from albert_tf import run_squad
from albert_tf.core import settings
from albert_tf.core.config import AlbertConfig
from albert_tf.data import length_buckets
from albert_tf.data import ner_data
from albert_tf.modeling import span_qa
from albert_tf.modeling.models import AlbertClassifier, AlbertTagger
from albert_tf.modeling.multiple_choice import AlbertMultipleChoice
from albert_tf.tasks.base import step_indexed_inputs
from albert_tf.training import fast_path
from albert_tf.training import micro_batches
from albert_tf.training import runtime
from tests.test_ner import options as ner_options
from tests.test_ner import synthetic_sentences, workdir, write_conll  # noqa: F401  pylint: disable=unused-import

CHARS = "好差很不是的电影书手机质量服务一般"
CPUINFO = ("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
           "flags\t\t: fpu sse2 avx2 avx512f {extra}\n\n")
TINY = dict(embedding_size=8, hidden_size=16, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=64, initializer_range=0.2)


def _cpuinfo(tmp_path, extra):
  path = tmp_path / "cpuinfo"
  path.write_text(CPUINFO.format(extra=extra), encoding="utf-8")
  return str(path)


# ------------------------------------------------------------ flags
@pytest.mark.parametrize("options_class", [
    run_classifier.ClassifierOptions, run_ner.NerOptions,
    run_squad.SquadOptions, run_race.RaceOptions])
def test_every_family_takes_the_three_flags(options_class):
  fv = flags.FlagValues()
  settings.define_flags(options_class, fv)
  required = [f"--{settings.flag_name(f)}=" + (
      settings.spec(f).choices[0] if settings.spec(f).choices else "x")
              for f in settings.flag_fields(options_class)
              if settings.spec(f).required]
  fv(["cmd", *required])
  o = settings.from_flags(options_class, fv)
  assert (o.mixed_precision, o.length_buckets, o.micro_batches) == (
      "none", 0, "auto")
  fv(["cmd", *required, "--mixed_precision=auto", "--length_buckets=4",
      "--micro_batches=2"])
  o = settings.from_flags(options_class, fv)
  assert (o.mixed_precision, o.length_buckets, o.micro_batches) == (
      "auto", 4, "2")


@pytest.mark.parametrize("extra, want", [
    ("avx512_bf16", "bfloat16"), ("amx_bf16 amx_tile", "bfloat16"),
    ("avx512_vnni", "none"), ("", "none")])
def test_auto_precision_from_the_cpu_flags(tmp_path, extra, want,
                                           monkeypatch):
  monkeypatch.setattr(micro_batches, "cores", lambda: 2)
  decided = fast_path.resolve(
      "auto", 4, "auto", output_dir=str(tmp_path / "new"), overwrite=False,
      tpu=False, num_gpus=0, strategy="default", batch_size=32,
      cpuinfo=_cpuinfo(tmp_path, extra))
  assert decided == fast_path.FastPath(want, 4, 2)


def test_a_tpu_gets_bfloat16_and_no_buckets(tmp_path):
  decided = fast_path.resolve(
      "auto", 4, "auto", output_dir=None, overwrite=False, tpu=True,
      num_gpus=0, strategy="tpu", batch_size=32,
      cpuinfo=_cpuinfo(tmp_path, ""))
  assert decided == fast_path.FastPath("bfloat16", 0, 1)


def test_a_given_precision_is_kept_and_spelled_canonically(tmp_path):
  decided = fast_path.resolve(
      "mixed_bfloat16", 0, "1", output_dir=None, overwrite=False, tpu=False,
      num_gpus=0, strategy="default", batch_size=32,
      cpuinfo=_cpuinfo(tmp_path, ""))
  assert decided == fast_path.FastPath("bfloat16", 0, 1)


@pytest.mark.parametrize("kwargs, message", [
    (dict(mixed_precision="fp8"), "--mixed_precision must be auto or one "
     "of none, bfloat16, float16 (or float32, mixed_bfloat16, "
     "mixed_float16), got 'fp8'"),
    (dict(length_buckets=-1), "--length_buckets must be 0 or more, got -1"),
    (dict(micro_batches="two"), "--micro_batches must be auto or a whole "
     "number >= 1, got 'two'"),
    (dict(micro_batches="0"), "--micro_batches must be auto or a whole "
     "number >= 1, got '0'"),
])
def test_bad_values_are_one_line_and_write_nothing(data, tmp_path, kwargs,
                                                   message):
  out = tmp_path / "out"
  with pytest.raises(ValueError) as error:
    run_classifier.run(**_classifier(data, out, **kwargs))
  assert str(error.value) == message
  assert not out.exists()


# ------------------------------------------------------------ buckets
def test_window_sorted_by_hand():
  order = np.arange(12).reshape([6, 2])
  lengths = np.array([9, 3, 5, 3, 1, 7, 2, 8, 6, 4, 9, 1])
  out = length_buckets.window_sorted(order, lengths, first_step=6, seed=0,
                                     window_steps=3)
  # Window 1 (steps 3-5 of the run, examples 0-5) by length: 4 (1), 1 and 3
  # (3: their order kept), 2 (5), 5 (7), 0 (9); the batches of two in an
  # order of their own. Window 2: 11 (1), 6 (2), 9 (4), 8 (6), 7 (8), 10 (9).
  assert sorted(map(tuple, out[:3])) == [(3, 2), (4, 1), (5, 0)]
  assert sorted(map(tuple, out[3:])) == [(7, 10), (9, 8), (11, 6)]
  # A function of (seed, window): the same again, another seed another order.
  np.testing.assert_array_equal(
      out, length_buckets.window_sorted(order, lengths, 6, 0, window_steps=3))
  with pytest.raises(ValueError, match="first_step=1 is not a multiple"):
    length_buckets.window_sorted(order, lengths, 1, 0, window_steps=3)


def _columns(n, seq, seed=0, shortest=3):
  """Encoder inputs of n rows of random lengths; input_ids[:, 1] is the
  row's number, and per-position labels (IGNORE on padding)."""
  rng = np.random.default_rng(seed)
  lengths = rng.integers(shortest, seq + 1, size=n)
  ids = np.zeros([n, seq], np.int32)
  labels = np.full([n, seq], ner_data.IGNORE, np.int32)
  for i, length in enumerate(lengths):
    ids[i, :length] = rng.integers(5, 40, size=length)
    ids[i, 1] = 100 + i
    labels[i, 1:length - 1] = rng.integers(0, 3, size=length - 2)
  mask = (ids > 0).astype(np.int32)
  return ({F.INPUT_IDS: ids, F.INPUT_MASK: mask,
           F.SEGMENT_IDS: np.zeros_like(ids)}, {F.LOGITS: labels}, lengths)


def _batches(columns, labels, start, stop, buckets, batch=4):
  dataset = step_indexed_inputs(
      {k: tf.constant(v) for k, v in columns.items()},
      {k: tf.constant(v) for k, v in labels.items()},
      tf.distribute.get_strategy(), batch, start, stop, seed=7,
      length_buckets=buckets, position_labels=(F.LOGITS,))
  return [(tf.nest.map_structure(np.asarray, x),
           tf.nest.map_structure(np.asarray, y)) for x, y in dataset]


def test_bucketed_batches_cut_only_padding_and_resume_exactly():
  seq, window, batch = 40, length_buckets.WINDOW_STEPS, 4
  columns, labels, lengths = _columns(50, seq)
  steps = 2 * window + 5  # a partial last window
  plain = _batches(columns, labels, 0, steps, 0)
  cut = _batches(columns, labels, 0, steps, 4)
  widths = length_buckets.bucket_widths(seq, 4)
  assert widths == [16, 32, 40]
  for w in range(0, 2 * window, window):  # the whole windows
    rows = lambda batches: sorted(int(r) for x, _ in batches[w:w + window]
                                  for r in x[F.INPUT_IDS][:, 1])
    assert rows(cut) == rows(plain)  # the same examples, regrouped
  for x, y in cut:
    width = x[F.INPUT_IDS].shape[1]
    rows = x[F.INPUT_IDS][:, 1] - 100
    longest = lengths[rows].max()
    assert width == min(w for w in widths if w >= longest)
    for name in (F.INPUT_IDS, F.INPUT_MASK, F.SEGMENT_IDS):
      np.testing.assert_array_equal(x[name], columns[name][rows, :width])
      assert not columns[F.INPUT_MASK][rows, width:].any()
    np.testing.assert_array_equal(y[F.LOGITS], labels[F.LOGITS][rows, :width])
    assert (labels[F.LOGITS][rows, width:] == ner_data.IGNORE).all()
  # Widths other than max_seq_length: the sort groups short rows.
  assert min(x[F.INPUT_IDS].shape[1] for x, _ in cut) < seq
  # A resumed run (from step 21, inside a window) trains on the batches the
  # uninterrupted one did.
  resumed = _batches(columns, labels, 21, steps, 4)
  assert len(resumed) == steps - 21
  for (a, b), (c, d) in zip(resumed, cut[21:]):
    np.testing.assert_array_equal(a[F.INPUT_IDS], c[F.INPUT_IDS])
    np.testing.assert_array_equal(b[F.LOGITS], d[F.LOGITS])
  # Without buckets nothing changes: whole width, the permuted stream.
  assert all(x[F.INPUT_IDS].shape == (batch, seq) for x, _ in plain)


# ------------------------------------------------------------ the models
def _loss_and_grads(model, features, labels, loss_fn):
  with tf.GradientTape() as tape:
    loss = loss_fn(labels, model(features, training=True))
  return float(loss), tape.gradient(loss, model.trainable_variables)


def _sparse_ce(labels, outputs):
  logits = outputs[F.LOGITS]
  keep = tf.cast(labels != ner_data.IGNORE, tf.float32)
  ce = tf.nn.sparse_softmax_cross_entropy_with_logits(
      tf.maximum(labels, 0), logits)
  return tf.reduce_sum(ce * keep) / tf.reduce_sum(keep)


@pytest.mark.parametrize("family", ["classifier", "tagger", "choice",
                                    "span_v2"])
def test_a_cut_micro_batched_batch_gives_the_padded_loss_and_gradients(
    family):
  """Loss and gradients of the batch cut to its width and run as 2 parts
  (5 rows: parts of 2 and 3) equal the whole padded batch's."""
  config = AlbertConfig(vocab_size=200, **TINY)
  seq, width = 24, 16
  columns, labels, _ = _columns(5, width, seed=3, shortest=8)
  pad = lambda v, value=0: np.pad(v, [(0, 0)] * (v.ndim - 1) +
                                  [(0, seq - width)], constant_values=value)
  full = {k: pad(v) for k, v in columns.items()}
  tags = labels[F.LOGITS]
  rows = np.arange(5)
  if family == "classifier":
    model, loss_fn = AlbertClassifier(config, 3, 0.0), _sparse_ce
    cut_y = full_y = rows % 3
  elif family == "tagger":
    model, loss_fn = AlbertTagger(config, 3, 0.0), _sparse_ce
    cut_y, full_y = tags, pad(tags, ner_data.IGNORE)
  elif family == "choice":
    # 5 questions of 2 choices: rows i and 4 - i.
    model, loss_fn = AlbertMultipleChoice(config, 2, 0.0), _sparse_ce
    pair = lambda v: np.stack([v, v[::-1]], 1)
    columns = {k: pair(v) for k, v in columns.items()}
    full = {k: pair(v) for k, v in full.items()}
    cut_y = full_y = rows % 2
  else:
    model = span_qa.AlbertSpanQA(config, version_2_with_negative=True,
                                  classifier_dropout=0.0)
    columns[F.SEGMENT_IDS][:, 4:] = columns[F.INPUT_MASK][:, 4:]
    full[F.SEGMENT_IDS] = pad(columns[F.SEGMENT_IDS])
    answers = {F.START_POSITIONS: np.full([5], 5),
               F.END_POSITIONS: np.full([5], 6),
               F.IS_IMPOSSIBLE: (rows % 2).astype(np.float32)}
    loss_fn = None
  if loss_fn is None:
    def run(features, parts):
      model.micro_batches = parts
      with tf.GradientTape() as tape:
        loss = model._batch_losses(  # pylint: disable=protected-access
            (features, answers), training=True)["loss"]
      return float(loss), tape.gradient(loss, model.trainable_variables)
    plain, fast = run(full, 1), run(columns, 2)
  else:
    model.micro_batches = 1
    plain = _loss_and_grads(model, full, tf.constant(full_y), loss_fn)
    model.micro_batches = 2
    fast = _loss_and_grads(model, columns, tf.constant(cut_y), loss_fn)
  assert abs(fast[0] - plain[0]) <= 1e-5 * max(1.0, abs(plain[0]))
  dense = lambda g: None if g is None else tf.convert_to_tensor(g).numpy()
  fast, plain = [dense(g) for g in fast[1]], [dense(g) for g in plain[1]]
  # Relative to the largest gradient: a key bias's is 0 but for rounding.
  scale = max(np.abs(g).max() for g in plain if g is not None)
  for a, b, v in zip(fast, plain, model.trainable_variables):
    assert (a is None) == (b is None), v.path
    if b is not None:
      assert np.abs(a - b).max() <= 1e-5 * scale, v.path


# ------------------------------------------------------------ whole runs
def _rows(n, seed):
  """label 1 iff the review holds 好; lengths 3 to 28 characters."""
  rng = np.random.default_rng(seed)
  rows = []
  for i in range(n):
    words = list(rng.choice(list(CHARS[2:]), size=rng.integers(2, 28)))
    words.insert(int(rng.integers(0, len(words))), "好" if i % 2 else "差")
    rows.append(f"{i % 2}\t{''.join(words)}")
  return rows


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  root = tmp_path_factory.mktemp("fast_path")
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list(CHARS)
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
  AlbertConfig(vocab_size=len(vocab), **TINY).to_json_file(
      root / "config.json")
  for split, n, seed in (("train", 96, 0), ("dev", 24, 1), ("test", 13, 2)):
    (root / f"{split}.tsv").write_text(
        "\n".join(_rows(n, seed)) + "\n", encoding="utf-8")
  return root


def _classifier(data, out, **kwargs):
  return {**dict(task_name="sentiment", data_dir=str(data),
                 output_dir=str(out), vocab_file=str(data / "vocab.txt"),
                 albert_config_file=str(data / "config.json"),
                 max_seq_length=32, train_batch_size=16, eval_batch_size=16,
                 learning_rate=1e-3, warmup_step=1, classifier_dropout=0.0,
                 seed=3, do_train=True, micro_batches="1", baseline=False),
          **kwargs}


def _log(out):
  return [json.loads(line) for line in
          (out / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.slow  # 8-20 s: make test under 8 minutes
def test_a_bucketed_micro_batched_run_has_the_plain_runs_loss(data,
                                                              tmp_path):
  """At a learning rate too small to move the weights, a window of steps
  trains on the same examples either way: the logged mean loss of the
  window (train_log.jsonl, the mean over its steps) is the plain run's."""
  steps = length_buckets.WINDOW_STEPS
  common = dict(learning_rate=1e-9, train_step=steps, log_every_steps=steps,
                eval_every_steps=steps,
                iterations_per_loop=steps // 2)
  run_classifier.run(**_classifier(data, tmp_path / "plain", **common))
  run_classifier.run(**_classifier(data, tmp_path / "fast", **common,
                                   length_buckets=4, micro_batches="2"))
  (plain,), (fast,) = _log(tmp_path / "plain"), _log(tmp_path / "fast")
  assert plain["step"] == fast["step"] == steps
  assert abs(fast["loss"] - plain["loss"]) <= 1e-5 * max(1.0, plain["loss"])


@pytest.mark.slow  # 10-20 s: make test under 8 minutes
def test_auto_is_recorded_and_a_resumed_run_keeps_it(data, tmp_path,
                                                     monkeypatch, absl_log):
  out = tmp_path / "out"
  monkeypatch.setattr(runtime, "cpu_bf16_units", lambda *a: ["avx512_bf16"])
  kwargs = _classifier(data, out, mixed_precision="auto", train_step=2,
                       eval_every_steps=2)
  run_classifier.run(**kwargs)
  assert ("--mixed_precision=auto: bfloat16 (this CPU has bf16 units "
          "(avx512_bf16))") in "\n".join(absl_log)
  fingerprint = json.loads((out / "run_fingerprint.json").read_text())
  assert fingerprint["mixed_precision"] == "bfloat16"
  # Resumed where the CPU has no bf16 units: the run keeps its precision.
  monkeypatch.setattr(runtime, "cpu_bf16_units", lambda *a: [])
  absl_log.clear()
  result = run_classifier.run(**dict(kwargs, train_step=4))
  assert (f"--mixed_precision=auto: bfloat16 (as the run in --output_dir="
          f"{out})") in "\n".join(absl_log)
  assert result["num_train_steps"] == 4


def test_a_bucketed_taggers_predictions_are_the_plain_paths(
    workdir, tmp_path):  # pylint: disable=redefined-outer-name
  """Trained with buckets and 2 parts, the tagger writes one prediction per
  input token, in order; predicting again from its checkpoint the plain way
  (whole batches at max_seq_length) writes the same file."""
  data = tmp_path / "data"
  data.mkdir()
  write_conll(data / "train.txt", synthetic_sentences(64, seed=1))
  write_conll(data / "dev.txt", synthetic_sentences(8, seed=2))
  test = synthetic_sentences(9, seed=5, min_len=3, max_len=40)
  write_conll(data / "test.txt", test)
  out = tmp_path / "out"
  run_ner.run(**ner_options(workdir, data, out, train_step=20,
                            do_train=True, do_predict=True, length_buckets=4,
                            micro_batches="2", baseline=False))
  fast = (out / "test_predictions.txt").read_text(encoding="utf-8")
  sentences = [block.split("\n") for block in fast.strip("\n").split("\n\n")]
  assert [[line.split("\t")[0] for line in s] for s in sentences] == [
      s.tokens for s in test]
  run_ner.run(**ner_options(workdir, data, out, do_predict=True,
                            micro_batches="1", baseline=False))
  assert (out / "test_predictions.txt").read_text(encoding="utf-8") == fast
