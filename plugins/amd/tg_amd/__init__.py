"""tg-amd: the AMD device (gfx1100, RDNA3 wave32).

Keep this file free of imports: tg imports it to read the manifest."""
