#!/usr/bin/env bash
# A standalone Ray head on this machine for the ray-cluster tests, started outside any sweep.
#   scripts/ray.sh start   starts `ray start --head` (this machine's CPUs, token authentication) in a
#                          session of its own, waits until it is up, prints its address (for ray_address=...)
#   scripts/ray.sh stop    ends that session: the head and every worker it started, nothing else
# `ray` is the one on PATH, else .venv/bin/ray; $RAY names another. Port $CKPT_SWEEP_RAY_PORT (6390).
set -euo pipefail
DIR=${CKPT_SWEEP_RAY_DIR:-/tmp/ckpt-sweep-ray}
PORT=${CKPT_SWEEP_RAY_PORT:-6390}
RAY=${RAY:-$(command -v ray || echo .venv/bin/ray)}

# The machine's CPUs: nproc gives OMP_NUM_THREADS instead where it is set (the test suite sets 1).
cpus() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }
session_alive() { [ -s "$DIR/session" ] && [ -n "$(ps -eo sid=,stat= | awk -v s="$(cat "$DIR/session")" '$1 == s && $2 !~ /Z/')" ]; }

case "${1:-}" in
  start)
    if session_alive; then cat "$DIR/address"; exit 0; fi
    mkdir -p "$DIR" "$HOME/.ray"
    rm -f "$DIR/address"
    # Token authentication, as a cluster has it: `ray start` turns it on only where a token already
    # exists, and a driver with RAY_AUTH_MODE=token then finds none. The token (~/.ray/auth_token) is
    # made once, under a lock: two heads starting at once would each write their own.
    flock "$HOME/.ray/ckpt-sweep-token.lock" "$RAY" get-auth-token --generate >/dev/null
    RAY_AUTH_MODE=token RAY_worker_niceness=0 setsid "$RAY" start --head --port="$PORT" --num-cpus="$(cpus)" --include-dashboard=false \
      --disable-usage-stats --temp-dir="$DIR" --block >"$DIR/head.log" 2>&1 </dev/null &
    head=$!
    # setsid runs in place (a background job of a script leads no process group): the head's pid is
    # its session's id once setsid has run; until then it is still in ours.
    for _ in $(seq 100); do [ "$(ps -o sid= -p "$head" | tr -d ' ')" = "$head" ] && break; sleep 0.05; done
    if [ "$(ps -o sid= -p "$head" | tr -d ' ')" != "$head" ]; then
      echo "ray.sh: the Ray head did not get a session of its own" >&2
      kill "$head" 2>/dev/null || true
      exit 1
    fi
    echo "$head" >"$DIR/session"
    for _ in $(seq 120); do
      address=$(grep -o "ray start --address='[^']*'" "$DIR/head.log" | head -1 | cut -d"'" -f2 || true)
      if [ -n "$address" ]; then echo "$address" | tee "$DIR/address"; exit 0; fi
      session_alive || break
      sleep 0.5
    done
    echo "ray.sh: the Ray head did not start:" >&2
    tail -n 20 "$DIR/head.log" >&2
    exit 1
    ;;
  stop)
    session_alive || exit 0
    session=$(cat "$DIR/session")
    if [ "$session" = "$(ps -o sid= -p $$ | tr -d ' ')" ]; then
      echo "ray.sh: $DIR/session names this shell's own session; not stopping it" >&2
      exit 1
    fi
    pkill -TERM -s "$session" || true
    for _ in $(seq 10); do session_alive || break; sleep 0.5; done
    pkill -KILL -s "$session" 2>/dev/null || true
    rm -f "$DIR/session" "$DIR/address"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
