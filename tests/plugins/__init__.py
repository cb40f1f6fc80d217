"""Tests of the plugin system against real installed plugin distributions."""
