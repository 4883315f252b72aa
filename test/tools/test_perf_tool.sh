#!/bin/sh
# nccl-det-perf without a GPU: --help lists every option of its table; bad options and
# values exit 2; nccl-tests' options mean what they mean there (-n iterations, -G graph
# launches, -i step bytes) and the tool's own are long (--ranks, --modes, --coll), the
# old letters no longer setting them; --dry-run prints the header (ranks, iterations),
# the NCCL decision and the rows (one per size, dtype, op and mode, in 132 columns,
# nccl-tests' closing lines) and writes the plan (path, grid) to --csv:
# - the one-GPU proxy (more ranks than GPUs) says the NCCL columns are unavailable and
#   why (NCCL refuses two ranks on one GPU in one process), and --nccl then exits 2;
# - NCCL_DET_NCCL_LIBRARY names the library loaded (its version printed), a copy of
#   nccl-det there is refused, a missing file is reported; --no-nccl loads nothing;
# - --nccl-symmetric adds the symmetric-window columns when the NCCL exports
#   ncclCommWindowRegister (the fake does), and says why not (exit 0) when it does not
#   (the fake built like NCCL 2.26), when NCCL cannot run or is not run; --nccl's exit 2
#   is unchanged by it.
# The measured run needs a GPU: test/gpu (doc/testing.md, "GPU tests").
. "${NDET_TOP_SRCDIR:-.}/test/support/test_preload_lib.sh"

perf="$top_builddir/tools/nccl-det-perf"
[ -x "$perf" ] || fail "$perf was not built"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
unset NCCL_DET_NCCL_LIBRARY NCCL_CONF_FILE
HOME=$scratch
export HOME

# ---- options
"$perf" --help >"$scratch/help" 2>&1 || fail "--help failed"
grep -q '^Usage: nccl-det-perf' "$scratch/help" || fail "--help: $(cat "$scratch/help")"
for option in '    --ranks N' '-n, --iters N' '-w, --warmup_iters N' '-b, --minbytes BYTES' \
	'-i, --stepbytes BYTES' '-G, --cudagraph N' '-F, --output_file FILE' '    --modes MODES' \
	'    --coll C' '--nccl ' '--no-nccl ' '--nccl-symmetric ' '--csv FILE' '--dry-run ' '--gpus N' \
	'--check-max BYTES' '-r, --root R' '-h, --help'; do
	grep -q -F -- "$option" "$scratch/help" || fail "--help does not list '$option'"
done
"$perf" -h | cmp -s - "$scratch/help" || fail "-h and --help differ"
for bad in --bogus '-G x' '-c 2' '-d f32,f99' '-o sum,xor' '-o premul' '-b 1Q' '-f 1' '-n 0' \
	'-b 64 -e 8' '--ranks 17' 'stray' '--check-max 1Q' '-C allreduce' '-f 2 -i 8' '-r 0' '--coll bogus' \
	'--modes bogus' '--modes graph -G 0' '-t 2' '-g 1' '-n'; do
	# shellcheck disable=SC2086 # each case is a list of words
	"$perf" --dry-run $bad >"$scratch/bad" 2>&1
	rc=$?
	[ $rc -eq 2 ] || fail "'$bad' exited $rc, not 2: $(cat "$scratch/bad")"
done
# An unknown type name lists the accepted ones; nccl-tests' names are accepted.
"$perf" --dry-run -d f32,f99 2>&1 | grep -q 'unknown name in the list (f32 or float, f16 or half' ||
	fail "-d f99 does not list the type names"
rows=$("$perf" --dry-run --gpus 1 --ranks 2 -b 64 -e 64 -d float,half,bfloat16,double --no-nccl -G 0 2>&1 |
	grep -c -E '^ +64 +[0-9]+ +(f32|f16|bf16|f64) +sum ')
[ "$rows" -eq 4 ] || fail "nccl-tests' type names: $rows rows, not 4"
"$perf" --version | grep -q -x "nccl-det-perf $PACKAGE_VERSION" || fail "--version"
# What is checked, and up to which size.
"$perf" --dry-run --gpus 1 --ranks 2 -b 8 -e 8 2>&1 |
	grep -q -x '# checks: bit-exact against the CPU tree and size-invariant, sizes up to 268435456 B' ||
	fail "dry run: no line on the default checks"
"$perf" --dry-run --gpus 1 --ranks 2 -b 8 -e 8 --check-max 1G 2>&1 |
	grep -q -x '# checks: bit-exact against the CPU tree and size-invariant, sizes up to 1073741824 B' ||
	fail "--check-max 1G not taken"
"$perf" --dry-run --gpus 1 --ranks 2 -b 8 -e 8 -c 0 2>&1 | grep -q -x '# checks: off (-c 0)' ||
	fail "-c 0: no line saying the checks are off"
