#!/usr/bin/env python3
"""Runs, in a sanitizer build folder, the ctest tests of the given test binaries only.

usage: run_tests.py BUILD_DIR JOBS TARGET...

The sanitizer build (Makefile `asan`) builds a few test targets, not the whole tree, so its
ctest list also holds tests whose binaries were never built (gtest's `<target>_NOT_BUILT`
placeholders, scripts run on other binaries). This asks ctest for every test's command, keeps
those whose executable is one of TARGET's binaries, drops the ones asan_excluded.txt lists (with
why), and runs exactly the rest with ctest (its working directories, timeouts and output on
failure), with ASan and UBSan set to fail a test on any report.
"""
import json
import os
import re
import subprocess
import sys


def cmake_regex_escape(name):
    # CMake's regex syntax: escape its special characters, nothing else.
    return re.sub(r'([\^$.\[\]*+?()|\\])', r'\\\1', name)


def main():
    build, jobs, targets = sys.argv[1], sys.argv[2], set(sys.argv[3:])
    info = json.loads(subprocess.check_output(['ctest', '--show-only=json-v1'], cwd=build))
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, 'asan_excluded.txt')) as f:
        excluded = {l.strip() for l in f if l.strip() and not l.startswith('#')}
    names, left_out = [], 0
    for t in info.get('tests', []):
        cmd = t.get('command') or []
        if cmd and os.path.basename(cmd[0]) in targets and os.path.exists(cmd[0]):
            if t['name'] in excluded:
                left_out += 1
            else:
                names.append(t['name'])
    if not names:
        print('run_tests: no tests of %s in %s' % (' '.join(sorted(targets)), build))
        return 1
    env = dict(os.environ)
    # UBSan: stop at the first report, with a stack (KILN_SANITIZE's -fsanitize=undefined
    # recovers by default, which would only print). ASan: leaks checked at exit, with the
    # suppressions of known third-party leaks (lsan.supp says why each is there).
    env['UBSAN_OPTIONS'] = 'halt_on_error=1:print_stacktrace=1'
    env['ASAN_OPTIONS'] = 'detect_leaks=1:abort_on_error=0'
    env['LSAN_OPTIONS'] = 'suppressions=%s/lsan.supp:print_suppressions=0' % here
    # CMake's regex compiler takes at most ~64 KB: run the selection in chunks of 20 KB.
    chunks, cur = [], []
    for n in names:
        cur.append('^' + cmake_regex_escape(n) + '$')
        if sum(len(c) + 1 for c in cur) > 20000:
            chunks.append(cur)
            cur = []
    if cur:
        chunks.append(cur)
    print('run_tests: %d tests of %d binaries in %s (%d left out: asan_excluded.txt)' %
          (len(names), len(targets), build, left_out), flush=True)
    rc = 0
    for c in chunks:
        r = subprocess.call(['ctest', '--output-on-failure', '-j', jobs, '-R', '|'.join(c)],
                            cwd=build, env=env)
        rc = rc or r
    return rc


if __name__ == '__main__':
    sys.exit(main())
