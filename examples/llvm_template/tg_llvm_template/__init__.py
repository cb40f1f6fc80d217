"""A template tg backend that compiles. Keep this file free of imports: tg imports it to read the manifest."""