# --gpus only plans a dry run.
"$perf" --gpus 2 >"$scratch/bad" 2>&1
[ $? -eq 2 ] || fail "--gpus without --dry-run was accepted: $(cat "$scratch/bad")"
"$perf" --dry-run -G x 2>&1 | grep -q -- '--cudagraph x: not a number from 0 to 10^9' ||
	fail "no reason for a bad -G"

# ---- nccl-tests' letters, the tool's own long options; the old letters' meanings gone
# dryrun NAME ARGS...: a dry run on 8 planned GPUs without NCCL into $scratch/NAME.
dryrun() {
	local name=$1
	shift
	"$perf" --dry-run --gpus 8 --no-nccl -b 8 -e 64 -d f32 "$@" >"$scratch/$name" 2>&1 ||
		fail "dry run $*: $(cat "$scratch/$name")"
}
# has NAME REGEX: a line of $scratch/NAME matches (grep -E).
has() {
	grep -q -E -- "$2" "$scratch/$1" || fail "$1: no line like '$2': $(cat "$scratch/$1")"
}
dryrun ranks3 --ranks 3 -n 7 -w 3
has ranks3 '^# nccl-det-perf .*: 3 ranks on 3 GPU\(s\) \(dry run\), one thread per GPU$'
has ranks3 '^# ranks 3 minBytes 8 maxBytes 64 step: 2\(factor\) warmup iters: 3 iters: 7 validation: 1 graph: 1 modes: eager,graph$'
# -n is the iterations: -n 4 leaves the ranks at their default (one per GPU: 8).
dryrun iters4 -n 4
has iters4 '^# nccl-det-perf .*: 8 ranks on 8 GPU\(s\)'
has iters4 '^# ranks 8 .* iters: 4 '
grep -q -E 'ranks 4|4 ranks' "$scratch/iters4" && fail "-n 4 still sets 4 ranks: $(cat "$scratch/iters4")"
# Rows per mode: sizes 8..64 by 2 (4) x eager, graph; -G 0 is eager only (nccl-tests'
# default), -G 5 launches the graph 5 times, --modes graph drops the eager rows.
modes() {
	[ "$(grep -c -E "^ +[0-9]+ +[0-9]+ +f32 +sum +$2 " "$scratch/$1")" -eq "$3" ] ||
		fail "$1: not $3 $2 rows: $(cat "$scratch/$1")"
}
modes ranks3 eager 4
modes ranks3 graph 4
dryrun g0 -G 0
modes g0 eager 4
modes g0 graph 0
has g0 ' graph: 0 modes: eager$'
dryrun g5 -G 5
modes g5 graph 4
has g5 ' graph: 5 modes: eager,graph$'
dryrun graphonly --modes graph
modes graphonly eager 0
modes graphonly graph 4
# -i steps by bytes (nccl-tests' --stepbytes): 1K, 2K, 3K, 4K.
dryrun step -i 1K -b 1K -e 4K -G 0
has step ' step: 1024\(bytes\) '
[ "$(grep -c -E '^ +(1024|2048|3072|4096) +256 |^ +(2048 +512|3072 +768|4096 +1024) ' "$scratch/step")" -eq 4 ] ||
	fail "-i 1K: not the rows 1K, 2K, 3K, 4K: $(cat "$scratch/step")"
# --coll is long only: -C is nccl-tests' (report_cputime), no option here.
"$perf" --dry-run -C reducescatter >"$scratch/oldc" 2>&1
[ $? -eq 2 ] || fail "-C was accepted: $(cat "$scratch/oldc")"
grep -q -x "nccl-det-perf: invalid option '-C' (the collective is --coll)" "$scratch/oldc" ||
	fail "-C: $(cat "$scratch/oldc")"
# Unknown options: what was wrong, then the usage (as nccl-tests does).
"$perf" --bogus >"$scratch/bogus" 2>&1
[ $? -eq 2 ] || fail "--bogus did not exit 2"
[ "$(head -1 "$scratch/bogus")" = "nccl-det-perf: invalid option '--bogus'" ] ||
	fail "--bogus: $(cat "$scratch/bogus")"
grep -q '^Usage: nccl-det-perf' "$scratch/bogus" || fail "--bogus: no usage: $(cat "$scratch/bogus")"
"$perf" -t 2 2>&1 | grep -q -x "nccl-det-perf: invalid option '-t' (nccl-tests' -t has no counterpart here)" ||
	fail "-t: no reason"
"$perf" -n 2>&1 | grep -q -x "nccl-det-perf: option '-n' needs an argument" || fail "-n without a value"
"$perf" --dry-run -f 2 -i 8 2>&1 | grep -q -x 'nccl-det-perf: -f (--stepfactor) and -i (--stepbytes) exclude each other' ||
	fail "-f with -i: no reason"
