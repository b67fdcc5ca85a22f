# Sourced by the example and multi-host tests: same_state A B succeeds when two checkpoints
# hold the same state at the same position: their state hashes (SHA-256 of every tensor's
# bits) and position entries agree. Their provenance (command line, hash chain, step records)
# differs between a resumed run and an uninterrupted one, or between two launches.
state_of() {
  grep -ao '"\(fjit\.state_sha256\|step\|epoch\|batch_in_epoch\|seed\|skipped_steps\)":"[^"]*"' "$1" | sort
}
same_state() { [ -n "$(state_of "$1")" ] && diff <(state_of "$1") <(state_of "$2") > /dev/null; }
