# Sourced by the GPU test scripts: the log, PASS/FAIL counting and nccl-tests' result rows (MPS: mps.sh).
# The sourcing script sets LOG (the log file) first.
passed=0
skipped=0
skips=
failed=0
failures=""

log() { echo "$*" | tee -a "$LOG"; }

# verdict NAME RC [DETAIL]: count and log a PASS (RC 0), a SKIP (RC 77: it could not run
# here) or a FAIL.  A script whose steps are the GPU test programs sets skip_allowed=0
# once nvidia-smi has listed a GPU: a program that then answers 77 (no GPU for CUDA: a
# driver and runtime that do not match, say) fails.
verdict() {
	local name=$1 rc=$2 detail=${3:+ ($3)}
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		log "PASS $name$detail"
	elif [ "$rc" -eq 77 ] && [ "${skip_allowed:-1}" = 1 ]; then # could not run here
		skipped=$((skipped + 1))
		skips="$skips $name"
		log "SKIP $name$detail"
	else
		failed=$((failed + 1))
		failures="$failures $name"
		log "FAIL $name$detail"
	fi
}

# wrong_rows FILE all|bad: nccl-tests' data rows (all), or those whose #wrong
# (out-of-place or in-place) is not 0 (bad); none when the header names no #wrong.
# The #wrong columns are where the header has them (its leading '#' is a field of
# its own, so in the data rows one field to the left).
wrong_rows() {
	awk -v want="$2" '
		/^#/ && /#wrong/ && !cols {
			for (i = 1; i <= NF; i++)
				if ($i == "#wrong")
					col[++cols] = i - 1
			next
		}
		cols && $1 ~ /^[0-9]+$/ && NF >= col[cols] {
			bad = 0
			for (c = 1; c <= cols; c++)
				if ($col[c] != "0")
					bad = 1
			if (want == "all" || bad)
				print
		}' "$1"
}

# wait_ranks PID...: wait for the ranks' processes; returns 1 if any failed.  Once one
# has failed, the others get RANK_GRACE seconds (default 30) to end and are then
# stopped: a rank that died before NCCL's setup leaves its peers waiting in
# ncclCommInitRank until their own time limit, and that time is device time.
# Needs bash 5.1 (wait -n -p); older shells wait for the ranks one by one.
wait_ranks() {
	local rc=0 remaining=$# watchdog="" st ended p
	if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] < 501)); then
		for p in "$@"; do
			wait "$p" || rc=1
		done
		return $rc
	fi
	while [ "$remaining" -gt 0 ]; do
		ended=""
		wait -n -p ended "$@" 2>/dev/null
		st=$?
		# No child left (a rank's own exit status may be 127: command not found).
		[ -z "$ended" ] && break
		remaining=$((remaining - 1))
		if [ "$st" -ne 0 ]; then
			rc=1
			if [ -z "$watchdog" ]; then
				(sleep "${RANK_GRACE:-30}" && kill -TERM "$@" 2>/dev/null) &
				watchdog=$!
			fi
		fi
	done
	[ -n "$watchdog" ] && kill "$watchdog" 2>/dev/null
	return $rc
}

# gpu_state: what a failed multi-process start leaves to look at (device memory,
# /dev/shm, the MPS daemon's logs).
gpu_state() {
	nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader 2>&1 | sed 's/^/  gpu memory: /'
	df -h /dev/shm 2>&1 | tail -1 | sed 's/^/  \/dev\/shm: /'
	if [ -n "${CUDA_MPS_LOG_DIRECTORY:-}" ]; then
		tail -n 5 "$CUDA_MPS_LOG_DIRECTORY"/control.log "$CUDA_MPS_LOG_DIRECTORY"/server.log 2>&1 |
			sed 's/^/  mps: /'
	fi
}
