"""Hardware command queues (hcq): the device-neutral runtime that turns exec items into command-queue batches
(docs/architecture.md, the hcq section)."""
