"""The worker of benchmarks.serving_latency: in a fresh process with its own
thread count, every implementation of the plan called in turns and timed."""

import contextlib
import json
import sys
import time

from benchmarks.serving_latency_plan import (MAX_SEQ, hf_classifier,
                                             restored_classifier)

BLOCK = 10  # calls per turn of one implementation
QUANT_NAMES = {"none": "float32", "dynamic": "dynamic-range int8",
               "float16": "float16"}


def implementations(plan, case, threads, cache):
  """{name: fn() -> logits [1, 2]}, ours and peers alternating."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import tensorflow as tf
  from albert_tf.serving.tflite_runner import TFLiteRunner
  once = lambda key, make: cache[key] if key in cache else cache.setdefault(
      key, make())
  ids = np.array([case["ids"]], np.int32)
  feats = {"input_ids": ids, "input_mask": np.ones_like(ids),
           "segment_ids": np.zeros_like(ids)}
  tf_feats = {k: tf.constant(v) for k, v in feats.items()}
  text = tf.constant([case["text"]])

  def signature(path, name):
    fn = once(path, lambda: tf.saved_model.load(path)).signatures[name]
    if name == "serve_text":
      return lambda: fn(text=text)["logits"].numpy()
    return lambda: fn(**tf_feats)["logits"].numpy()

  def session(path):
    """serving_default as TF Serving runs it: the SavedModel loaded into a
    TF1 Session (its SavedModelBundle) and called through a callable, with
    no Python function wrapper in between."""
    def load():
      graph = tf.Graph()
      sess = tf.compat.v1.Session(graph=graph, config=tf.compat.v1.ConfigProto(
          intra_op_parallelism_threads=threads,
          inter_op_parallelism_threads=threads))
      # TF1's loader is deprecated (one warning): TF Serving's path is what
      # is timed here.
      with graph.as_default(), _tf_warnings_off(tf):
        meta = tf.compat.v1.saved_model.loader.load(sess, ["serve"], path)
      return sess, meta.signature_def["serving_default"]
    sess, sig = once(f"session:{path}", load)
    call = sess.make_callable(sig.outputs["logits"].name,
                              feed_list=[sig.inputs[n].name for n in feats])
    args = list(feats.values())
    return lambda: call(*args)

  saved = plan["saved_model"]
  ours = [("albert_tf serving_default", signature(saved, "serving_default")),
          ("albert_tf serving_default in a Session (TF Serving's path)",
           session(saved)),
          (f"albert_tf serve_text (pad {MAX_SEQ})",
           signature(saved, "serve_text"))]
  for mode, path in plan["tflite"][str(case["length"])].items():
    # LiteRT prints "INFO: Created TensorFlow Lite XNNPACK delegate" on fd 2.
    from albert_tf.core.quiet_logs import _stderr_to_devnull  # pylint: disable=g-import-not-at-top,protected-access
    with _stderr_to_devnull():
      runner = TFLiteRunner(path, threads)
    ours.append((f"albert_tf LiteRT {QUANT_NAMES.get(mode, mode)}",
                 lambda r=runner: r(**feats)["logits"]))
  for mode, path in plan.get("own_onnx", {}).items():
    from albert_tf.serving.onnx_runner import OnnxRunner
    onnx_runner = once(f"onnx:{path}", lambda p=path: OnnxRunner(p, threads))
    ours.append((f"albert_tf ONNX {QUANT_NAMES.get(mode, mode)} "
                 "(export_onnx, ONNX Runtime)",
                 lambda r=onnx_runner: r(**feats)["logits"]))
  for option, variant in plan["variants"].items():
    for name in {"jit_compile": ("serving_default", "serve_text"),
                 "length_buckets": ("serve_text",),
                 "mixed_precision": ("serving_default",)}[option]:
      ours.append((f"albert_tf {name} {option}={variant['value']}",
                   signature(variant["path"], name)))
  peers = []
  model = (once("model", lambda: restored_classifier(plan["checkpoint"]))
           if {"keras_hub", "hf_torch"} & set(plan["peers"]) else None)
  if "keras_hub" in plan["peers"]:
    import keras_hub
    from albert_tf.converters import keras_hub_interop as interop
    backbone = once("backbone", lambda: interop.copy_to_keras_hub(
        model.encoder, keras_hub.models.AlbertBackbone(
            **interop.backbone_kwargs(model.config))))
    head = model.classifier_head.dense
    hub = tf.function(lambda f: tf.matmul(backbone(
        interop.keras_hub_inputs(f), training=False)["pooled_output"],
                                          head.kernel) + head.bias)
    peers.append(("keras-hub AlbertBackbone + our head",
                  lambda: hub(tf_feats).numpy()))
  if "hf_torch" in plan["peers"]:
    import torch
    torch.set_num_threads(threads)
    hf = once("hf", lambda: hf_classifier(model))
    t_feats = {"input_ids": torch.from_numpy(ids.astype(np.int64)),
               "attention_mask": torch.ones(ids.shape, dtype=torch.long),
               "token_type_ids": torch.zeros(ids.shape, dtype=torch.long)}

    def run_hf():
      with torch.inference_mode():
        return hf(**t_feats).logits.numpy()
    attention = hf.config._attn_implementation  # pylint: disable=protected-access
    peers.append((f"HF torch AlbertForSequenceClassification ({attention})",
                  run_hf))
  if "onnxruntime" in plan["peers"]:
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = once("ort", lambda: ort.InferenceSession(
        plan["onnx_path"], options, providers=["CPUExecutionProvider"]))
    # tf2onnx keeps our names (int32), torch.onnx has HF's (int64).
    by_name = dict(feats, attention_mask=feats["input_mask"],
                   token_type_ids=feats["segment_ids"])
    feed = {i.name: by_name[i.name].astype(
        np.int64 if "int64" in i.type else np.int32)
            for i in session.get_inputs()}
    peers.append((f"ONNX Runtime ({plan['onnx'].split()[0]})",
                  lambda: session.run(["logits"], feed)[0]))
  order = [x for pair in zip(ours, peers) for x in pair]
  return dict(order + ours[len(peers):] + peers[len(ours):])


@contextlib.contextmanager
def _tf_warnings_off(tf):
  """TF's Python logger at ERROR for the block (its deprecation notes)."""
  previous = tf.get_logger().level
  tf.get_logger().setLevel("ERROR")
  try:
    yield
  finally:
    tf.get_logger().setLevel(previous)


