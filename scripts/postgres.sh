#!/usr/bin/env bash
# A PostgreSQL server on localhost for the PostgreSQL tests (Debian's package; run as root).
#   scripts/postgres.sh start   installs it if needed, starts it, prints the SQLAlchemy URL
#   scripts/postgres.sh restart   restarts the running server (the store's reconnect test)
#   scripts/postgres.sh stop
#   scripts/postgres.sh remove   stops the server and deletes its cluster (a private one, see below)
# The role may create databases: each test makes its own and drops it, WITH (FORCE), which ends an
# autovacuum worker in it only for a member of pg_signal_backend. CKPT_SWEEP_PG_CLUSTER and
# CKPT_SWEEP_PG_PORT (default main, 5432) name another cluster: the restart test starts a private
# one, so that restarting it cuts no other test's connection.
set -euo pipefail
ROLE=ckpt PASSWORD=ckpt DATABASE=ckpt_sweep
CLUSTER=${CKPT_SWEEP_PG_CLUSTER:-main}
PORT=${CKPT_SWEEP_PG_PORT:-5432}

install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q postgresql >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }
}

version() { ls /usr/lib/postgresql | sort -V | tail -1; }

case "${1:-}" in
  start)
    command -v pg_ctlcluster >/dev/null || install
    v=$(version)
    pg_lsclusters -h | grep -q "^$v $CLUSTER " || pg_createcluster "$v" "$CLUSTER" -p "$PORT" >/dev/null
    # Only the URL goes to stdout (callers capture it); pg_ctlcluster's remarks ("Removed stale pid file.") go to stderr.
    pg_lsclusters -h | grep -q "^$v $CLUSTER .* online" || pg_ctlcluster "$v" "$CLUSTER" start >&2
    su postgres -c "psql -q -p $PORT -v ON_ERROR_STOP=1" >/dev/null <<SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$ROLE') THEN
    CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD';
  END IF;
END \$\$;
SET client_min_messages = warning;
GRANT pg_signal_backend TO $ROLE;
SQL
    su postgres -c "psql -p $PORT -tAc \"SELECT 1 FROM pg_database WHERE datname = '$DATABASE'\"" | grep -q 1 \
      || su postgres -c "createdb -p $PORT -O $ROLE $DATABASE"
    echo "postgresql+psycopg://$ROLE:$PASSWORD@localhost:$PORT/$DATABASE"
    ;;
  restart)
    pg_ctlcluster "$(version)" "$CLUSTER" restart >&2
    ;;
  stop)
    pg_ctlcluster "$(version)" "$CLUSTER" stop >&2
    ;;
  remove)
    pg_dropcluster --stop "$(version)" "$CLUSTER" >&2
    ;;
  *)
    echo "usage: $0 start|restart|stop|remove" >&2
    exit 2
    ;;
esac