# The table: header, rows and closing lines within 132 columns (the lines naming a
# library's path may be longer), header and rows
# aligned; nccl-tests' closing line; no internal names in anything it prints.
NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$perf" --dry-run --gpus 2 --ranks 2 -b 8 -e 1G -f 32 -d all \
	-o all --nccl --nccl-symmetric >"$scratch/wide" 2>&1 || fail "wide dry run: $(cat "$scratch/wide")"
for name in ranks3 g0 wide; do
	long=$(awk '/^ +[0-9]|^# +(size|\(B\)|<)|^# (Avg|Out)/ && length($0) > 132' "$scratch/$name")
	[ -z "$long" ] || fail "$name: lines over 132 columns: $long"
	has $name '^# Avg bus bandwidth    : '
	widths=$(grep -E '^#  +size |^ +[0-9]+ +[0-9]+ ' "$scratch/$name" | awk '{ print length($0) }' | sort -u)
	[ "$(echo "$widths" | wc -l)" -eq 1 ] || fail "$name: header and rows of different widths: $widths"
done
has ranks3 '^#  +size +count +type +redop +mode +path +time +algbw +busbw +#wrong +time +algbw +busbw +ratio +exact +size-inv +nccl-diff$'
has wide '^#  +size .* busbw +symm-t +exact +size-inv +nccl-diff$'
has ranks3 '^ +8 +2 +f32 +sum +eager +ll( +-){11}$'
# PreMulSum by either name (a scalar per rank; never planned LL or push): rows named
# mulsum as in nccl-tests, the redop column one wider, header and rows still aligned;
# "all" leaves it out.
dryrun premul -d f32,bf16 -b 8 -e 8M -f 32 -o sum,premulsum
dryrun mulsum -d f32,bf16 -b 8 -e 8M -f 32 -o mulsum
for name in premul mulsum; do
	rows=$(grep -c -E '^ +[0-9]+ +[0-9]+ +(f32|bf16) +mulsum +(eager|graph) +(1shot|2shot) ' "$scratch/$name")
	[ "$rows" -eq 20 ] || fail "$name: $rows PreMulSum rows on the pull paths, not 20: $(cat "$scratch/$name")"
	widths=$(grep -E '^#  +size |^ +[0-9]+ +[0-9]+ ' "$scratch/$name" | awk '{ print length($0) }' | sort -u)
	[ "$(echo "$widths" | wc -l)" -eq 1 ] || fail "$name: header and rows of different widths: $widths"
done
has premul '^ +8 +2 +f32 +sum +eager +ll '
has premul '^#  +size +count +type +redop +mode +path '
dryrun allops -o all
# Wide LL lines where NCCL_DET_LL_WIDE_MIN takes them (its default, 224 KiB: 8 ranks
# sharing one GPU from 32 KiB, past the 96 KiB of 8-byte lines up to 24 blocks of
# 6 KiB), never for f64 or with the setting 0: the path column says which plan each
# row times.
"$perf" --dry-run --gpus 1 --ranks 8 -b 16K -e 160K -i 16K -d f32,f64 \
	-o sum >"$scratch/llw" 2>&1 || fail "wide-line dry run: $(cat "$scratch/llw")"
[ "$(grep -c -E '^ +[0-9]+ +[0-9]+ +f32 +sum +(eager|graph) +llw ' "$scratch/llw")" -eq 16 ] ||
	fail "default settings: not 16 f32 rows in wide lines (32-144 KiB): $(cat "$scratch/llw")"
has llw '^ +16384 +4096 +f32 +sum +eager +ll '
has llw '^ +163840 +40960 +f32 +sum +eager +2shot '
grep -q -E ' f64 .* llw ' "$scratch/llw" && fail "f64 in wide lines: $(cat "$scratch/llw")"
NCCL_DET_LL_WIDE_MIN=0 "$perf" --dry-run --gpus 1 --ranks 8 -b 16K -e 160K -i 16K -d f32 -o sum \
	>"$scratch/llw0" 2>&1 || fail "dry run: $(cat "$scratch/llw0")"
grep -q ' llw ' "$scratch/llw0" && fail "wide lines with NCCL_DET_LL_WIDE_MIN=0: $(cat "$scratch/llw0")"
has llw0 '^ +98304 +24576 +f32 +sum +eager +ll '
has llw0 '^ +114688 +28672 +f32 +sum +eager +2shot '
grep -q mulsum "$scratch/allops" && fail "-o all runs PreMulSum: $(cat "$scratch/allops")"
cat "$scratch/help" "$scratch/ranks3" "$scratch/bogus" "$scratch/oldc" | grep -E 'ndet_|[a-z_]+\.(c|cu|h)\b' &&
	fail "internal names in the output"

