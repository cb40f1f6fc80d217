"""A test plugin for tg's plugin tests."""
