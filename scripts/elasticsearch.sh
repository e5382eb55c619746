#!/usr/bin/env bash
# A local single-node Elasticsearch 8.x, the same one the tests use.
#
#   scripts/elasticsearch.sh install        resolve and unpack it (Maven Central) under .elasticsearch/
#   scripts/elasticsearch.sh start [PORT]   start it on 127.0.0.1 (default port 9200; 0 picks a free
#                                           one), wait for health, print its URL
#   scripts/elasticsearch.sh stop           stop it
#   scripts/elasticsearch.sh url            print the URL of the running node
#
# ES_STATE_DIR (default .elasticsearch/node) holds its data, logs, pid and URL, so several nodes
# can run side by side. ES_HEAP (default 512m) sets the JVM heap. Elasticsearch refuses to run as
# root; when started by root the node runs as the unprivileged user `nobody`.
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
    mvn -B -q -f "$root/scripts/elasticsearch/pom.xml" package >&2
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

start() {
  local port="${1:-9200}"
  if [ "$port" = 0 ]; then port="$(free_port)"; fi
  if [ -f "$state/pid" ] && kill -0 "$(cat "$state/pid")" 2>/dev/null; then
    echo "elasticsearch: already running at $(cat "$state/url")" >&2; cat "$state/url"; return
  fi
  # Another process on the port would answer the health check below for a node that died on bind.
  if ! port_free "$port"; then
    echo "elasticsearch: port $port on 127.0.0.1 is taken by another process; choose another PORT (0 picks a free one)" >&2
    exit 1
  fi
  install
  local node_name="local-node-$$"
  mkdir -p "$state/data" "$state/logs" "$state/tmp"
  # Each node gets its own writable copy of the configuration (it writes its keystore there).
  rm -rf "$state/config" && cp -r "$home/config" "$state/config"
  local run_as=()
  if [ "$(id -u)" = 0 ]; then
    # The distribution must be readable and the state writable by the unprivileged user.
    chown -R nobody:nogroup "$state"
    chmod -R o+rX "$root/.elasticsearch/dist"
    run_as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
  fi
  local started_at; started_at=$(date +%s)
  "${run_as[@]}" env -i PATH="$PATH" HOME="$state" ES_TMPDIR="$state/tmp" ES_PATH_CONF="$state/config" \
    ES_JAVA_HOME="$(java_home)" ES_JAVA_OPTS="-Xms$heap -Xmx$heap" \
    "$home/bin/elasticsearch" \
      -E cluster.name=local-dev -E node.name="$node_name" \
      -E discovery.type=single-node -E network.host=127.0.0.1 \
      -E http.port="$port" -E transport.port=0 \
      -E path.data="$state/data" -E path.logs="$state/logs" \
      -E xpack.security.enabled=false -E xpack.ml.enabled=false \
      -E cluster.routing.allocation.disk.threshold_enabled=false \
      -E action.destructive_requires_name=false \
      > "$state/logs/console.log" 2>&1 &
  echo $! > "$state/pid"
  local url="http://127.0.0.1:$port"
  for _ in $(seq 1 180); do
    # Healthy, and the node answering is the one started here.
    # (This distribution answers GET / with 405, so the node's name is read from _nodes/_local.)
    if curl -fsS "$url/_cluster/health?wait_for_status=yellow&timeout=1s" >/dev/null 2>&1 &&
      [[ "$(curl -fsS "$url/_nodes/_local?filter_path=nodes.*.name" 2>/dev/null)" == *"\"name\":\"$node_name\""* ]]; then
      echo "$url" > "$state/url"
      echo "elasticsearch: up at $url after $(( $(date +%s) - started_at ))s" >&2
      echo "$url"
      return
    fi
    if ! kill -0 "$(cat "$state/pid")" 2>/dev/null; then
      echo "elasticsearch: exited during start-up; last log lines:" >&2
      tail -n 40 "$state/logs/console.log" >&2
      exit 1
    fi
    sleep 1
  done
  echo "elasticsearch: not healthy after 180s; last log lines:" >&2
  tail -n 40 "$state/logs/console.log" >&2
  exit 1
}

stop() {
  [ -f "$state/pid" ] || return 0
  local pid; pid="$(cat "$state/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$state/pid" "$state/url"
}

case "${1:-}" in
  install) install ;;
  start) start "${2:-9200}" ;;
  stop) stop ;;
  url) url ;;
  *) echo "usage: $0 install|start [PORT]|stop|url" >&2; exit 2 ;;
esac
