"""tf.config and tf.device under TensorFlow and tapejax (a CPU-only machine, as CI's).

Devices are compared as ``(name, device_type)`` tuples; errors as ``(class, message)``
where the messages agree (``err`` from test_debugging), the class alone where tapejax
raises earlier (soft placement off: when the scope is entered, TF at its first op).
"""
from .harness import parity
from .test_debugging import err


def _names(devs):
    return [(d.name, d.device_type) for d in devs]


@parity
def test_devices_listed_with_tf_names(tf):
    """list_physical_devices / list_logical_devices / get_visible_devices on the CPU."""
    c = tf.config
    return [_names(c.list_physical_devices()), _names(c.list_physical_devices("CPU")),
            _names(c.list_physical_devices("GPU")), _names(c.list_physical_devices("XPU")),
            _names(c.list_logical_devices()), _names(c.list_logical_devices("CPU")),
            _names(c.get_visible_devices()), _names(c.experimental.list_physical_devices("CPU")),
            c.get_soft_device_placement()]


def _placed(tf, name):
    with tf.device(name):
        x = tf.constant(1.)
        y = x + 1.
        v = tf.Variable(2.)
    return x.device, y.device, v.device


@parity
def test_device_scopes(tf):
    """Tensors, op results and Variables in a scope: TF's names; a device that is not here is soft-placed."""
    return [_placed(tf, n) for n in ("CPU:0", "/CPU:0", "/cpu:0", "/device:CPU:0",
                                     "/job:localhost/replica:0/task:0/device:CPU:0", "/GPU:0", "GPU:1", "/TPU:0",
                                     "GPU", "cpu", "/gpu:*", "/job:localhost", "/replica:0/device:CPU:0",
                                     "device:CPU:0", None, "")]


@parity
def test_device_bad_names(tf):
    """Unknown attributes, non-strings, functions, other jobs or tasks: TF's errors."""
    return [err(_placed, tf, n) for n in ("foo", "/foo:0", "/XPU:0", "CPU:0:1", "/physical_device:CPU:0",
                                          "CPU:x", 0, lambda op: "/CPU:0", "/task:1/CPU:0", "/job:worker/CPU:0")]


@parity
def test_soft_placement_off(tf):
    """Soft placement off: a device that is not here is InvalidArgumentError; the CPU still works."""
    tf.config.set_soft_device_placement(False)
    try:
        out = [tf.config.get_soft_device_placement(), err(_placed, tf, "/GPU:0", message=False),
               err(_placed, tf, "/CPU:1"), _placed(tf, "/CPU:0")]
    finally:
        tf.config.set_soft_device_placement(True)
    return out + [tf.config.get_soft_device_placement(), err(tf.config.set_soft_device_placement, "x", message=False)]


@parity
def test_memory_growth_and_visibility(tf):
    """Memory growth refuses the CPU and unknown devices; visible devices cannot change once started."""
    c = tf.config
    cpu = c.list_physical_devices("CPU")[0]
    return [err(c.experimental.set_memory_growth, cpu, True), err(c.experimental.set_memory_growth, "x", True),
            err(c.experimental.get_memory_growth, cpu, message=False),
            err(c.experimental.get_memory_info, "CPU:0"), err(c.experimental.get_memory_info, "GPU:0"),
            c.experimental.get_device_details(cpu), err(c.set_visible_devices, c.list_physical_devices("CPU")),
            err(c.set_visible_devices, [], "CPU", message=False), err(c.set_visible_devices, "x")]
