# Sourced by scripts/check.sh and scripts/run-tests.sh: how many pytest-xdist workers a run gets.
# pytest_workers N sets the array WORKERS to the options for N workers, or to none when N is 0 or
# pytest-xdist (in the dev extra) is not installed. loadgroup: tests marked xdist_group("litellm")
# share a worker, so one worker imports LiteLLM.
pytest_workers() {
  WORKERS=()
  if [ "$1" != 0 ] && .venv/bin/python -c "import xdist" 2>/dev/null; then
    WORKERS=(-n "$1" --dist loadgroup)
  fi
}
