#!/usr/bin/env bash
# bench-shards.sh: the same fleet on one PostgreSQL server and on three
# (docs/shards.md, "Measured"). It starts three throwaway PostgreSQL
# clusters of its own (initdb, pg_ctl; each on its own port, its own data
# directory, stopped and removed on exit), runs `riverslot demo --shards`
# with one shard on the first server, then with one shard on each server,
# and prints the two --json reports' figures side by side.
#
#   scripts/bench-shards.sh                     # 30,000 accounts, 64 s cycle, 2 cycles
#   ACCOUNTS=150000 CYCLE=64s CYCLES=2 WORKERS=134 scripts/bench-shards.sh
#
# WORKERS is each shard's River MaxWorkers in the three-shard run; the
# one-shard run gets WORKERS_ONE, by default three times as many, so both
# fleets have as many workers (a River client starts at most MaxWorkers x
# 10 jobs a second, riverslot.MaxWorkersFor: with fewer, the one-shard run
# measures River's fetch limit, not the server).
#
# OUT (default: a temporary directory, printed) keeps the JSON reports and
# the servers' logs. Needs the PostgreSQL server binaries (initdb, pg_ctl)
# on PATH or in /usr/lib/postgresql/*/bin, Go and python3. As root it runs
# the servers as the postgres user. The servers listen on no TCP port,
# only on Unix sockets in a directory only their user may enter (they
# trust every connection that reaches them).
set -euo pipefail

ACCOUNTS=${ACCOUNTS:-30000}
CYCLE=${CYCLE:-64s}
CYCLES=${CYCLES:-2}
WORKERS=${WORKERS:-100}
WORKERS_ONE=${WORKERS_ONE:-$((WORKERS * 3))}
SERVERS=3
cd "$(dirname "$0")/.."

bindir=""
if command -v initdb >/dev/null 2>&1; then
	bindir=$(dirname "$(readlink -f "$(command -v initdb)")")
else
	bindir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
fi
if [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ]; then
	echo "bench-shards: needs the PostgreSQL server binaries (initdb, pg_ctl): install PostgreSQL (Debian/Ubuntu: apt-get install postgresql) or put initdb on PATH" >&2
	exit 2
fi
as=()
if [ "$(id -u)" = 0 ]; then
	id postgres >/dev/null 2>&1 || { echo "bench-shards: running as root needs a 'postgres' user to run the servers" >&2; exit 2; }
	as=(runuser -u postgres --)
fi

OUT=${OUT:-$(mktemp -d /tmp/riverslot-bench-shards.XXXXXX)}
mkdir -p "$OUT"
# The servers' directory: theirs alone (0700), holding their data, logs and
# sockets. Root, running them as postgres, still reaches the sockets.
work=$(mktemp -d /tmp/riverslot-bench-pg.XXXXXX)
chmod 700 "$work"
[ ${#as[@]} -eq 0 ] || chown postgres "$work"

# run_as runs a command as the servers' user (bash before 4.4 refuses an
# empty "${as[@]}" under set -u).
run_as() {
	if [ ${#as[@]} -eq 0 ]; then "$@"; else "${as[@]}" "$@"; fi
}

ports=()
cleanup() {
	for i in $(seq 1 $SERVERS); do
		[ -d "$work/db$i" ] && run_as "$bindir/pg_ctl" -D "$work/db$i" -m immediate stop >/dev/null 2>&1 || true
		cp "$work/db$i.log" "$OUT/server$i.log" 2>/dev/null || true
	done
	rm -rf "$work"
}
trap cleanup EXIT

# Unix sockets only: each server its own port number (the socket's name),
# in a directory no one else may enter, so no port is raced for.
for i in $(seq 1 $SERVERS); do
	port=$((5440 + i))
	ports+=("$port")
	run_as "$bindir/initdb" -D "$work/db$i" -U postgres --auth=trust --no-sync >/dev/null
	run_as "$bindir/pg_ctl" -D "$work/db$i" -l "$work/db$i.log" -w \
		-o "-p $port -c listen_addresses= -c unix_socket_directories=$work -c max_connections=200" start >/dev/null
	"$bindir/psql" -h "$work" -p "$port" -U postgres -qc "CREATE DATABASE riverslot_bench" >/dev/null
	echo "server $i: PostgreSQL $("$bindir/postgres" --version | awk '{print $3}') on $work/.s.PGSQL.$port" >&2
done
url() { echo "postgres://postgres@/riverslot_bench?host=$work&port=$1&sslmode=disable"; }

go build -o "$work/riverslot" ./cmd/riverslot
common=(--accounts "$ACCOUNTS" --cycle "$CYCLE" --cycles "$CYCLES" --json)

# A run that does not keep up (a cycle not done in time) is reported, and
# the other still runs.
echo "one shard, on server 1: riverslot demo --shards $(url "${ports[0]}") ${common[*]} --workers $WORKERS_ONE" >&2
"$work/riverslot" demo --database-url "$(url "${ports[0]}")" --shards "$(url "${ports[0]}")" --schema bench_one "${common[@]}" --workers "$WORKERS_ONE" >"$OUT/one.json" ||
	echo "one shard: riverslot demo failed (exit $?)" >&2

three="$(url "${ports[0]}"),$(url "${ports[1]}"),$(url "${ports[2]}")"
echo "three shards, one on each server: riverslot demo --shards $three ${common[*]} --workers $WORKERS" >&2
"$work/riverslot" demo --database-url "$(url "${ports[0]}")" --shards "$three" --schema bench_three "${common[@]}" --workers "$WORKERS" >"$OUT/three.json" ||
	echo "three shards: riverslot demo failed (exit $?)" >&2

echo "reports: $OUT/one.json $OUT/three.json" >&2
python3 - "$OUT/one.json" "$OUT/three.json" <<'EOF'
import json, sys
rows = []
for label, path in (("one server", sys.argv[1]), ("three servers", sys.argv[2])):
    try:
        r = json.load(open(path))
    except ValueError:
        print("%s: no report (the run failed; see above)" % label)
        continue
    for s in r["shards"] + [r["all"]]:
        rows.append((label, s))
keys = ["accounts", "synced_once", "missed", "duplicated", "river_job_rows", "fan_out_mean_seconds", "syncs_per_second", "lateness_p50_seconds", "lateness_p99_seconds"]
print("%-14s %-6s %s" % ("run", "shard", " ".join("%18s" % k for k in keys)))
for label, s in rows:
    cell = lambda v: ("%18.3f" % v) if isinstance(v, float) else ("%18s" % v)
    print("%-14s %-6s %s" % (label, s.get("shard", "all"), " ".join(cell(s.get(k, "-")) for k in keys)))
EOF
