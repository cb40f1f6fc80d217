"""A template tg device plugin. Keep this file free of imports: tg imports it to read the manifest."""
