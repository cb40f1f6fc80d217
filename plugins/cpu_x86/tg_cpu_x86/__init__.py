"""tg's CPU backend plugin (device CPU). Keep this file free of imports: tg imports it to read the manifest."""