def worker(plan_file, threads, calls, warmup):
  """Rows of every implementation at every length, `threads` threads."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  cli_errors.import_tensorflow_quietly()  # its start-up lines hidden
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import,g-import-not-at-top
  with open(plan_file, encoding="utf-8") as f:
    plan = json.load(f)
  rows, cache = [], {}
  for case in plan["inputs"]:
    fns = implementations(plan, case, threads, cache)
    outputs = {}
    for name, fn in fns.items():
      for _ in range(max(1, warmup)):
        outputs[name] = np.asarray(fn(), np.float32)
    reference = next(iter(outputs.values()))  # ours serving_default
    times = {name: [] for name in fns}
    for _ in range(-(-calls // BLOCK)):
      for name, fn in fns.items():
        for _ in range(BLOCK):
          start = time.perf_counter()
          fn()
          times[name].append(time.perf_counter() - start)
    for name, values in times.items():
      ms = np.array(values) * 1000
      rows.append({"implementation": name, "length": case["length"],
                   "input": case["label"], "threads": threads,
                   "calls": len(ms), "p50_ms": float(np.percentile(ms, 50)),
                   "p99_ms": float(np.percentile(ms, 99)),
                   "max_abs_logit_diff": float(np.abs(
                       outputs[name] - reference).max()),
                   "max_abs_logit": float(np.abs(reference).max())})
    print(f"threads {threads}: {case['label']} done", file=sys.stderr,
          flush=True)
  return {"threads": threads, "rows": rows}
