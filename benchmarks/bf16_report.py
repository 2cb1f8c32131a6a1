r"""Where the bfloat16 graph spends its non-matmul work: albert_tf vs keras-hub.

    python -m benchmarks.bf16_report                      # op counts: tiny_zh + base_v2, profile: tiny_zh
    python -m benchmarks.bf16_report --profile_presets=albert_tiny_zh,albert_base_v2
    python -m benchmarks.bf16_report --profile_presets=   # op counts only (seconds)

Under mixed_bfloat16 the matmuls get fast on bf16 hardware (AMX, GPUs,
TPUs) and everything around them decides the speed. This report shows that
part in two ways, for ours and keras-hub side by side:

1. Op counts, hardware-independent: the ops of the traced graphs by kind
   (Cast, LayerNorm pieces, Softmax, matmuls, Transpose/concat, ...), each
   with the elements it writes at batch x seq 128 (a proxy for its memory
   traffic), for one encoder forward (AlbertEncoder vs AlbertBackbone) and
   one training step: MLM on 20 positions + sentence order, loss and
   gradients as in benchmarks/pretrain_throughput.py. The optimizer update
   is left out: it is the same LAMB over the same weights on both sides.
   Counts are of the traced graph, before Grappler rewrites it.
2. From the TF profiler, a few calls of the same functions, the two sides
   taking turns: the share of op time in non-matmul ops, per side, in the
   same run (op time: the host events of TF ops plus XLA executables, our
   fused GELU). Shares depend on the CPU (with AMX the matmuls shrink and
   the share grows); compare the two sides of one run only.

The CPU's bf16 features (amx_bf16 / avx512_bf16 in /proc/cpuinfo) and the
2048^2 matmul peaks measured in the same run are printed first.
"""

import collections
import glob
import json
import os
import re
import tempfile

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

FLAGS = flags.FLAGS


def _define_flags():
  # Only when run as a script: tests/test_bf16_graph.py imports this module.
  flags.DEFINE_list("presets", ["albert_tiny_zh", "albert_base_v2"],
                    "Presets whose graphs are counted (cheap: tracing only).")
  flags.DEFINE_list("profile_presets", ["albert_tiny_zh"],
                    "Presets also run under the profiler (base_v2 takes "
                    "minutes on a 2-core CPU).")
  flags.DEFINE_integer("batch_size", 8, "Sequences per call (seq is 128).")
  flags.DEFINE_integer("profile_calls", 5,
                       "Profiled calls per function and side.")
  flags.DEFINE_bool("peaks", True, "Measure the 2048^2 matmul peaks.")
  flags.DEFINE_string("json_out", None, "Write the results as JSON here.")

SIDES = ("albert_tf", "keras_hub")

# Op kinds, in report order. A graph op falls in the first kind that claims
# it: by type for most, by name scope for the LayerNorm pieces (their types,
# Mean, Mul, Rsqrt..., are shared with everything else).
MATMUL = "matmul"
KINDS = ("Cast", "LayerNorm", "Softmax", MATMUL, "Transpose/concat",
         "other compute", "plumbing")
_MATMUL_TYPE = re.compile(r"MatMul|Einsum")
_LAYER_NORM_SCOPE = re.compile(r"layer_?norm", re.IGNORECASE)
# Ops that copy data to rearrange it.
_SHAPE_TYPES = {"Transpose", "ConcatV2", "Pack", "Unpack", "Slice",
                "StridedSlice", "Tile", "BroadcastTo"}
# Ops that move no tensor data worth counting: constants, variable handles
# and reads, identities, reshapes (metadata only), shape queries, control.
_PLUMBING_TYPES = {"Const", "Placeholder", "Identity", "IdentityN", "NoOp",
                   "ReadVariableOp", "VarHandleOp", "Shape", "ShapeN",
                   "Reshape", "ExpandDims", "Squeeze", "StopGradient",
                   "ZerosLike", "OnesLike", "Size", "Rank",
                   "BroadcastGradientArgs", "PreventGradient"}


# What Grappler's oneDNN and fusion passes prefix to the op types that run.
_RUNTIME_PREFIX = re.compile(r"^_(?:MklNative|Mkl)?(?:Fused)?")


