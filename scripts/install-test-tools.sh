#!/usr/bin/env sh
# The tests' independent AMD oracle: Debian's llvm-19 tools (llvm-mc-19 assembles RDNA3 instructions for the
# decoder tests, llvm-objdump-19/llvm-readelf-19 check our disassembly and ELF reader). Installed when missing.
set -e
command -v llvm-mc-19 >/dev/null 2>&1 && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get install -y -q llvm-19 >/dev/null 2>&1 || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q llvm-19 >/dev/null; }
command -v llvm-mc-19 >/dev/null
