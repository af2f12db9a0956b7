# Shared by the tools/ scripts: find the checkout and Swift, and say things on stderr.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v swift >/dev/null 2>&1 && [ -x /opt/swift/usr/bin/swift ]; then
  PATH=$PATH:/opt/swift/usr/bin
fi
command -v swift >/dev/null 2>&1 || { echo "swift is not installed (https://swift.org/install)" >&2; exit 1; }
note() { echo "==> $*" >&2; }

# m:ss (or h:mm:ss) of a number of seconds.
clock() { local s=$1; if [ "$s" -ge 3600 ]; then printf '%d:%02d:%02d' $((s / 3600)) $((s % 3600 / 60)) $((s % 60)); else printf '%d:%02d' $((s / 60)) $((s % 60)); fi; }

# swift_build LOG ARGS…: `swift build ARGS…` with its whole output (some 1,100 lines the first time) in LOG,
# and on stderr one line per phase with the time since the start (resolving the packages, compiling with
# its steps, linking), then the measured duration. On a terminal the compiling line counts the
# steps in place. On failure: the errors, the log's last lines and its path, and swift build's status.
# With --quiet first, no phases: only a failure or the final line (for tools/subledger's one-line message).
swift_build() {
  local quiet=false
  [ "$1" = --quiet ] && { quiet=true; shift; }
  local log=$1; shift
  mkdir -p "$(dirname "$log")"
  local started=$SECONDS tty=false status=0
  [ -t 2 ] && tty=true
  $quiet || note "swift build $* (the whole output: $log)"
  swift build "$@" >"$log" 2>&1 &
  local pid=$!
  if $quiet; then
    wait "$pid" || status=$?
  else
    # Phases read from the log as it grows, so that swift build's own output never reaches the screen.
    _swift_build_phases "$log" "$started" "$tty" "$pid" &
    local reader=$!
    wait "$pid" || status=$?
    wait "$reader" || true
  fi
  if [ "$status" != 0 ]; then
    note "swift build failed after $(clock $((SECONDS - started))) (status $status); its errors and last lines:"
    grep -E -m 20 '(^|: )error: ' "$log" | sed 's/^/    /' >&2 || true
    echo "    …" >&2
    tail -n 20 "$log" | sed 's/^/    /' >&2
    note "the whole output: $log"
    return "$status"
  fi
  note "built in $(clock $((SECONDS - started))) (measured; the whole output: $log)"
}

_swift_build_phases() {
  local log=$1 started=$2 tty=$3 pid=$4 phase= line steps shown=
  # On a terminal a phase's line ends without a newline, so the compiling one can count its steps in place.
  say_phase() {
    if $tty; then
      [ -n "$shown" ] && echo >&2
      shown=1
      printf '    %7s  %s' "$(clock $((SECONDS - started)))" "$1" >&2
    else
      printf '    %7s  %s\n' "$(clock $((SECONDS - started)))" "$1" >&2
    fi
  }
  while IFS= read -r line; do
    case "$line" in
      Fetching* | Fetched* | Computing\ version* | Computed* | Creating\ working\ copy* | Working\ copy* | Updating* | Updated* | Cloning*)
        [ "$phase" = resolve ] || { phase=resolve; say_phase "resolving the packages (fetching the dependencies)"; } ;;
      "["[0-9]*/[0-9]*"]"*)
        steps=${line%%]*}; steps=${steps#[}
        case "$line" in
          *"] Fetch"* | *"] Comput"* | *"] Cloning"* | *"] Creating working copy"*)
            [ "$phase" = resolve ] || { phase=resolve; say_phase "resolving the packages (fetching the dependencies)"; } ;;
          *"] Planning build"*) [ "$phase" = plan ] || { phase=plan; say_phase "planning the build"; } ;;
          *"] Linking "*) [ "$phase" = link ] || { phase=link; say_phase "linking ${line##*Linking } (step $steps)"; } ;;
          *)
            if [ "$phase" != compile ] && [ "$phase" != link ]; then
              phase=compile; say_phase "compiling"
            elif $tty && [ "$phase" = compile ]; then
              printf '\r    %7s  compiling: step %s' "$(clock $((SECONDS - started)))" "$steps" >&2
            fi ;;
        esac ;;
      Build\ complete* | Build\ of\ product*complete*)
        phase=done; say_phase "${line%%!*}" ;;
    esac
  done < <(tail -n +1 -F --pid="$pid" "$log" 2>/dev/null)
  $tty && [ -n "$shown" ] && echo >&2
  return 0
}

# build_release [--quiet]: the release build of `subledger` that tools/run and tools/subledger use, its output in
# .build/tools-run-build.log. .build/tools-run.stamp records when the last one started (written only once it
# succeeded, and dated from before it, so an edit made during the build counts as a change).
build_release() {
  mkdir -p "$root/.build"
  local started
  started=$(mktemp "$root/.build/tools-run.XXXXXX")
  swift_build "$@" "$root/.build/tools-run-build.log" -c release --product subledger || { rm -f "$started"; return 1; }
  mv "$started" "$root/.build/tools-run.stamp"
}