def op_kind(op_type, op_name):
  """The report's kind (one of KINDS) of an op, traced or as run."""
  op_type = _RUNTIME_PREFIX.sub("", op_type)
  if op_type == "Cast":
    return "Cast"
  if _MATMUL_TYPE.search(op_type):
    return MATMUL
  if op_type in _PLUMBING_TYPES:
    return "plumbing"
  if _LAYER_NORM_SCOPE.search(op_name):
    return "LayerNorm"
  if "Softmax" in op_type:
    return "Softmax"
  if op_type in _SHAPE_TYPES:
    return "Transpose/concat"
  return "other compute"


def _elements(op):
  """Elements written by `op` (static shapes; 0 where unknown)."""
  total = 0
  for out in op.outputs:
    shape = out.shape
    if shape.rank is not None and shape.is_fully_defined():
      total += shape.num_elements()
  return total


# Ops through which a tensor is still a weight as read from its variable.
_WEIGHT_PATH_TYPES = {"Identity", "ConcatV2", "Slice", "StridedSlice",
                      "Reshape"}


def _is_weight(tensor, depth=4):
  op = tensor.op
  if op.type == "ReadVariableOp":
    return True
  return depth > 0 and op.type in _WEIGHT_PATH_TYPES and any(
      _is_weight(t, depth - 1) for t in op.inputs if t.dtype.is_floating)


def graph_op_counts(graph):
  """Ops of a FuncGraph by kind: {kind: {"ops": n, "elements": n}, ...}.

  Also: `casts_f32_bf16`, the casts between float32 and bfloat16 (the ones
  mixed precision adds); `weight_casts`, the casts that read a weight (ops
  and elements: a weight shared by L layers and cast in each is cast L
  times); `round_trip_casts`, casts whose input is a cast from the dtype
  they produce (x -> y -> x: at best no change, at worst a rounding).
  """
  counts = {k: {"ops": 0, "elements": 0} for k in KINDS}
  counts["weight_casts"] = {"ops": 0, "elements": 0}
  float_casts = round_trips = 0
  floats = {"float32", "bfloat16"}
  for op in graph.get_operations():
    kind = op_kind(op.type, op.name)
    counts[kind]["ops"] += 1
    counts[kind]["elements"] += _elements(op)
    if op.type == "Cast":
      src, dst = op.inputs[0].dtype.name, op.outputs[0].dtype.name
      if {src, dst} == floats:
        float_casts += 1
      if _is_weight(op.inputs[0]):
        counts["weight_casts"]["ops"] += 1
        counts["weight_casts"]["elements"] += _elements(op)
      producer = op.inputs[0].op
      if producer.type == "Cast" and producer.inputs[0].dtype.name == dst:
        round_trips += 1
  counts["casts_f32_bf16"] = float_casts
  counts["round_trip_casts"] = round_trips
  return counts


# --- the two sides -----------------------------------------------------------


def build_sides(config, batch_size):
  """{side: (forward_fn, step_fn)} and one batch, under the current policy.

  forward_fn(batch) -> encoder sequence_output; step_fn(batch) -> (loss,
  gradients). Both sides use benchmarks/pretrain_throughput.py's builders,
  so the training step is the one that benchmark times.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.converters.keras_hub_interop import keras_hub_inputs  # pylint: disable=g-import-not-at-top
  from benchmarks import pretrain_throughput as pt  # pylint: disable=g-import-not-at-top

  batch = pt.make_batch(batch_size, config.vocab_size)
  sides = {}
  for side, build in (("albert_tf", pt.ours), ("keras_hub", pt.keras_hub_model)):
    modules, forward = build(config)
    forward(batch, False)  # build the variables
    modules = modules if isinstance(modules, list) else [modules]
    if side == "albert_tf":
      encoder = modules[0].encoder
      inputs = lambda b: {k: b[k] for k in  # noqa: E731
                          ("input_ids", "input_mask", "segment_ids")}
    else:
      encoder = modules[0]
      inputs = keras_hub_inputs
    sides[side] = (tf.function(_encode_fn(encoder, inputs)),
                   tf.function(_step_fn(forward, modules)))
  return sides, batch


def _encode_fn(encoder, inputs):
  return lambda b: encoder(inputs(b), training=False)["sequence_output"]


def _step_fn(forward, modules):
  """(loss, gradients) of one MLM + SOP batch; the variables are closed
  over (passed as arguments, tf.function would take them for tensors)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from albert_tf.modeling.models import pretraining_losses  # pylint: disable=g-import-not-at-top
  variables = list({id(v): v for m in modules
                    for v in m.trainable_variables}.values())

  def step(b):
    with tf.GradientTape() as tape:
      loss = pretraining_losses(forward(b, True), b)["loss"]
    return loss, tape.gradient(loss, variables)
  return step