# ---- the one-GPU proxy: rows and CSV, NCCL unavailable and why
"$perf" --dry-run --gpus 1 --ranks 4 -b 8 -e 64 -d f32,bf16 --csv "$scratch/proxy.csv" \
	>"$scratch/proxy" 2>&1 || fail "dry run failed: $(cat "$scratch/proxy")"
grep -q '4 ranks on 1 GPU(s) (dry run), ranks share GPU 0 as threads (one-GPU proxy)' \
	"$scratch/proxy" || fail "proxy header: $(cat "$scratch/proxy")"
grep -q '^# NCCL: columns unavailable: the ranks share GPU 0 .*Duplicate GPU detected' \
	"$scratch/proxy" || fail "proxy: no reason for the missing NCCL columns: $(cat "$scratch/proxy")"
# Up to 256 KiB (NCCL_DET_LL_MAX's default) an all-reduce goes LL.
rows=$(grep -c -E '^ +[0-9]+ +[0-9]+ +(f32|bf16) +sum +(eager|graph) +ll ' "$scratch/proxy")
[ "$rows" -eq 16 ] || fail "proxy: $rows rows, not 16 (4 sizes x 2 types x 2 modes): $(cat "$scratch/proxy")"
grep -q -E '^ +8 +4 +bf16 ' "$scratch/proxy" || fail "8 bytes of bf16 are not 4 elements"
# fp8 by nccl-tests' names: one byte per element; "all" is every dtype.
"$perf" --dry-run --gpus 1 --ranks 4 -b 64 -e 64 -d f8e4m3,f8e5m2 >"$scratch/fp8" 2>&1 ||
	fail "fp8 dry run failed: $(cat "$scratch/fp8")"
for t in f8e4m3 f8e5m2; do
	grep -q -E "^ +64 +64 +$t +sum +eager +ll " "$scratch/fp8" || fail "no $t row of 64 elements: $(cat "$scratch/fp8")"
done
rows=$("$perf" --dry-run --gpus 1 --ranks 4 -b 64 -e 64 -d all -G 0 2>&1 | grep -c -E '^ +64 +[0-9]+ +[a-z0-9]+ +sum ')
[ "$rows" -eq 6 ] || fail "-d all: $rows rows, not 6 dtypes"
header='ranks,size_bytes,count,dtype,op,path,blocks,steps,eager_ndet_us,eager_ndet_busbw_gbps,eager_nccl_us,eager_nccl_busbw_gbps,eager_ratio,eager_nccl_symm_us,eager_nccl_symm_busbw_gbps,eager_symm_ratio,graph_ndet_us,graph_ndet_busbw_gbps,graph_nccl_us,graph_nccl_busbw_gbps,graph_ratio,graph_nccl_symm_us,graph_nccl_symm_busbw_gbps,graph_symm_ratio,exact,size_invariant,nccl_differ_elements,kernel_gbps,vs_copy_percent'
[ "$(head -1 "$scratch/proxy.csv")" = "$header" ] || fail "CSV header: $(head -1 "$scratch/proxy.csv")"
[ "$(wc -l <"$scratch/proxy.csv")" -eq 9 ] || fail "CSV: not a header and 8 rows: $(cat "$scratch/proxy.csv")"
grep -q -x '4,32,8,f32,sum,ll,1,1,,,,,,,,,,,,,,,,,,,,,' "$scratch/proxy.csv" ||
	fail "CSV row of 32 bytes of f32: $(cat "$scratch/proxy.csv")"
fields=$(awk -F, '{ print NF }' "$scratch/proxy.csv" | sort -u)
[ "$fields" = 29 ] || fail "CSV rows with other than 29 fields: $fields"
# Without --nccl-symmetric the table has no symmetric column (eleven cells per row).
grep -q 'symm' "$scratch/proxy" && fail "symmetric columns without --nccl-symmetric: $(cat "$scratch/proxy")"
grep -q -E '^ +32 +8 +f32 +sum +graph +ll( +-){11}$' "$scratch/proxy" ||
	fail "proxy: not eleven cells per row: $(cat "$scratch/proxy")"
"$perf" --dry-run --gpus 1 --ranks 2 -e 8 --nccl >"$scratch/required" 2>&1 && fail "--nccl on the proxy succeeded"
grep -q -- '--nccl: NCCL cannot run here: the ranks share GPU 0' "$scratch/required" ||
	fail "--nccl on the proxy: $(cat "$scratch/required")"

# rows NAME REGEX...: every REGEX matches a line of the dry run saved as $scratch/NAME
# or of its plan, one line per row of $scratch/NAME.csv: " size count dtype op path
# BLOCKSxSTEPS " (the grid is in the CSV, not the table).
rows() {
	local name=$1 line
	shift
	awk -F, 'NR > 1 { printf " %s %s %s %s %s %sx%s \n", $2, $3, $4, $5, $6, $7, $8 }' \
		"$scratch/$name.csv" >"$scratch/$name.plan" 2>/dev/null
	for line in "$@"; do
		cat "$scratch/$name" "$scratch/$name.plan" | grep -q -E -- "$line" ||
			fail "$name: no line like '$line': $(cat "$scratch/$name" "$scratch/$name.plan")"
	done
}

