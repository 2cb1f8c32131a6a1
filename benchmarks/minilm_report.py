"""The markdown report of benchmarks/minilm_transfer.py."""

import os

from benchmarks.minilm_parity import REL


def cell(stats):
  if stats is None:
    return "—"
  if stats["n"] == 1:
    return f"{stats['mean']:.3f} (1 run)"
  return f"{stats['mean']:.3f} ± {stats['std']:.3f} ({stats['n']} seeds)"


def markdown(result):
  cpu, data, settings = result["cpu"], result["data"], result["settings"]
  lines = [
      f"# MiniLM-L6 transfer on BBC News ({result['date']})", "",
      f"CPU: {cpu['model']} ({', '.join(cpu['flags'])}), {os.cpu_count()} "
      f"cores, shared (load average {result['load_start'][0]:.2f} at the "
      f"start, {result['load_end'][0]:.2f} at the end); wall "
      f"{result['wall_s'] / 60:.1f} min. Command: `{result['command']}`.", "",
      f"Data: {data['articles']} BBC articles after dropping "
      f"{data['duplicates']} exact duplicates; test {data['test']} (20% of "
      f"each class, seed {data['split_seed']}), pool {data['pool']}. "
      "Few-shot sets are drawn from the pool with the run's seed. "
      f"Fine-tuning: max_seq_length {settings['max_seq_length']}, AdamW lr "
      f"{settings['learning_rate']}, 10% warmup, last step scored (no dev "
      "set).", "",
      "| regime | steps × batch | MiniLM converted | random init | "
      "TF-IDF + LR, whole article | TF-IDF + LR, first 126 pieces | "
      "wall per run, MiniLM / random (training examples/s) |",
      "|---|---|---|---|---|---|---|"]
  for name, row in result["regimes"].items():
    lines.append(
        f"| {name} ({row['train_examples']} examples) | {row['steps']} × "
        f"{row['batch']} | {cell(row['minilm'])} | {cell(row['random'])} | "
        f"{cell(row['tfidf'])} | {cell(row['tfidf_cut'])} | "
        f"{row['minilm_s']:.0f} s / "
        f"{row['random_s']:.0f} s ({row['examples_per_s']:.1f}) |")
  p = result["parity"]
  lines += ["", "Parity of the converted encoder with a NumPy forward pass of "
            f"the safetensors ({p['texts']} test articles, {p['tokens']} "
            "tokens): max |diff| / max(1, max |value|) = "
            f"{p['sequence_output']['relative']:.2e} (sequence_output), "
            f"{p['pooled_output']['relative']:.2e} (pooled_output); "
            f"tolerance {REL:g}: "
            f"{'pass' if p['sequence_output']['ok'] and p['pooled_output']['ok'] else 'FAIL'}."]
  e = result.get("export")
  if e:
    lines += ["", f"Export (`export_saved_model`, {e['export_s']} s) of the "
              f"{e['run']} MiniLM classifier, served by "
              "`albert_tf.load(export_dir).predict` on the raw test texts "
              f"({e['predict_s']} s for {e['texts']}): accuracy "
              f"{e['served_accuracy']:.4f}, checkpoint's "
              f"{e['checkpoint_accuracy']:.4f}; the same label on "
              f"{e['agreement']} of {e['texts']} texts."]
  return "\n".join(lines) + "\n"
