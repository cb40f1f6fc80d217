#!/usr/bin/env sh
# Debian packages the tests need, each installed when missing:
# - llvm-19: the tests' independent AMD oracle (llvm-mc-19 assembles RDNA3 instructions for the decoder tests,
#   llvm-objdump-19/llvm-readelf-19 check our disassembly and ELF reader);
# - chromium: the headless browser the chat page test of `tg llm serve` drives (tests/llm/test_server_page.py).
set -e
missing=""
command -v llvm-mc-19 >/dev/null 2>&1 || missing="$missing llvm-19"
command -v chromium >/dev/null 2>&1 || missing="$missing chromium"
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# shellcheck disable=SC2086  # $missing is a list of package names
$sudo apt-get install -y -q $missing >/dev/null 2>&1 || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q $missing >/dev/null; }
command -v llvm-mc-19 >/dev/null
command -v chromium >/dev/null
