#!/usr/bin/env bash
# Finds or starts a PostgreSQL server, creates the database named by $1
# (default riverslot_test) if missing, and prints its URL on stdout.
# Progress goes to stderr. In order, it uses:
#   1. TEST_DATABASE_URL or DATABASE_URL, if that server answers;
#   2. a server already answering on 127.0.0.1:5432 (user postgres);
#   3. `docker compose up` of this repo's docker-compose.yml, if a Docker
#      engine is running;
#   4. a Debian/Ubuntu cluster (pg_ctlcluster) that is installed but stopped;
#   5. a throwaway cluster made with the local initdb/pg_ctl binaries in
#      .pgdata/ (port 5432, or 54329 if 5432 is taken);
# and otherwise fails with instructions.
#
# With PG_OWN=1 (what `make test` sets) and no TEST_DATABASE_URL, step 5
# comes first: the tests get a cluster of their own, tuned for a test suite
# (max_connections 800, so test packages can run five at a time; fsync off:
# its data is thrown away), and the server on 5432 is left alone. Without
# initdb it falls back to the order above.
set -euo pipefail

db=${1:-riverslot_test}
root=$(cd "$(dirname "$0")/.." && pwd)
log() { echo "pg: $*" >&2; }

die() {
	cat >&2 <<MSG
pg: no PostgreSQL server found and none could be started.
    Any one of these works:
      - export TEST_DATABASE_URL=postgres://user@host:port/riverslot_test (a server you can create schemas in)
      - start Docker and re-run (docker compose up -d postgres)
      - install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) and re-run
MSG
	exit 1
}

have() { command -v "$1" >/dev/null 2>&1; }
have go || { echo "pg: Go is needed (https://go.dev/dl/)" >&2; exit 1; }

# pgensure (scripts/pgensure) checks servers and creates databases, so
# no psql is needed.
pgensure=$(mktemp -d)/pgensure
trap 'rm -rf "$(dirname "$pgensure")"' EXIT
(cd "$root" && go build -o "$pgensure" ./scripts/pgensure) || { echo "pg: cannot build scripts/pgensure" >&2; exit 1; }

# with_db URL DB: the same server, another database.
with_db() { sed -E "s#^(postgres(ql)?://[^/?]*)(/[^?]*)?#\1/$2#" <<<"$1"; }
answers() { "$pgensure" check "$(with_db "$1" postgres)" 2>/dev/null; }

ensure_db() {
	"$pgensure" create "$(with_db "$1" postgres)" "$db" >&2 || die
	with_db "$1" "$db"
}

wait_for() {
	local url=$1
	for _ in $(seq 1 60); do
		answers "$url" && return 0
		sleep 0.5
	done
	return 1
}

# own_cluster starts (or finds running) a throwaway cluster made with the
# local initdb/pg_ctl binaries, prints its URL and exits; it returns when
# there are no such binaries.
own_cluster() {
	local bindir="" port data run=()
	if have initdb && have pg_ctl; then
		bindir=$(dirname "$(command -v initdb)")
	else
		bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
	fi
	[ -n "$bindir" ] && [ -x "$bindir/initdb" ] || return 0

	data="$root/.pgdata"
	if [ "$(id -u)" = 0 ]; then
		# PostgreSQL refuses to run as root.
		id postgres >/dev/null 2>&1 || return 0
		data=/tmp/riverslot-pgdata
		run=(runuser -u postgres --)
	fi
	local conns=1600
	opts() { echo "-p $1 -k /tmp -c listen_addresses=127.0.0.1 -c max_connections=$conns -c fsync=off -c synchronous_commit=off -c full_page_writes=off"; }
	# A cluster of ours already running: its port is in postmaster.pid. One
	# started by an earlier version with fewer connections is restarted
	# with this version's settings (make test sizes its parallelism by them).
	if [ -f "$data/postmaster.pid" ]; then
		port=$(sed -n 4p "$data/postmaster.pid")
		url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
		if answers "$url"; then
			have_conns=$("$pgensure" maxconns "$url" 2>/dev/null || echo 0)
			if [ "$have_conns" -lt "$conns" ]; then
				log "restarting the throwaway cluster in $data with max_connections=$conns (it has $have_conns)"
				"${run[@]}" "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w -m fast -o "$(opts "$port")" restart >&2 || die
				wait_for "$url" || die
			fi
			log "using the throwaway cluster in $data (127.0.0.1:$port)"
			ensure_db "$url"
			exit 0
		fi
	fi
	port=5432
	if (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then port=54329; fi
	if [ ! -f "$data/PG_VERSION" ]; then
		log "creating a throwaway cluster in $data with $bindir/initdb"
		mkdir -p "$data"
		if [ ${#run[@]} -gt 0 ]; then chown postgres "$data"; fi
		"${run[@]}" "$bindir/initdb" -D "$data" -U postgres --auth=trust >/dev/null
	fi
	log "starting it on 127.0.0.1:$port"
	"${run[@]}" "$bindir/pg_ctl" -D "$data" -l "$data/server.log" -w \
		-o "$(opts "$port")" start >&2 || die
	url="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
	wait_for "$url" || die
	ensure_db "$url"
	exit 0
}

if [ "${PG_OWN:-}" = 1 ] && [ -z "${TEST_DATABASE_URL:-}" ]; then
	own_cluster
	log "no initdb found for a cluster of the tests' own; looking for a server"
fi

for var in TEST_DATABASE_URL DATABASE_URL; do
	url=${!var:-}
	if [ -n "$url" ]; then
		if answers "$url"; then
			urldb=$(sed -nE 's#^postgres(ql)?://[^/?]*/([^?]+).*#\2#p' <<<"$url")
			db=${urldb:-$db}
			log "using $var (database $db)"
			ensure_db "$url"
			exit 0
		fi
		log "$var is set but its server does not answer; looking further"
	fi
done

local_url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
if answers "$local_url"; then
	log "using the PostgreSQL server on 127.0.0.1:5432"
	ensure_db "$local_url"
	exit 0
fi

if have docker && docker info >/dev/null 2>&1; then
	log "starting PostgreSQL with docker compose (docker-compose.yml)"
	(cd "$root" && docker compose up -d --wait postgres) >&2
	url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	wait_for "$url" || die
	ensure_db "$url"
	exit 0
fi

if have pg_ctlcluster && ls /etc/postgresql/*/main >/dev/null 2>&1; then
	version=$(ls /etc/postgresql | sort -V | tail -1)
	log "starting the installed PostgreSQL $version cluster (pg_ctlcluster)"
	pg_ctlcluster --skip-systemctl-redirect "$version" main start >&2 || true
	if wait_for "$local_url"; then
		ensure_db "$local_url"
		exit 0
	fi
	log "the installed cluster did not answer on 127.0.0.1:5432 with user postgres"
fi

own_cluster
die
