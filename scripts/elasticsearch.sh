#!/usr/bin/env bash
# A local Elasticsearch 8.x, the same one the tests use: a single node, or a small cluster.
#
#   scripts/elasticsearch.sh install        resolve and unpack it (Maven Central) under .elasticsearch/
#   scripts/elasticsearch.sh start [PORT]   start it on 127.0.0.1 (default port 9200; 0 picks a free
#                                           one), wait for health, print its URL
#   scripts/elasticsearch.sh start-cluster N [PORT]
#                                           start a cluster of N nodes (HTTP ports PORT.., default
#                                           free ones), wait until all have joined, print their
#                                           comma-separated URLs (a value for ELASTICSEARCH_URL)
#   scripts/elasticsearch.sh stop           stop it, or every node of the cluster
#   scripts/elasticsearch.sh stop-node I    stop node I (1..N) of the cluster, leaving the others
#   scripts/elasticsearch.sh url            print the URL of the running node (or the cluster's URLs)
#
# ES_STATE_DIR (default .elasticsearch/node) holds its data, logs, pid and URL (a cluster's nodes in
# node-1..N under it), so several nodes can run side by side. In a cluster only node-1 is
# master-eligible: losing any other node keeps the master. ES_HEAP (default 512m) sets the JVM heap. Elasticsearch refuses to run as
# root; started by root, the node runs in a user namespace as an unprivileged user (unshare).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
version="$(sed -n 's:.*<elasticsearch.version>\(.*\)</elasticsearch.version>.*:\1:p' "$root/scripts/elasticsearch/pom.xml")"
home="$root/.elasticsearch/dist/elasticsearch-$version"
state="${ES_STATE_DIR:-$root/.elasticsearch/node}"
heap="${ES_HEAP:-512m}"

java_home() {
  if [ -n "${ES_JAVA_HOME:-}" ]; then echo "$ES_JAVA_HOME"; return; fi
  if [ -n "${JAVA_HOME:-}" ]; then echo "$JAVA_HOME"; return; fi
  dirname "$(dirname "$(readlink -f "$(command -v java)")")"
}

install() {
  if [ ! -x "$home/bin/elasticsearch" ]; then
    # Batch mode, no colours: the output may be a log file, not a terminal. Maven 3.8 still writes
    # colour resets with -q, so they are stripped (pipefail keeps its exit status).
    mvn -B -q -Dstyle.color=never -f "$root/scripts/elasticsearch/pom.xml" package 2>&1 | sed $'s/\x1b\\[[0-9;]*m//g' >&2
    [ -x "$home/bin/elasticsearch" ] || { echo "elasticsearch: unpack failed, $home missing" >&2; exit 1; }
  fi
  install_cjk_analyzer
}

# The minimal distribution has no analysis-common module, so no `cjk` analyzer: build the
# one-class plugin in scripts/elasticsearch/analysis-cjk against the node's own jars.
install_cjk_analyzer() {
  local plugin="$home/plugins/analysis-cjk" source="$root/scripts/elasticsearch/analysis-cjk"
  if [ -f "$plugin/analysis-cjk.jar" ] && [ "$plugin/analysis-cjk.jar" -nt "$source/CjkAnalysisPlugin.java" ]; then return; fi
  local classes; classes="$(mktemp -d)"
  javac -nowarn --release 17 -cp "$home/lib/*" -d "$classes" "$source/CjkAnalysisPlugin.java" >&2
  mkdir -p "$plugin"
  jar cf "$plugin/analysis-cjk.jar" -C "$classes" .
  sed "s/@ELASTICSEARCH_VERSION@/$version/" "$source/plugin-descriptor.properties" > "$plugin/plugin-descriptor.properties"
  rm -rf "$classes"
}