def count_ops(sides, batch):
  """{function: {side: graph_op_counts}} for "forward" and "train_step"."""
  result = {}
  for i, function in enumerate(("forward", "train_step")):
    result[function] = {
        side: graph_op_counts(fns[i].get_concrete_function(batch).graph)
        for side, fns in sides.items()}
  return result


# --- profile -----------------------------------------------------------------

# Events of ops that only call other ops: their time is their children's.
_CONTAINER_TYPES = {"PartitionedCall", "StatefulPartitionedCall", "While",
                    "If", "StatelessIf", "StatelessWhile", "_XlaRun",
                    "XlaLaunch"}
# An XLA-compiled function (our fused GELU) runs as one executable, not as
# TF ops; its time is counted as one op type of its own.
_XLA_EXECUTABLE_EVENT = "CpuExecutable::ExecuteAsyncOnStream"
XLA = "XLA executable"
# A TF op event on the host is named "<op name>:<OpType>".
_TF_OP_EVENT = re.compile(r"^(?P<name>[^:]+):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")


def _xspace(logdir):
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  paths = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
  if not paths:
    raise RuntimeError(f"no *.xplane.pb under {logdir}: the profiler "
                       "wrote nothing")
  space = xplane_pb2.XSpace()
  with open(max(paths, key=os.path.getmtime), "rb") as f:
    space.ParseFromString(f.read())
  return space


def op_time_by_kind(space):
  """{kind: seconds, "by_type": {OpType: seconds}} from the host CPU plane."""
  seconds = collections.Counter()
  by_type = collections.Counter()
  for plane in space.planes:
    if not plane.name.startswith("/host:CPU"):
      continue
    for line in plane.lines:
      for event in line.events:
        meta = plane.event_metadata[event.metadata_id]
        t = event.duration_ps * 1e-12
        if meta.name == _XLA_EXECUTABLE_EVENT:
          seconds["other compute"] += t
          by_type[XLA] += t
          continue
        match = _TF_OP_EVENT.match(meta.name or meta.display_name)
        if not match or match["type"] in _CONTAINER_TYPES:
          continue
        seconds[op_kind(match["type"], match["name"])] += t
        by_type[match["type"]] += t
  return {"seconds": dict(seconds), "by_type": dict(by_type)}


