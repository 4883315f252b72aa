# Sourced by GPU test scripts: start and stop an MPS daemon of their own (pipe and log
# directories in mktemp), so that several processes' kernels run at once on one GPU.
# Callers `trap mps_stop EXIT`, so that a failed run leaves no daemon behind.
mps_start() {
	export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
	CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d)
	CUDA_MPS_LOG_DIRECTORY=$(mktemp -d)
	nvidia-cuda-mps-control -d && sleep 1
}
mps_stop() {
	if [ -n "${CUDA_MPS_PIPE_DIRECTORY:-}" ]; then
		echo quit | nvidia-cuda-mps-control 2>/dev/null
		# The daemon leaves once its server has; give it up to 10 s before the next
		# one starts.
		local i
		command -v pgrep > /dev/null || sleep 1
		for i in $(seq 1 20); do
			pgrep -f nvidia-cuda-mps-control > /dev/null 2>&1 || break
			sleep 0.5
		done
		rm -rf "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
		unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
	fi
}