free_port() {
  node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

url() {
  cat "$state/url" 2>/dev/null || { echo "elasticsearch: not running (no $state/url)" >&2; exit 1; }
}

# Exits 0 when nothing listens on 127.0.0.1:PORT (a bind succeeds).
port_free() {
  node -e 'require("net").createServer().once("error",()=>process.exit(1)).listen(+process.argv[1],"127.0.0.1",function(){this.close()})' "$1"
}

# launch_node STATE HTTP_PORT NODE_NAME CLUSTER_NAME [-E setting...]: runs one node in the background
# with its data, logs, configuration and pid under STATE.
launch_node() {
  local dir="$1" port="$2" node_name="$3" cluster_name="$4"; shift 4
  mkdir -p "$dir/data" "$dir/logs" "$dir/tmp"
  # Each node gets its own writable copy of the configuration (it writes its keystore there).
  rm -rf "$dir/config" && cp -r "$home/config" "$dir/config"
  local run_as=()
  if [ "$(id -u)" = 0 ]; then
    # Elasticsearch refuses root. In a user namespace it runs as an ordinary user while the files
    # stay root's: it reads the distribution and writes its state from any checkout, even one no
    # other user can enter (a clone under /root, a mktemp -d folder).
    run_as=(unshare --user --map-user=65534 --map-group=65534 --)
    # State written by earlier versions, which ran the node as the system user nobody, is root's again.
    chown -R 0:0 "$dir"
  fi
  "${run_as[@]}" env -i PATH="$PATH" HOME="$dir" ES_TMPDIR="$dir/tmp" ES_PATH_CONF="$dir/config" \
    ES_JAVA_HOME="$(java_home)" ES_JAVA_OPTS="-Xms$heap -Xmx$heap" \
    "$home/bin/elasticsearch" \
      -E cluster.name="$cluster_name" -E node.name="$node_name" \
      -E network.host=127.0.0.1 -E http.port="$port" \
      -E path.data="$dir/data" -E path.logs="$dir/logs" \
      -E xpack.security.enabled=false -E xpack.ml.enabled=false \
      -E cluster.routing.allocation.disk.threshold_enabled=false \
      -E action.destructive_requires_name=false \
      "$@" \
      > "$dir/logs/console.log" 2>&1 &
  echo $! > "$dir/pid"
}

# wait_node STATE URL NODE_NAME HEALTH_QUERY: waits until the node started under STATE answers at URL
# as NODE_NAME with the cluster health HEALTH_QUERY asks for; exits 1 with its log if it dies or times out.
wait_node() {
  local dir="$1" url="$2" node_name="$3" health="$4"
  for _ in $(seq 1 180); do
    # Healthy, and the node answering is the one started here.
    # (This distribution answers GET / with 405, so the node's name is read from _nodes/_local;
    # compared in the shell, as a grep -q that exits early could fail the pipe under pipefail.)
    if curl -fsS "$url/_cluster/health?$health&timeout=1s" >/dev/null 2>&1 &&
      [[ "$(curl -fsS "$url/_nodes/_local?filter_path=nodes.*.name" 2>/dev/null)" == *"\"name\":\"$node_name\""* ]]; then
      return
    fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "elasticsearch: $node_name exited during start-up; last log lines:" >&2
      tail -n 40 "$dir/logs/console.log" >&2
      exit 1
    fi
    sleep 1
  done
  echo "elasticsearch: $node_name not healthy after 180s; last log lines:" >&2
  tail -n 40 "$dir/logs/console.log" >&2
  exit 1
}

running() {
  if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then return 0; fi
  local dir
  for dir in "$state"/node-*; do
    if [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null; then return 0; fi
  done
  return 1
}

# Exits 1 with a clear message when PORT is taken: another process there would answer the health
# check for a node that died on bind.
require_free_port() {
  if ! port_free "$1"; then
    echo "elasticsearch: port $1 on 127.0.0.1 is taken by another process; choose another PORT (0 picks a free one)" >&2
    exit 1
  fi
}

start() {
  local asked="${1:-9200}"
  if running; then
    echo "elasticsearch: already running at $(cat "$state/url")" >&2; cat "$state/url"; return
  fi
  install
  local node_name="local-node-$$" started_at port url attempt
  started_at=$(date +%s)
  for attempt in 1 2 3; do
    port="$asked"
    if [ "$port" = 0 ]; then port="$(free_port)"; fi
    require_free_port "$port"
    launch_node "$state" "$port" "$node_name" local-dev -E discovery.type=single-node -E transport.port=0
    url="http://127.0.0.1:$port"
    if (wait_node "$state" "$url" "$node_name" "wait_for_status=yellow"); then break; fi
    # A port picked free (PORT 0) can be taken by another socket (the node's own transport's among
    # them) before the node binds it: then another is picked. Any other failure ends here.
    if [ "$asked" != 0 ] || [ "$attempt" = 3 ] || ! grep -qE "BindHttpException|Address already in use" "$state/logs/console.log"; then exit 1; fi
    echo "elasticsearch: port $port was taken before the node bound it; trying another" >&2
  done
  echo "$url" > "$state/url"
  echo "elasticsearch: up at $url after $(( $(date +%s) - started_at ))s" >&2
  echo "$url"
}

# start-cluster N [PORT]: N nodes under STATE/node-1..N on HTTP ports PORT..PORT+N-1 (default 0: free
# ones). Only node-1 is master-eligible (it also holds data); the others are data-only, so stopping
# any of them keeps the cluster's master and quorum. Prints the comma-separated URLs.
start_cluster() {
  local count="${1:-}" first="${2:-0}"
  if ! [[ "$count" =~ ^[1-9][0-9]*$ ]]; then echo "elasticsearch: start-cluster needs a node count N >= 1" >&2; exit 2; fi
  if running; then
    echo "elasticsearch: already running at $(cat "$state/url")" >&2; cat "$state/url"; return
  fi
  local http=() transport=() i
  for i in $(seq 1 "$count"); do
    if [ "$first" = 0 ]; then http+=("$(free_port)"); else http+=("$((first + i - 1))"); fi
    transport+=("$(free_port)")
    require_free_port "${http[-1]}"
  done
  install
  mkdir -p "$state"
  # A node that fails to start takes the others down with it.
  trap stop EXIT
  local cluster="local-cluster-$$" master="local-node-$$-1" started_at; started_at=$(date +%s)
  for i in $(seq 1 "$count"); do
    local roles='[data,ingest]'
    if [ "$i" = 1 ]; then roles='[master,data,ingest]'; fi
    launch_node "$state/node-$i" "${http[i-1]}" "local-node-$$-$i" "$cluster" \
      -E node.roles="$roles" -E transport.port="${transport[i-1]}" \
      -E discovery.seed_hosts="127.0.0.1:${transport[0]}" -E cluster.initial_master_nodes="$master"
  done
  local urls=()
  for i in $(seq 1 "$count"); do
    urls+=("http://127.0.0.1:${http[i-1]}")
    wait_node "$state/node-$i" "${urls[-1]}" "local-node-$$-$i" "wait_for_nodes=$count"
    echo "${urls[-1]}" > "$state/node-$i/url"
  done
  local joined; joined="$(IFS=,; echo "${urls[*]}")"
  echo "$joined" > "$state/url"
  trap - EXIT
  echo "elasticsearch: cluster of $count up at $joined after $(( $(date +%s) - started_at ))s" >&2
  echo "$joined"
}

# stop_pid STATE: stops the node whose pid STATE/pid holds, forgetting its pid and URL.
stop_pid() {
  local dir="$1"
  [ -f "$dir/pid" ] || return 0
  local pid; pid="$(cat "$dir/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid" "$dir/url"
}

# Stops the single node or every node of the cluster.
stop() {
  local dir
  for dir in "$state"/node-*; do [ -d "$dir" ] && stop_pid "$dir"; done
  stop_pid "$state"
  rm -f "$state/url"
}

# stop-node I: stops node I of the cluster (to try a node loss); the others keep running.
stop_node() {
  local i="${1:-}"
  if ! [ -f "$state/node-$i/pid" ]; then echo "elasticsearch: no running node $i under $state" >&2; exit 1; fi
  stop_pid "$state/node-$i"
}

case "${1:-}" in
  install) install ;;
  start) start "${2:-9200}" ;;
  start-cluster) start_cluster "${2:-}" "${3:-0}" ;;
  stop) stop ;;
  stop-node) stop_node "${2:-}" ;;
  url) url ;;
  *) echo "usage: $0 install|start [PORT]|start-cluster N [PORT]|stop|stop-node I|url" >&2; exit 2 ;;
esac
