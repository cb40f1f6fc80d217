"""tg-mockgpu: a mock AMD GPU (paged GPU memory and an RDNA3 wave32 emulator) for tg-amd.

Imports nothing heavy: core reads the manifest of every installed plugin through this package."""
