"""The devices core itself provides (registered by core's built-in plugin, tg_core/plugins/builtin.py): PYTHON."""
