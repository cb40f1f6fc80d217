"""Read by tg before anything else of this plugin: constants only, no imports.

tg-mpi provides no device for tensors: `MPI` is the name its options live under (`devices.MPI.device`,
`TG_MPI_TIMEOUT`, ...), and it never opens (a priority below PYTHON's, so it is never the default)."""
API = ">=1.1,<2"              # the tg core API versions this plugin is written for (1.1: Tensor, tg_data_parallel)
DEVICES = {"MPI": -100}       # the options' namespace, not a device tensors can live on
HOOKS = "tg_mpi.plugin"       # imported when tg lists plugins or asks for a data-parallel group
