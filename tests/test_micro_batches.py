"""--micro_batches: what auto picks, and the one-line error for bad values.

That the parts give the whole batch's losses and gradients is tested in
test_model.py; the speed is in benchmarks/README.md.
"""

import pytest

from albert_tf.training import micro_batches


@pytest.mark.parametrize("kwargs,cores,want", [
    (dict(tpu=False, gpus=0, strategy="default", batch_size=32), 2, 2),
    (dict(tpu=False, gpus=0, strategy="one_device", batch_size=32), 8, 2),
    (dict(tpu=False, gpus=0, strategy="default", batch_size=32), 1, 1),
    (dict(tpu=False, gpus=0, strategy="default", batch_size=15), 2, 1),
    (dict(tpu=False, gpus=1, strategy="default", batch_size=32), 2, 1),
    (dict(tpu=True, gpus=0, strategy="tpu", batch_size=32), 2, 1),
    (dict(tpu=False, gpus=0, strategy="mirrored", batch_size=32), 2, 1),
])
def test_auto(kwargs, cores, want, monkeypatch):
  monkeypatch.setattr(micro_batches, "cores", lambda: cores)
  count, why = micro_batches.resolve("auto", **kwargs)
  assert count == want and why


def test_a_number_is_kept_whatever_the_machine(monkeypatch):
  monkeypatch.setattr(micro_batches, "cores", lambda: 1)
  assert micro_batches.resolve("3", tpu=False, gpus=1, strategy="mirrored",
                               batch_size=4) == (3, "as --micro_batches says")


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5", ""])
def test_bad_values_are_one_line(value):
  with pytest.raises(ValueError) as e:
    micro_batches.parse(value)
  assert str(e.value) == ("--micro_batches must be auto or a whole number "
                          f">= 1, got {value!r}")


def test_one_part_leaves_the_threads_alone():
  assert micro_batches.configure_threads(1) == ""
