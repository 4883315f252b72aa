# Sourced by the GPU test scripts: the log and PASS/FAIL counting (MPS: mps.sh).
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