def _profile_call(fn, batch):
  """Op time by kind and by type of one call of `fn` (traced and warm)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    try:
      out = fn(batch)
      for t in tf.nest.flatten(out, expand_composites=True):
        if t is not None:  # (gradients of unused weights are None)
          t.numpy()  # wait for the call to finish
    finally:
      tf.profiler.experimental.stop()
    return op_time_by_kind(_xspace(logdir))


def _summary(times, calls):
  total = sum(times["seconds"].values())
  matmul = times["seconds"].get(MATMUL, 0.0)
  return {"op_seconds_per_call": total / calls,
          "non_matmul_share": (total - matmul) / total if total else 0.0,
          "seconds_by_kind": {k: v / calls
                              for k, v in times["seconds"].items()},
          "top_non_matmul_types": sorted(
              ((t, v / calls) for t, v in times["by_type"].items()
               if not _MATMUL_TYPE.search(t)), key=lambda x: -x[1])[:8]}


def profile_sides(sides, batch, calls):
  """{function: {side: profile summary}} over `calls` calls per side.

  The sides take turns, one profiled call each, so that both see the same
  machine (a shared machine's load drifts).
  """
  result = {}
  for i, function in enumerate(("forward", "train_step")):
    totals = {side: {"seconds": collections.Counter(),
                     "by_type": collections.Counter()} for side in sides}
    for fns in sides.values():
      for _ in range(2):  # trace, then one call to settle the kernels
        fns[i](batch)
    for _ in range(calls):
      for side, fns in sides.items():
        times = _profile_call(fns[i], batch)
        for key in ("seconds", "by_type"):
          totals[side][key].update(times[key])
    result[function] = {side: _summary(t, calls) for side, t in totals.items()}
  return result


# --- printing ------------------------------------------------------------------


def format_counts(preset, counts):
  lines = [f"{preset}: ops in the traced graph (elements written, millions)"]
  for function, per_side in counts.items():
    lines.append(f"  {function:<12} {'':<20}" + "".join(
        f"{s:>22}" for s in SIDES))
    for kind in KINDS + ("weight_casts",):
      cells = "".join(
          f"{per_side[s][kind]['ops']:>10} ({per_side[s][kind]['elements'] / 1e6:7.2f}M)"
          for s in SIDES)
      label = "of Cast: weights" if kind == "weight_casts" else kind
      lines.append(f"  {'':<12} {label:<20}{cells}")
    for key, label in (("casts_f32_bf16", "of Cast: f32<->bf16"),
                       ("round_trip_casts", "of Cast: x->y->x")):
      lines.append(f"  {'':<12} {label:<20}" + "".join(
          f"{per_side[s][key]:>22}" for s in SIDES))
  return "\n".join(lines)


def format_profile(preset, prof):
  lines = [f"{preset}: profiled op time, share in non-matmul ops"]
  for function, per_side in prof.items():
    for side in SIDES:
      p = per_side[side]
      top = ", ".join(f"{t} {s * 1e3:.1f}" for t, s in p["top_non_matmul_types"][:5])
      lines.append(
          f"  {function:<12} {side:<10} non-matmul {p['non_matmul_share']:6.1%}"
          f" of op time {p['op_seconds_per_call'] * 1e3:7.1f} ms/call; "
          f"top non-matmul ms: {top}")
    ours, theirs = per_side["albert_tf"], per_side["keras_hub"]
    non_matmul = [p["op_seconds_per_call"] * p["non_matmul_share"]
                  for p in (ours, theirs)]
    lines.append(
        f"  {function:<12} ours/keras-hub: op time "
        f"{ours['op_seconds_per_call'] / theirs['op_seconds_per_call']:.2f}x, "
        f"non-matmul op time {non_matmul[0] / non_matmul[1]:.2f}x")
  return "\n".join(lines)


def main(argv):
  del argv
  import keras  # pylint: disable=g-import-not-at-top
  from albert_tf.core.config import AlbertConfig  # pylint: disable=g-import-not-at-top
  from benchmarks.common import cpu_bf16_features  # pylint: disable=g-import-not-at-top
  from benchmarks.common import machine, matmul_peak_gflops  # pylint: disable=g-import-not-at-top

  features = cpu_bf16_features()
  print(f"machine: {machine()}")
  print("bf16 units: " + ", ".join(f"{k} {'yes' if v else 'no'}"
                                   for k, v in features.items()))
  peaks = {}
  if FLAGS.peaks:
    peaks = {d: matmul_peak_gflops(d) for d in ("float32", "bfloat16")}
    print("matmul 2048^2 peak: " + ", ".join(
        f"{d} {g:.0f} GFLOP/s" for d, g in peaks.items()))
  print(f"policy mixed_bfloat16, batch {FLAGS.batch_size} x seq 128")
  results = {"machine": machine(), "cpu_bf16": features, "peak_gflops": peaks,
             "batch_size": FLAGS.batch_size, "presets": {}}
  for preset in dict.fromkeys(FLAGS.presets + FLAGS.profile_presets):
    config = AlbertConfig.from_preset(preset).replace(
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
      sides, batch = build_sides(config, FLAGS.batch_size)
      entry = {"op_counts": count_ops(sides, batch)}
      print(format_counts(preset, entry["op_counts"]), flush=True)
      if preset in FLAGS.profile_presets:
        entry["profile"] = profile_sides(sides, batch, FLAGS.profile_calls)
        print(format_profile(preset, entry["profile"]), flush=True)
    finally:
      keras.mixed_precision.set_global_policy("float32")
    results["presets"][preset] = entry
  if FLAGS.json_out:
    with open(FLAGS.json_out, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=2)


if __name__ == "__main__":
  _define_flags()
  app.run(main)
