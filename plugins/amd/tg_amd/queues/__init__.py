"""tg-amd's command queues: the packets an AMD GPU's command processors read (docs/architecture.md, "AMD queues").

- `pm4.py`: the PM4 type-3 packets of the compute queue (opcodes and gfx11 registers as tables, amd.md 2.2/10),
  the kernel dispatch sequence, signals, waits, timestamps, and PRED_EXEC blocks for multi-XCC parts;
- `sdma.py`: the SDMA 6.0 packets of the copy queue (COPY_LINEAR split at the engine's maximum, FENCE,
  POLL_REGMEM, TIMESTAMP, TRAP);
- `rules.py`: the `pm_encode` rules (queue ops -> those packets) and the `pm_lower` rules (a command buffer ->
  its ring push as host statements: one INDIRECT_BUFFER for PM4, the stream itself for SDMA).
"""
