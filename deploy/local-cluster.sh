#!/usr/bin/env bash
# The docker-compose.yml topology from local binaries, without Docker: a
# three-node NATS JetStream cluster (nats-server built from the Go module
# in go.mod), the local PostgreSQL, two dispatchers (a NATS lease elects
# the one that schedules) and two workers, on R3 streams, with NATS auth
# (agentctl nats-auth writes it into $LOCAL_CLUSTER_DIR/nats-auth, kept
# across runs of the same dir). It runs until Ctrl-C (or SIGTERM), then
# stops everything it started.
#
#   deploy/local-cluster.sh
#   export AGENTFLEET_URL=http://127.0.0.1:18080 AGENTFLEET_TOKEN=change-me-admin
#   agentctl tenants create --tokens 1000000 acme
#
# Environment (defaults in brackets):
#   AGENTFLEET_DATABASE_URL  the fleet's database [a database agentfleet_local
#                            created on postgres://postgres@127.0.0.1:5432]
#   LOCAL_CLUSTER_DIR        binaries, NATS stores and logs [a new temp dir]
#   LOCAL_CLUSTER_PORT       first of the ports it uses [18080]: the dispatchers'
#                            APIs on +0 and +1, their metrics on +2 and +3, the
#                            workers' metrics on +4 and +5, NATS clients on
#                            +10..+12 and routes on +20..+22
#   AGENTFLEET_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY  the workers' model [demo]
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${LOCAL_CLUSTER_DIR:-$(mktemp -d -t agentfleet-local-cluster-XXXXXX)}
base=${LOCAL_CLUSTER_PORT:-18080}
mkdir -p "$dir/bin" "$dir/logs"

echo "building into $dir/bin"
(cd "$repo" && go build -o "$dir/bin/" ./cmd/dispatcher ./cmd/worker ./cmd/agentctl \
  && go build -o "$dir/bin/nats-server" github.com/nats-io/nats-server/v2)

if [[ -z "${AGENTFLEET_DATABASE_URL:-}" ]]; then
  admin=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
  psql "$admin" -qtAc "SELECT 1 FROM pg_database WHERE datname = 'agentfleet_local'" | grep -q 1 \
    || psql "$admin" -qc "CREATE DATABASE agentfleet_local"
  export AGENTFLEET_DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentfleet_local?sslmode=disable
fi

# The trust chain, once per dir. Each node runs in its own dir, where
# the resolver keeps account JWTs (server.conf's relative "jwt").
"$dir/bin/agentctl" nats-auth --if-missing "$dir/nats-auth" >/dev/null

pids=()
stop() {
  trap - INT TERM EXIT
  echo "stopping"
  # Workers first (SIGTERM drains them), then the dispatchers, then NATS.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait || true
  echo "logs in $dir/logs"
}
trap stop INT TERM EXIT

start() { # name, command...
  local name=$1; shift
  "$@" >"$dir/logs/$name.log" 2>&1 &
  pids=("$!" "${pids[@]}")
  echo "started $name (pid $!)"
}

nats_urls=()
for i in 1 2 3; do nats_urls+=("nats://127.0.0.1:$((base + 9 + i))"); done
for i in 1 2 3; do
  routes=()
  for j in 1 2 3; do [[ $j == "$i" ]] || routes+=("nats://127.0.0.1:$((base + 19 + j))"); done
  mkdir -p "$dir/nats-$i"
  start "nats-$i" env -C "$dir/nats-$i" "$dir/bin/nats-server" -c "$dir/nats-auth/server.conf" \
    --name "nats-$i" -js -sd "$dir/nats-$i" -a 127.0.0.1 -p $((base + 9 + i)) \
    --cluster_name af --cluster "nats://127.0.0.1:$((base + 19 + i))" --routes "$(IFS=,; echo "${routes[*]}")"
done

export AGENTFLEET_NATS_URL
AGENTFLEET_NATS_URL=$(IFS=,; echo "${nats_urls[*]}")
export AGENTFLEET_NATS_REPLICAS=3
export AGENTFLEET_NATS_CREDS=$dir/nats-auth/fleet.creds
export AGENTFLEET_ADMIN_TOKEN=${AGENTFLEET_ADMIN_TOKEN:-change-me-admin}
# Dispatchers seal secrets under it, workers open tenants' secrets with it.
[ -s "$dir/secrets-key" ] || (umask 077; head -c 32 /dev/urandom | base64 > "$dir/secrets-key")
AGENTFLEET_SECRETS_KEY=${AGENTFLEET_SECRETS_KEY:-$(cat "$dir/secrets-key")}
export AGENTFLEET_SECRETS_KEY
for i in 1 2; do
  AGENTFLEET_LISTEN=127.0.0.1:$((base + i - 1)) AGENTFLEET_METRICS_LISTEN=127.0.0.1:$((base + i + 1)) \
    AGENTFLEET_NATS_SIGNING_KEY="$dir/nats-auth/signing.nk" AGENTFLEET_DATA_DIR="$dir/dispatcher-$i" start "dispatcher-$i" "$dir/bin/dispatcher"
done
for i in 1 2; do
  AGENTFLEET_WORKER_SLOTS=${AGENTFLEET_WORKER_SLOTS:-16} AGENTFLEET_METRICS_LISTEN=127.0.0.1:$((base + i + 3)) \
    AGENTFLEET_DATA_DIR="$dir/worker-$i" AGENTFLEET_MODEL=${AGENTFLEET_MODEL:-demo} start "worker-$i" "$dir/bin/worker"
done

for i in 1 2; do
  url=http://127.0.0.1:$((base + i - 1))
  for _ in $(seq 300); do
    curl -fs "$url/readyz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fs "$url/readyz" >/dev/null || { echo "dispatcher-$i not ready; see $dir/logs/dispatcher-$i.log" >&2; exit 1; }
done
cat <<MSG
ready: NATS $AGENTFLEET_NATS_URL (R3), dispatchers http://127.0.0.1:$base and http://127.0.0.1:$((base + 1))
  export AGENTFLEET_URL=http://127.0.0.1:$base AGENTFLEET_TOKEN=$AGENTFLEET_ADMIN_TOKEN
  $dir/bin/agentctl tenants create --tokens 1000000 acme
  $dir/bin/agentctl tenants nats-creds acme -o acme.creds   # a tenant's NATS subscriber
NATS requires creds: $AGENTFLEET_NATS_CREDS is the fleet's, $dir/nats-auth/sys.creds the system account's.
Ctrl-C stops the cluster.
MSG
wait