# ---- one- and two-shot as the engine would plan them (NCCL_DET_ONESHOT_MAX; LL off)
NCCL_DET_LL_MAX=0 NCCL_DET_ONESHOT_MAX=256K "$perf" --dry-run --gpus 1 --ranks 2 -b 128K -e 512K -d bf16 --no-nccl \
	--csv "$scratch/paths.csv" >"$scratch/paths" 2>&1 || fail "dry run (paths) failed"
rows paths ' 131072 +65536 +bf16 +sum +eager +1shot ' ' 262144 +131072 +bf16 +sum +graph +1shot ' \
	' 524288 +262144 +bf16 +sum +eager +2shot ' '^# NCCL: not run \(--no-nccl\)'


# ---- LL when NCCL_DET_LL_MAX allows it, one step: a block per 1 KiB up to 16 KiB where
# the pool's LL slots (one per 4 KiB of NCCL_DET_LL_MAX) hold that grid, else per 2 KiB
# where they hold that one, else per 4 KiB; past it one-shot
NCCL_DET_LL_MAX=8K "$perf" --dry-run --gpus 1 --ranks 2 -b 4K -e 16K -d bf16 --no-nccl \
	--csv "$scratch/ll.csv" >"$scratch/ll" 2>&1 || fail "dry run (LL) failed"
rows ll ' 4096 +2048 +bf16 +sum +ll +2x1 ' ' 8192 +4096 +bf16 +sum +ll +2x1 ' \
	' 16384 +8192 +bf16 +sum +1shot +2x1 '

# ... and by default up to 256 KiB (64 blocks), where GPUs of their own fit the grid,
# in wide lines from 224 KiB at 2 ranks (NCCL_DET_LL_WIDE_MIN: 43 blocks of 6 KiB);
# 4 ranks sharing one GPU (48 blocks each) take wide lines from 75 KiB, so 6 KiB blocks
# carry 192 and 256 KiB, where 8-byte lines need 4 KiB blocks (48) and two-shot
"$perf" --dry-run --gpus 2 --ranks 2 -b 128K -e 512K -d bf16 --no-nccl --csv "$scratch/lldefault.csv" >"$scratch/lldefault" 2>&1 ||
	fail "dry run (LL default) failed"
rows lldefault ' 131072 +65536 +bf16 +sum +ll +64x1 ' ' 262144 +131072 +bf16 +sum +llw +43x1 ' \
	' 524288 +262144 +bf16 +sum +1shot +32x1 '
NCCL_DET_LL_WIDE_MIN=0 "$perf" --dry-run --gpus 2 --ranks 2 -b 256K -e 256K -d bf16 --no-nccl \
	--csv "$scratch/lldefault0.csv" >"$scratch/lldefault0" 2>&1 || fail "dry run (LL, 8-byte lines) failed"
rows lldefault0 ' 262144 +131072 +bf16 +sum +ll +64x1 '
"$perf" --dry-run --gpus 1 --ranks 4 -b 192K -e 256K -f 4 -d bf16 --no-nccl --csv "$scratch/llshared.csv" >"$scratch/llshared" 2>&1 ||
	fail "dry run (LL, shared GPU) failed"
rows llshared ' 196608 +98304 +bf16 +sum +llw +32x1 '
"$perf" --dry-run --gpus 1 --ranks 4 -b 256K -e 256K -d bf16 --no-nccl --csv "$scratch/llshared2.csv" >"$scratch/llshared2" 2>&1 ||
	fail "dry run (LL, shared GPU, 256 KiB) failed"
rows llshared2 ' 262144 +131072 +bf16 +sum +llw +43x1 '
NCCL_DET_LL_WIDE_MIN=0 "$perf" --dry-run --gpus 1 --ranks 4 -b 192K -e 256K -i 64K -d bf16 --no-nccl \
	--csv "$scratch/llshared0.csv" >"$scratch/llshared0" 2>&1 || fail "dry run (LL, shared GPU, 8-byte lines) failed"
rows llshared0 ' 196608 +98304 +bf16 +sum +ll +48x1 ' ' 262144 +131072 +bf16 +sum +2shot +16x1 '

# ---- past LL by default (NCCL_DET_ONESHOT_MAX=auto): at 2 ranks one-shot up to 2 MiB,
# two-shot between it and NCCL_DET_PUSH_MIN (4 MiB), push from there; at 3 ranks
# two-shot from 64 KiB + 1
"$perf" --dry-run --gpus 2 --ranks 2 -b 2M -e 4M -f 2 -d bf16 --no-nccl --csv "$scratch/auto2.csv" >"$scratch/auto2" 2>&1 ||
	fail "dry run (one-shot auto, 2 ranks) failed"
