#!/bin/sh
# run-unit.sh - runs each cmocka test binary, then prints one summary line
# "unit: N passed, M failed" counted from cmocka's own closing lines.
# Usage: tests/run-unit.sh [--valgrind] BIN...
set -u
wrap=""
if [ "${1:-}" = "--valgrind" ]; then
    shift
    wrap="valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite"
fi
passed=0; failed=0; bad_bins=""
out=$(mktemp); trap 'rm -f "$out"' EXIT
for bin in "$@"; do
    $wrap "$bin" >"$out" 2>&1
    rc=$?
    cat "$out"
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -n 1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out" | tail -n 1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$rc" -ne 0 ]; then
        bad_bins="$bad_bins $(basename "$bin")"
        # A crash or a valgrind error leaves no cmocka count: count the binary once.
        [ -n "$f" ] || failed=$((failed + 1))
    fi
done
[ -z "$bad_bins" ] || echo "failing binaries:$bad_bins"
echo "unit: $passed passed, $failed failed"
[ -z "$bad_bins" ]
