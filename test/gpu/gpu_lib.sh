# Sourced by the GPU test scripts: the log, PASS/FAIL counting, MPS start and stop.
# The sourcing script sets LOG (the log file) first.
passed=0
failed=0
failures=""

log() { echo "$*" | tee -a "$LOG"; }

# verdict NAME RC [DETAIL]: count and log a PASS (RC 0) or a FAIL.
verdict() {
	local name=$1 rc=$2 detail=${3:+ ($3)}
	if [ "$rc" -eq 0 ]; then
		passed=$((passed + 1))
		log "PASS $name$detail"
	else
		failed=$((failed + 1))
		failures="$failures $name"
		log "FAIL $name$detail"
	fi
}

# MPS for the commands that follow (GPU-TESTING.md); stopped again on exit.
mps_start() {
	CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d)
	CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
	export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
	nvidia-cuda-mps-control -d && sleep 1
}
mps_stop() {
	if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
		echo quit | nvidia-cuda-mps-control 2> /dev/null
		sleep 1
		unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
	fi
}
trap mps_stop EXIT