rows auto2 '^# pool 100663296 B, max blocks 96, one-shot up to 2097152 B$' \
	' 2097152 +1048576 +bf16 +sum +1shot +32x1 ' ' 4194304 +2097152 +bf16 +sum +push +64x1 '
NCCL_DET_PUSH_MIN=8M "$perf" --dry-run --gpus 2 --ranks 2 -b 4M -e 4M -d bf16 --no-nccl \
	--csv "$scratch/auto2b.csv" >"$scratch/auto2b" 2>&1 || fail "dry run (one-shot auto, 2 ranks, 4 MiB pulled) failed"
rows auto2b ' 4194304 +2097152 +bf16 +sum +2shot +32x1 '
# (a reduce-scatter has no one-shot: its grid threshold stays 64 KiB under auto)
"$perf" --dry-run --gpus 2 --ranks 2 -b 2M -e 2M -d bf16 --no-nccl --coll reducescatter \
	--csv "$scratch/auto2rs.csv" >"$scratch/auto2rs" 2>&1 || fail "dry run (one-shot auto, reduce-scatter) failed"
rows auto2rs '^# pool 100663296 B, max blocks 96, one-shot up to 65536 B$'
# A reduce (--coll reduce, -r the root, default 0): LL while small, two-shot when large,
# never push; the header names the root and what its checks mean; -r outside the ranks,
# or without --coll reduce, exits 2 with the reason.
"$perf" --dry-run --gpus 1 --ranks 4 -b 8 -e 16M -f 8 -d bf16 --no-nccl --coll reduce -r 3 \
	--csv "$scratch/reduce.csv" >"$scratch/reduce" 2>&1 || fail "dry run (reduce) failed"
rows reduce '^# collective: reduce to rank 3 \(exact = its result equals the all-reduce tree and every other rank.s receive buffer is left untouched\)$' \
	' 8 +4 +bf16 +sum +ll +1x1 ' ' 32768 +16384 +bf16 +sum +ll ' ' 16777216 +8388608 +bf16 +sum +2shot '
grep -q -E ' push ' "$scratch/reduce" && fail "a reduce planned push: $(cat "$scratch/reduce")"
"$perf" --dry-run --gpus 1 --ranks 2 -b 8 -e 8 --no-nccl --coll reduce >"$scratch/reduce0" 2>&1 ||
	fail "dry run (reduce, default root) failed"
grep -q -x '# collective: reduce to rank 0 .*' "$scratch/reduce0" || fail "reduce: the root is not 0 by default: $(cat "$scratch/reduce0")"
"$perf" --dry-run --gpus 1 --ranks 4 --coll reduce -r 4 >"$scratch/badroot" 2>&1
[ $? -eq 2 ] || fail "-r 4 of 4 ranks was accepted: $(cat "$scratch/badroot")"
grep -q -x 'nccl-det-perf: -r (--root) 4 is not a rank (0 to 3)' "$scratch/badroot" || fail "-r 4: $(cat "$scratch/badroot")"
# Without --dry-run too (checked before the tool looks for a GPU).
"$perf" --ranks 2 --coll reduce -r 2 >"$scratch/badroot2" 2>&1
[ $? -eq 2 ] || fail "-r 2 of 2 ranks, no dry run, was accepted: $(cat "$scratch/badroot2")"
grep -q -x 'nccl-det-perf: -r (--root) 2 is not a rank (0 to 1)' "$scratch/badroot2" || fail "-r 2: $(cat "$scratch/badroot2")"
"$perf" --coll reduce -r 16 2>&1 | grep -q -x 'nccl-det-perf: -r (--root) is above the largest number of ranks nccl-det supports' ||
	fail "-r 16: no reason"
"$perf" --dry-run -r 1 2>&1 | grep -q -x 'nccl-det-perf: -r (--root) goes with --coll reduce' ||
	fail "-r without --coll reduce: no reason"
"$perf" --dry-run --coll allgather 2>&1 | grep -q 'allreduce, reducescatter or reduce' ||
	fail "--coll allgather does not list the collectives"
NCCL_DET_LL_MAX=0 "$perf" --dry-run --gpus 3 --ranks 3 -b 64K -e 128K -f 2 -d bf16 --no-nccl \
	--csv "$scratch/auto3.csv" >"$scratch/auto3" 2>&1 || fail "dry run (one-shot auto, 3 ranks) failed"
rows auto3 '^# pool 100663296 B, max blocks 96, one-shot up to 65536 B$' \
	' 65536 +32768 +bf16 +sum +1shot ' ' 131072 +65536 +bf16 +sum +2shot '

