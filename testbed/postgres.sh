# The test bed's PostgreSQL server (sourced by up, down and env, after lib.sh and
# release.sh): Debian's postgresql package on this host, whatever release the bed's Slurm
# is, listening on 127.0.0.1 only at its port shifted by the offset, with its data, socket
# and log under the state folder. The record store tests (PostgresRecordStore) use it
# through SLURM_RUN_TEST_POSTGRES_URL: a role and a database of their own, a password.

TB_PG_PORT=$((15432 + TB_PORT_OFFSET))
TB_PG_DIR="$TB_DIR/postgres"
TB_PG_USER=slurm_run
TB_PG_DB=slurm_run
TB_PG_PASSWORD_FILE="$TB_DIR/etc/postgres.password"

# The newest installed server's programs.
postgres_bin() {
  local bin
  bin=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  [ -x "$bin/postgres" ] || die "PostgreSQL is not installed (Debian's postgresql package)"
  printf '%s\n' "$bin"
}

# The server answers on its port (the host starts it: inside a release's namespace it is
# the host's).
postgres_healthy() {
  [ -n "$TB_INSIDE" ] || "$(postgres_bin)/pg_isready" -q -h 127.0.0.1 -p "$TB_PG_PORT"
}

# Start the server once (its cluster made on first use) and make the role and database.
postgres_start() {
  local bin data="$TB_PG_DIR/data" password
  bin=$(postgres_bin)
  mkdir -p "$TB_PG_DIR/run" "$TB_DIR/etc"
  chown postgres: "$TB_PG_DIR" "$TB_PG_DIR/run"
  chmod 700 "$TB_PG_DIR"
  [ -s "$TB_PG_PASSWORD_FILE" ] || (umask 077; head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$TB_PG_PASSWORD_FILE")
  password=$(cat "$TB_PG_PASSWORD_FILE")
  if [ ! -s "$data/PG_VERSION" ]; then
    runuser -u postgres -- "$bin/initdb" -D "$data" -U postgres --auth-local=peer \
      --auth-host=scram-sha-256 >"$TB_PG_DIR/initdb.log" 2>&1 ||
      die "initdb failed (see $TB_PG_DIR/initdb.log)"
  fi
  if ! postgres_healthy; then
    rm -f "$data/postmaster.pid"
    runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$TB_PG_DIR/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -c port=$TB_PG_PORT -c unix_socket_directories=$TB_PG_DIR/run -c max_connections=300" \
      start >/dev/null || die "PostgreSQL did not start (see $TB_PG_DIR/postgres.log)"
  fi
  runuser -u postgres -- "$bin/psql" -q -h "$TB_PG_DIR/run" -p "$TB_PG_PORT" -U postgres -d postgres \
    -v ON_ERROR_STOP=1 >/dev/null <<EOF || die "PostgreSQL refused the test role (see $TB_PG_DIR/postgres.log)"
SELECT format('CREATE ROLE %I LOGIN', '$TB_PG_USER') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$TB_PG_USER') \gexec
ALTER ROLE $TB_PG_USER PASSWORD '$password';
SELECT format('CREATE DATABASE %I OWNER %I', '$TB_PG_DB', '$TB_PG_USER') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = '$TB_PG_DB') \gexec
EOF
}

# Stop the server (its data stays).
postgres_stop() {
  local bin
  [ -s "$TB_PG_DIR/data/postmaster.pid" ] || return 0
  bin=$(postgres_bin)
  runuser -u postgres -- "$bin/pg_ctl" -D "$TB_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
}

# The URL of the test role's database.
postgres_url() {
  printf 'postgres://%s:%s@127.0.0.1:%s/%s\n' "$TB_PG_USER" "$(cat "$TB_PG_PASSWORD_FILE" 2>/dev/null)" "$TB_PG_PORT" "$TB_PG_DB"
}
