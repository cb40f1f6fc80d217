"""Hardware command queues (hcq): the device-neutral runtime that turns exec items into command-queue batches
(docs/architecture.md, "Hardware command queues").

Public entry points:
- `tg_core.hcq.device.HCQCompiled`: the base class that makes a device an HCQ device (the engine then batches
  its work); `tg_core.hcq.refdev.HCQRefDevice` (device `HCQREF`) is the reference one, opened through
  `tg_core.hcq.testing.hcqref_registry()`;
- `tg_core.hcq.device.run_items(items, var_vals)`: build, encode, link and submit one batch now (the eager path,
  `tg_core.hcq.engine.submit_items` from engine/realize.py);
- `tg_core.hcq.jit.link_captured` / `replay`: TinyJit's linked batches (`TinyJit.captured.hcq`);
  `LinkedBatch.run(inputs, var_vals)` (link.py) is one replay of one batch;
- `tg_core.hcq.encode.stats`: how many batches were encoded and linked (a replay does neither);
- `TG_HCQ_TIMEOUT_MS` (host.py): the bound on every host wait.
"""
