"""Transformers device-map adaptations (3, 4). Checked against transformers 5.23.0.

3. `transformers.integrations.accelerate._get_device_map`
   For the automatic strategies the computed map holds integer indices; the
   wrapper rewrites them to explicit `"neuron:i"` strings, so that loading,
   `dispatch_model` hooks and `model.hf_device_map` all name the real device.

4. `transformers.integrations.accelerate.check_and_set_device_map`
   Transformers documents integers as CUDA indices (`device_map=0` is "GPU 0")
   and does not map them to `neuron:i`. Instead of an obscure failure or a
   load on another device, `device_map=0` or a dict with integer values
   (`{"": 1}`) raises a ValueError naming what to use: `"neuron:0"` /
   `{"": "neuron:1"}`. Device strings and `torch.device`s pass through.

"""
from ._common import neuron_is_accelerator

_AUTO_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _wrap_get_device_map(original):
    def _get_device_map(model, device_map, *args, **kwargs):
        requested = device_map
        result = original(model, device_map, *args, **kwargs)
        if isinstance(requested, str) and requested in _AUTO_STRATEGIES and neuron_is_accelerator():
            if isinstance(result, dict):
                for name, dev in list(result.items()):
                    if isinstance(dev, int) and not isinstance(dev, bool):
                        result[name] = f"neuron:{dev}"
        return result

    return _get_device_map


def _integer_device_map_error(device_map):
    if isinstance(device_map, bool):
        return None
    if isinstance(device_map, int) and device_map >= 0:
        return (
            f"device_map={device_map!r}: Transformers treats integer device indices as CUDA devices and "
            f"does not map them to the neuron device. Use device_map=\"neuron:{device_map}\" "
            f"(or {{\"\": \"neuron:{device_map}\"}}) instead, or device_map=\"auto\" to spread the model "
            "over all neuron cores."
        )
    if isinstance(device_map, dict):
        bad = {k: v for k, v in device_map.items() if isinstance(v, int) and not isinstance(v, bool)}
        if bad:
            fixed = {k: f"neuron:{v}" for k, v in bad.items()}
            return (
                f"device_map has integer device indices {bad}: Transformers treats them as CUDA devices and "
                f"does not map them to the neuron device. Use device strings instead, e.g. {fixed} "
                "(\"neuron:0\", \"neuron:1\", ...)."
            )
    return None


def _wrap_check_and_set_device_map(original):
    def check_and_set_device_map(device_map):
        if neuron_is_accelerator():
            message = _integer_device_map_error(device_map)
            if message is not None:
                raise ValueError(message)
        return original(device_map)

    return check_and_set_device_map



TARGETS = {
    "transformers.integrations.accelerate": [
        ("check_and_set_device_map", lambda f, m: _wrap_check_and_set_device_map(f)),
        ("_get_device_map", lambda f, m: _wrap_get_device_map(f)),
    ],
}
