#!/bin/bash
# nccl-tests across simulated hosts (doc/testing.md, "Several hosts on one machine"):
# all_reduce_perf and reduce_scatter_perf built with MPI support, one process per rank
# on GPU 0 under MPS, each with its own NCCL_HOSTID (NCCL moves the bytes between them
# over sockets, as between machines) and NCCL_DET_TEST_HOST naming its host, nccl-det
# under LD_PRELOAD with NCCL_DET_STRICT=1 (a call that would fall back fails instead).
# For each layout and each of all_reduce_perf and reduce_scatter_perf:
#   - half, float, double, bfloat16, every op (-o all), 8 B-2 MiB, -c 1;
#   - float and bfloat16 sum, 4-64 MiB, -c 1 (several pipelined chunks).
# A run passes when it exits 0, nccl-tests' own check (#wrong, its columns found by
# the header) is 0 on every row, the verdict line (rank 0's) says the communicator
# spans the layout's hosts, and every rank's NCCL_DET_STATS line counts diverted
# calls, none refused or failed (and PreMulSum calls where -o all ran them).
#
# nccl-tests is not part of nccl-det: build it with MPI=1 (NVIDIA/nccl-tests) and put
# all_reduce_perf and reduce_scatter_perf in NCCL_TESTS_DIR.  Without them, without
# mpirun or without a GPU, the script skips (exit 77).
#
# usage: NDET_LIB=... [NCCL_TESTS_DIR=dir] [OUT=dir] test/gpu/nccl_tests_hosts.sh [LAYOUT...]
#   LAYOUT: one letter per rank naming its host (default: AABB ABCD)
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
NDET_LIB=${NDET_LIB:-$top/src/.libs/libnccl-det.so}
DIR=${NCCL_TESTS_DIR:-$top/.nccl-tests}
OUT=${OUT:-/tmp/ndet-gpu-out}
mkdir -p "$OUT"
LOG=$OUT/nccl-tests-hosts.log
: >"$LOG"
# shellcheck source=test/gpu/gpu_lib.sh
. "$here/gpu_lib.sh"
layouts=${*:-AABB ABCD}

if ! nvidia-smi -L >>"$LOG" 2>&1; then
	log "SUMMARY nccl-tests-hosts: no GPU visible, skipped"
	exit 77
fi
for t in all_reduce_perf reduce_scatter_perf; do
	if [ ! -x "$DIR/$t" ]; then
		log "SUMMARY nccl-tests-hosts: no $t in $DIR (set NCCL_TESTS_DIR), skipped"
		exit 77
	fi
done
if ! command -v mpirun >/dev/null; then
	log "SUMMARY nccl-tests-hosts: no mpirun, skipped"
	exit 77
fi
log "nccl-tests across simulated hosts, $(date -u +%FT%TZ), commit ${NDET_COMMIT:-unknown}: $layouts"

unset CUDA_DEVICE_MAX_CONNECTIONS
# shellcheck source=test/gpu/mps.sh
. "$here/mps.sh"
trap mps_stop EXIT
mps_start

# One rank's environment: its own NCCL host, its simulated host, GPU 0, nccl-det
# (preloaded into the ranks only, not into mpirun).
wrap=$OUT/nccl-tests-hosts-rank.sh
cat >"$wrap" <<'WRAP'
#!/bin/bash
r=$OMPI_COMM_WORLD_RANK
export NCCL_HOSTID=ndet-h$r NCCL_DET_TEST_HOST=${LAYOUT:r:1} NCCL_TESTS_DEVICE=0
export LD_PRELOAD=$NDET_PRELOAD
exec "$@"
WRAP
chmod +x "$wrap"

# job NAME LAYOUT LIMIT BINARY ARGS...
job() {
	local name=$1 layout=$2 limit=$3 bin=$4 rc
	shift 4
	local n=${#layout} file=$OUT/nccl-tests-hosts-$name.txt
	local hosts
	hosts=$(echo "$layout" | fold -w1 | sort -u | wc -l)
	LAYOUT=$layout NCCL_SOCKET_IFNAME=lo NCCL_DET_STRICT=1 NCCL_DET_STATS=1 \
		NDET_PRELOAD="$NDET_LIB" timeout --kill-after=10 "$limit" \
		mpirun --allow-run-as-root --oversubscribe -np "$n" \
		-x LAYOUT -x NCCL_SOCKET_IFNAME -x NCCL_DET_STRICT -x NCCL_DET_STATS -x NDET_PRELOAD \
		"$wrap" "$DIR/$bin" "$@" >"$file" 2>&1
	rc=$?
	local rows bad verdicts diverted clean premul why=""
	rows=$(wrong_rows "$file" all | wc -l)
	bad=$(wrong_rows "$file" bad | wc -l)
	verdicts=$(grep -c "across $hosts hosts of $((n / hosts)) rank" "$file")
	diverted=$(grep "NCCL-DET STATS" "$file" | grep -c "diverted [1-9]")
	clean=$(grep "NCCL-DET STATS" "$file" | grep -c "refused (strict) 0; failed 0$")
	premul=$(grep "NCCL-DET STATS" "$file" | grep -c "PreMulSum [1-9]")
	[ $rc -eq 0 ] || why="$why exit $rc;"
	[ "$rows" -gt 0 ] || why="$why no result rows (or no #wrong columns);"
	[ "$bad" -eq 0 ] || why="$why $bad rows with #wrong != 0;"
	[ "$verdicts" -ge 1 ] || why="$why no verdict 'across $hosts hosts';"
	[ "$diverted" -eq "$n" ] || why="$why $diverted of $n ranks diverted;"
	[ "$clean" -eq "$n" ] || why="$why $((n - clean)) ranks refused or failed calls;"
	case " $* " in
	*" -o all "*) [ "$premul" -eq "$n" ] || why="$why $premul of $n ranks ran PreMulSum;" ;;
	esac
	log "  $name: $rows rows, $bad with #wrong != 0, $diverted of $n ranks diverted (exit $rc)"
	if [ -n "$why" ]; then
		tail -8 "$file" >>"$LOG"
	fi
	why=${why%;}
	verdict "$name" "$([ -z "$why" ] && echo 0 || echo 1)" "${why# }"
}

for layout in $layouts; do
	for bin in all_reduce_perf reduce_scatter_perf; do
		short=${bin%_perf}
		for dt in half float double bfloat16; do
			job "$layout-$short-$dt" "$layout" 120 "$bin" -b 8 -e 2M -f 8 -d "$dt" -o all \
				-c 1 -n 2 -w 1
		done
		job "$layout-$short-large" "$layout" 150 "$bin" -b 4M -e 64M -f 4 -d float -o sum \
			-c 1 -n 2 -w 1
		job "$layout-$short-large-bf16" "$layout" 150 "$bin" -b 4M -e 64M -f 4 -d bfloat16 \
			-o sum -c 1 -n 2 -w 1
	done
done
log "SUMMARY nccl-tests-hosts: $passed passed, $failed failed${failures:+ (failed:$failures)}${skips:+, $skipped skipped (not run here:$skips)}"
[ "$failed" -eq 0 ]