# ---- push from NCCL_DET_PUSH_MIN (a block per 512 KiB, at least 64), pull below it;
# 0 = never.  With the default pool (96 MiB / 96 blocks: lanes of 1 MiB) a push chunk
# is 2 x 128 KiB, so 64 blocks take 16 MiB in one step.
NCCL_DET_ONESHOT_MAX=64K NCCL_DET_PUSH_MIN=1M "$perf" --dry-run --gpus 2 --ranks 2 -b 512K -e 8M -f 4 -d bf16 --no-nccl \
	--csv "$scratch/push.csv" >"$scratch/push" 2>&1 || fail "dry run (push) failed"
rows push ' 524288 +262144 +bf16 +sum +2shot +32x1 ' ' 2097152 +1048576 +bf16 +sum +push +64x1 ' \
	' 8388608 +4194304 +bf16 +sum +push +64x1 '
"$perf" --dry-run --gpus 2 --ranks 2 -b 64M -e 256M -f 2 -d bf16 --no-nccl --csv "$scratch/pushgrid.csv" >"$scratch/pushgrid" 2>&1 ||
	fail "dry run (push grid) failed"
rows pushgrid ' 67108864 +33554432 +bf16 +sum +push +96x3 ' \
	' 134217728 +67108864 +bf16 +sum +push +96x6 ' ' 268435456 +134217728 +bf16 +sum +push +96x11 '
NCCL_DET_PUSH_MIN=0 "$perf" --dry-run --gpus 2 --ranks 2 -b 1G -e 1G -d bf16 --no-nccl \
	--csv "$scratch/nopush.csv" >"$scratch/nopush" 2>&1 || fail "dry run (no push) failed"
rows nopush ' 1073741824 +536870912 +bf16 +sum +2shot +96x11 '

# ---- the grid (blocks x steps) as the planner makes it: 96 blocks for 1 GiB on GPUs of
# their own (lanes of 96 MiB / 96, a quarter of it per push step), 192 / 8 = 24 when 8
# ranks share one GPU, whose lanes are then 96 MiB / 24 (4 MiB: 1 MiB per push step and
# block, 43 steps rather than the 171 of 1 MiB lanes)
"$perf" --dry-run --gpus 2 --ranks 2 -b 1G -e 1G -d bf16 --no-nccl --csv "$scratch/grid.csv" >"$scratch/grid" 2>&1 ||
	fail "dry run (grid) failed: $(cat "$scratch/grid")"
rows grid ' 1073741824 +536870912 +bf16 +sum +push +96x43 '
"$perf" --dry-run --gpus 1 --ranks 8 -b 1G -e 1G -d bf16 --no-nccl --csv "$scratch/grid8.csv" >"$scratch/grid8" 2>&1 ||
	fail "dry run (grid, 8 ranks on one GPU) failed: $(cat "$scratch/grid8")"
rows grid8 ' 1073741824 +536870912 +bf16 +sum +push +24x43 '

# ---- which NCCL: the fake (as NCCL_DET_NCCL_LIBRARY), a copy of nccl-det, nothing
NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$perf" --dry-run --gpus 8 -e 8 -d f32 --nccl \
	>"$scratch/fake" 2>&1 || fail "dry run with the fake NCCL: $(cat "$scratch/fake")"
fake_real=$(cd "$(dirname "$fake_nccl")" && pwd -P)/libnccl.so.2
grep -q -F "# NCCL: $fake_real, version 2.28.9; one communicator of 8 ranks (ncclCommInitAll over GPUs 0..7)" \
	"$scratch/fake" || fail "fake NCCL: $(cat "$scratch/fake")"
grep -q -F '8 ranks on 8 GPU(s) (dry run), one thread per GPU' "$scratch/fake" || fail "fake: header"
NCCL_DET_NCCL_LIBRARY="$fake_dropin" "$perf" --dry-run --gpus 2 --ranks 2 -e 8 >"$scratch/copy" 2>&1 ||
	fail "dry run with nccl-det as NCCL failed"
grep -q "^# NCCL: columns unavailable: $fake_dropin is nccl-det" "$scratch/copy" ||
	fail "a copy of nccl-det was taken for NCCL: $(cat "$scratch/copy")"
NCCL_DET_NCCL_LIBRARY="$scratch/none/libnccl.so.2" "$perf" --dry-run --gpus 2 --ranks 2 -e 8 --nccl \
	>"$scratch/none" 2>&1 && fail "--nccl without a library succeeded"
grep -q "NCCL cannot run here: cannot load $scratch/none/libnccl.so.2" "$scratch/none" ||
	fail "missing library: $(cat "$scratch/none")"

