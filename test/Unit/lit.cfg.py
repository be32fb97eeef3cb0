# -*- Python -*-
# lit configuration for stpar's GoogleTest unit tests: every *Tests binary
# under build/test/Unit is run test by test.

import os

import lit.formats

config.name = "STPAR-Unit"
config.suffixes = []
config.test_source_root = os.path.join(config.stpar_obj_root, "test", "Unit")
config.test_exec_root = config.test_source_root
config.test_format = lit.formats.GoogleTest(".", "Tests")

if config.enable_sanitizers in ("ON", "1", "TRUE", "YES"):
    # See test/lit.cfg.py for why manual poisoning is off.
    config.environment["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1:allow_user_poisoning=0"
    config.environment["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
