# Independent steps of a test script as background jobs, at most one per core. Sourced by
# tools/fuzz.sh and tools/consumers.sh:
#   source tools/jobs.sh
#   jobs_init DIR                   outputs and exit statuses go to DIR/NAME.out, DIR/NAME.status
#   jobs_start NAME FUNCTION ARGS   runs FUNCTION ARGS in a subshell under set -e (a failing
#                                   command ends the job, as it would end the script)
#   jobs_finish                     waits; prints each job's output in the order they started;
#                                   fails when any job failed or left no status
jobs_init() {
  _jobs_dir=$1
  _jobs_names=()
  _jobs_max=$(nproc 2>/dev/null || echo 1)
  mkdir -p "$_jobs_dir"
}

jobs_start() {
  local name=$1
  shift
  while (($(jobs -rp | wc -l) >= _jobs_max)); do wait -n || true; done
  rm -f "$_jobs_dir/$name.status"
  # Not `"$@" || ...`: bash ignores set -e inside a function called on the left of ||.
  (
    set +e
    (
      set -e
      "$@"
    ) >"$_jobs_dir/$name.out" 2>&1
    echo $? >"$_jobs_dir/$name.status"
  ) &
  _jobs_names+=("$name")
}

jobs_finish() {
  wait
  local name failed=0
  for name in "${_jobs_names[@]}"; do
    cat "$_jobs_dir/$name.out"
    if [[ $(cat "$_jobs_dir/$name.status" 2>/dev/null) != 0 ]]; then
      echo "== $name: FAILED"
      failed=1
    fi
  done
  return $failed
}