# ---- --nccl-symmetric: available with the fake (it has the windows) ...
NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$perf" --dry-run --gpus 2 --ranks 2 -b 8 -e 5000 -f 625 -d f32 \
	--nccl --nccl-symmetric --csv "$scratch/symm.csv" >"$scratch/symm" 2>&1 ||
	fail "dry run --nccl-symmetric with the fake NCCL: $(cat "$scratch/symm")"
# Windows are whole pages: 5000 + 16 bytes round up to 8192.
grep -q -F '# NCCL symmetric: the same calls on ncclMemAlloc send/recv buffers of 8192 B per rank, registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)' \
	"$scratch/symm" || fail "--nccl-symmetric with the fake: $(cat "$scratch/symm")"
grep -q -E '^# +size .* busbw +symm-t +exact ' "$scratch/symm" ||
	fail "--nccl-symmetric: no symmetric column in the header: $(cat "$scratch/symm")"
grep -q -E '^ +5000 +1250 +f32 +sum +eager +ll( +-){11}$' "$scratch/symm" ||
	fail "--nccl-symmetric: not eleven cells per row: $(cat "$scratch/symm")"
rows symm ' 5000 +1250 +f32 +sum +ll +5x1 '
[ "$(head -1 "$scratch/symm.csv")" = "$header" ] || fail "--nccl-symmetric changed the CSV header"
grep -q -x '2,5000,1250,f32,sum,ll,5,1,,,,,,,,,,,,,,,,,,,,,' "$scratch/symm.csv" ||
	fail "--nccl-symmetric CSV: $(cat "$scratch/symm.csv")"
# ... unavailable, and why, with an NCCL that has no windows (exit 0, NCCL still on) ...
old_nccl="$top_builddir/test/fake_nccl_2_26/.libs/libnccl.so.2"
old_real=$(cd "$(dirname "$old_nccl")" && pwd -P)/libnccl.so.2
for required in '' --nccl; do
	# shellcheck disable=SC2086 # $required is no word or one
	NCCL_DET_NCCL_LIBRARY="$old_nccl" FAKE_NCCL_VERSION=22603 "$perf" --dry-run --gpus 2 --ranks 2 \
		-e 8 $required --nccl-symmetric >"$scratch/old" 2>&1 ||
		fail "--nccl-symmetric $required with NCCL 2.26 did not exit 0: $(cat "$scratch/old")"
	grep -q -F "# NCCL: $old_real, version 2.26.3;" "$scratch/old" ||
		fail "NCCL 2.26: the NCCL columns are off: $(cat "$scratch/old")"
	grep -q -F "# NCCL symmetric: columns unavailable: $old_real has no ncclCommWindowRegister (symmetric windows need NCCL >= 2.27)" \
		"$scratch/old" || fail "NCCL 2.26: no reason for the symmetric columns: $(cat "$scratch/old")"
done
# ... and when NCCL cannot run (--nccl still exits 2) or is not run.
NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$perf" --dry-run --gpus 1 --ranks 2 -e 8 --nccl-symmetric \
	>"$scratch/proxy-symm" 2>&1 || fail "--nccl-symmetric on the proxy: $(cat "$scratch/proxy-symm")"
grep -q -x '# NCCL symmetric: columns unavailable: NCCL cannot run here (see above)' \
	"$scratch/proxy-symm" || fail "--nccl-symmetric on the proxy: $(cat "$scratch/proxy-symm")"
NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$perf" --dry-run --gpus 1 --ranks 2 -e 8 --nccl --nccl-symmetric \
	>"$scratch/required" 2>&1 && fail "--nccl --nccl-symmetric on the proxy succeeded"
grep -q -- '--nccl: NCCL cannot run here: the ranks share GPU 0' "$scratch/required" ||
	fail "--nccl --nccl-symmetric on the proxy: $(cat "$scratch/required")"
NCCL_DET_NCCL_LIBRARY="$fake_nccl" "$perf" --dry-run --gpus 2 --ranks 2 -e 8 --no-nccl --nccl-symmetric \
	>"$scratch/off" 2>&1 || fail "--no-nccl --nccl-symmetric: $(cat "$scratch/off")"
grep -q -x '# NCCL symmetric: columns unavailable: NCCL is not run (--no-nccl)' "$scratch/off" ||
	fail "--no-nccl --nccl-symmetric: $(cat "$scratch/off")"

# Without --dry-run and without a GPU: says so, exit 0 (with a GPU: the GPU tests).
if ! nvidia-smi -L >/dev/null 2>&1; then
	"$perf" -e 8 >"$scratch/nogpu" 2>&1 || fail "no-GPU run failed: $(cat "$scratch/nogpu")"
	grep -q 'no CUDA GPU is visible' "$scratch/nogpu" || fail "no-GPU run: $(cat "$scratch/nogpu")"
fi
echo "PASS: nccl-det-perf options, dry run, CSV, NCCL and symmetric-window selection"
