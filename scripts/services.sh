#!/usr/bin/env bash
# Throwaway Redis, etcd and ZooKeeper servers for lockkit's tests, in independent profiles that can
# run side by side: "single" (one server of each; built in) and the profiles in scripts/services.d/.
#
#   scripts/services.sh install                 install missing Debian packages (idempotent, quiet)
#   scripts/services.sh up [--P]                install + start profile P (default: single), print its exports
#   scripts/services.sh down [--P]              stop profile P; without --P stop every profile
#   scripts/services.sh status [--P]            show profile P (default: every profile); exit 0 only if all answer
#   scripts/services.sh env [--P]               print the export lines of a running profile
#   scripts/services.sh stop|start MEMBER       stop one server (keeps its port and data dir) / start it again
#   scripts/services.sh pause|resume MEMBER     SIGSTOP / SIGCONT one server (by its recorded PID)
#   scripts/services.sh isolate|heal MEMBER     cut one etcd or ZooKeeper member off from the rest of
#                                               its group (nftables), clients still reach it / undo
#   scripts/services.sh leader GROUP            print the member that currently leads GROUP
#   scripts/services.sh members                 list every member and group name of every profile
#
# Profiles (scripts/services.d/P.sh): --cluster, --secure, --redlock (5 independent Redis masters).
# Members: single: redis zk etcd. cluster: etcd-c1..3, zk-e1..3, redis-s1..3 (Sentinel data nodes;
#   redis-s1 starts as primary), sentinel1..3, redis-c1..6 (Redis Cluster). redlock: redlock1..5.
# Groups (for `leader`): etcd-cluster, zk-ensemble, redis-sentinel. `members` lists all.
# Typical use:  eval "$(scripts/services.sh up)"; ...; scripts/services.sh down
# Only the export lines (and `leader`/`members` output) go to stdout; all other output goes to stderr.
#
# Environment (single profile; each profile file documents its own):
#   LOCKKIT_SERVICES_STATE    state directory (default /tmp/lockkit-services); profile P keeps its
#                             state in $LOCKKIT_SERVICES_STATE/P/
#   LOCKKIT_REDIS_PORT        Redis port           (default 16379)
#   LOCKKIT_ETCD_PORT         etcd client port     (default 12379)
#   LOCKKIT_ETCD_PEER_PORT    etcd peer port       (default 12380)
#   LOCKKIT_ZK_PORT           ZooKeeper client port (default 12181)
#   LOCKKIT_SERVICES_TIMEOUT  seconds to wait for each server to answer (default 30)
#
# State directory layout of the single profile (all written by this script, nothing else):
#   datadir        path of the mktemp -d directory holding all server data and logs
#   ports          KEY=VALUE lines: REDIS_PORT, ETCD_PORT, ETCD_PEER_PORT, ZK_PORT
#   redis.pid, etcd.pid, zk.pid   one PID per running server (removed when it is stopped)
#   env.sh         the export lines printed by `up` / `env`
#   .lock          flock(1) lock serialising concurrent invocations (left in place)
# Data directory layout: redis/{redis.log}, etcd/{data/,etcd.log}, zk/{zoo.cfg,log4j.properties,data/,zookeeper.log,zk.out}
#
# The Debian packages may start system services on the default ports (6379, 2379, 2181).
# We ignore those and never touch them: we only use our own ports and only signal PIDs we recorded
# (after checking /proc/PID/cmdline still looks like our server).
#
# PROFILE CONTRACT (scripts/services.d/P.sh; P = the file name without .sh, e.g. cluster, secure)
#   services.sh sources every scripts/services.d/*.sh after defining its helpers. The file for
#   profile P defines these shell functions (it must not run anything when sourced):
#     P_up              start everything of P; idempotent (keep what answers, restart the rest);
#                       print only `export ...` lines on stdout, logs on stderr; non-zero on failure
#     P_down            stop every server of P by recorded PID, remove its data and state; idempotent
#     P_status          print a table of P's servers; return 0 if all answer, 1 otherwise
#                       (and 1 with a one-line "P: not up" when P is not set up)
#     P_env             print the export lines of the running P (die if it is not up)
#   and, to support the fault commands, optionally:
#     P_members         print P's member names, one per line (names must be unique across profiles)
#     P_start MEMBER    start one stopped member again (same port, same data)
#     P_stop MEMBER     stop one member (by PID; keeps its data)
#     P_pid MEMBER      print the recorded PID of a running member (non-zero if none)
#     P_peer_ports MEMBER  print "OWN|OTHERS": the member's replication ports and the rest of its
#                       group's, space-separated (for `isolate`; non-zero if it has none)
#     P_groups          print P's replicated group names (for `leader`), one per line
#     P_leader GROUP    print the member currently leading GROUP (non-zero if none)
#   Helpers P may use: log, die, as_root, cmd_install (packages: add to PACKAGES before it runs),
#   profile_dir P (= $STATE_DIR/P, created), profile_lock P (flock on fd 8; servers get 8>&- 9>&-),
#   spawn PIDFILE OUTFILE CMD... (start CMD detached, its PID in PIDFILE), pid_alive PID,
#   pid_cmd_has PID TEXT, pid_cwd PID, port_open PORT, check_port_free LABEL PORT [HINT],
#   kill_pid LABEL PID "PORTS" (TERM, wait, KILL), wait_gone PID "PORTS" SECS, show_file_tail FILE,
#   READY_TIMEOUT, STOP_TIMEOUT.
set -euo pipefail

STATE_DIR=${LOCKKIT_SERVICES_STATE:-/tmp/lockkit-services}
DEFAULT_REDIS_PORT=${LOCKKIT_REDIS_PORT:-16379}
DEFAULT_ETCD_PORT=${LOCKKIT_ETCD_PORT:-12379}
DEFAULT_ETCD_PEER_PORT=${LOCKKIT_ETCD_PEER_PORT:-12380}
DEFAULT_ZK_PORT=${LOCKKIT_ZK_PORT:-12181}
READY_TIMEOUT=${LOCKKIT_SERVICES_TIMEOUT:-30}
STOP_TIMEOUT=10

SERVERS=(redis etcd zk)
PACKAGES=(redis-server etcd-server etcd-client zookeeper protobuf-compiler nftables tmux)

# etcd / etcdctl refuse to run when an ETCD_* / ETCDCTL_* variable conflicts with a flag; we pass
# everything as flags, so drop any inherited ones.
while IFS= read -r _v; do
    case $_v in ETCD_* | ETCDCTL_*) unset "$_v" ;; esac
done < <(compgen -e)
export ETCDCTL_API=3

# Filled by load_state.
DATA_DIR=
REDIS_PORT=
ETCD_PORT=
ETCD_PEER_PORT=
ZK_PORT=

log() { printf 'services: %s\n' "$*" >&2; }
die() {
    printf 'services: error: %s\n' "$*" >&2
    exit 1
}

usage() {
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
}

# ---------------------------------------------------------------------------------------------
# install

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

pkg_installed() { dpkg -s "$1" >/dev/null 2>&1; }

pkg_present() {
    case $1 in
        redis-server) command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 ;;
        etcd-server) command -v etcd >/dev/null 2>&1 ;;
        etcd-client) command -v etcdctl >/dev/null 2>&1 ;;
        zookeeper) [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1 ;;
        protobuf-compiler) command -v protoc >/dev/null 2>&1 ;;
        *) pkg_installed "$1" ;;
    esac
}

cmd_install() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        pkg_present "$p" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and no apt-get to install them"
    log "installing: ${missing[*]}"
    # Everything to stderr: stdout of `up` must stay eval-able.
    as_root apt-get update -q >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >&2
    for p in "${missing[@]}"; do
        pkg_present "$p" || die "package $p installed but its command/jar is still missing"
    done
}

# ---------------------------------------------------------------------------------------------
# state

state_exists() { [ -f "$STATE_DIR/datadir" ] && [ -f "$STATE_DIR/ports" ]; }

load_state() {
    DATA_DIR=$(cat "$STATE_DIR/datadir")
    local k v
    while IFS='=' read -r k v; do
        case $k in
            REDIS_PORT) REDIS_PORT=$v ;;
            ETCD_PORT) ETCD_PORT=$v ;;
            ETCD_PEER_PORT) ETCD_PEER_PORT=$v ;;
            ZK_PORT) ZK_PORT=$v ;;
        esac
    done <"$STATE_DIR/ports"
    if [ -z "$REDIS_PORT" ] || [ -z "$ETCD_PORT" ] || [ -z "$ETCD_PEER_PORT" ] || [ -z "$ZK_PORT" ]; then
        die "corrupt state in $STATE_DIR/ports; run '$0 down'"
    fi
}

write_env() {
    local tmp="$STATE_DIR/env.sh.tmp"
    {
        echo "export LOCKKIT_TEST_REDIS_URL=redis://127.0.0.1:$REDIS_PORT"
        echo "export LOCKKIT_TEST_ZK_URL=zk://127.0.0.1:$ZK_PORT"
        echo "export LOCKKIT_TEST_ETCD_URL=etcd://127.0.0.1:$ETCD_PORT"
        # So that tests calling `scripts/services.sh stop|start NAME` find this same state.
        echo "export LOCKKIT_SERVICES_STATE=$STATE_DIR"
    } >"$tmp"
    mv "$tmp" "$STATE_DIR/env.sh"
}

new_state() {
    mkdir -p "$STATE_DIR"
    REDIS_PORT=$DEFAULT_REDIS_PORT
    ETCD_PORT=$DEFAULT_ETCD_PORT
    ETCD_PEER_PORT=$DEFAULT_ETCD_PEER_PORT
    ZK_PORT=$DEFAULT_ZK_PORT
    local p
    for p in "$REDIS_PORT" "$ETCD_PORT" "$ETCD_PEER_PORT" "$ZK_PORT"; do
        if ! [[ $p =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
            die "invalid port: '$p'"
        fi
    done
    DATA_DIR=$(mktemp -d "${TMPDIR:-/tmp}/lockkit-services.XXXXXX")
    mkdir -p "$DATA_DIR/redis" "$DATA_DIR/etcd" "$DATA_DIR/zk/data"
    printf 'REDIS_PORT=%s\nETCD_PORT=%s\nETCD_PEER_PORT=%s\nZK_PORT=%s\n' \
        "$REDIS_PORT" "$ETCD_PORT" "$ETCD_PEER_PORT" "$ZK_PORT" >"$STATE_DIR/ports"
    echo "$DATA_DIR" >"$STATE_DIR/datadir"
    write_env
}

clear_state() {
    rm -f "$STATE_DIR/datadir" "$STATE_DIR/ports" "$STATE_DIR/env.sh" "$STATE_DIR/env.sh.tmp"
    local s
    for s in "${SERVERS[@]}"; do rm -f "$STATE_DIR/$s.pid"; done
}

# Serialise invocations sharing a state dir (e.g. two tests stopping/starting servers).
# Servers are started with 9>&- so they never inherit the lock.
take_lock() {
    mkdir -p "$STATE_DIR"
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$STATE_DIR/.lock"
        flock 9
    fi
}

# ---------------------------------------------------------------------------------------------
# profiles (see PROFILE CONTRACT at the top)

PROFILES=()

profile_dir() { # P: the state directory of profile P (created)
    mkdir -p "$STATE_DIR/$1"
    echo "$STATE_DIR/$1"
}

profile_lock() { # P: serialise invocations touching profile P (fd 8; independent of the single lock)
    local d
    d=$(profile_dir "$1")
    if command -v flock >/dev/null 2>&1; then
        exec 8>"$d/.lock"
        flock 8
    fi
}

load_profiles() {
    local dir f p fn
    dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/services.d"
    [ -d "$dir" ] || return 0
    for f in "$dir"/*.sh; do
        [ -f "$f" ] || continue
        p=${f##*/}
        p=${p%.sh}
        [[ $p =~ ^[a-z][a-z0-9_]*$ ]] || die "bad profile file name: $f"
        # shellcheck disable=SC1090 # profile files are found at run time
        . "$f"
        for fn in up down status env; do
            declare -F "${p}_$fn" >/dev/null || die "$f does not define ${p}_$fn"
        done
        PROFILES+=("$p")
    done
}

has_profile() {
    local p
    for p in ${PROFILES[@]+"${PROFILES[@]}"}; do [ "$p" = "$1" ] && return 0; done
    return 1
}

# parse_profile CMD [ARGS]: print the profile named by a single --P argument, "single" without one.
parse_profile() {
    local cmd=$1
    shift
    [ $# -le 1 ] || die "$cmd: expected at most one --PROFILE option, got: $*"
    case ${1:-} in
        '') echo single ;;
        --single) echo single ;;
        --*)
            has_profile "${1#--}" || die "$cmd: unknown profile '${1#--}' (known: single ${PROFILES[*]:-})"
            echo "${1#--}"
            ;;
        *) die "$cmd: unknown option '$1'" ;;
    esac
}

# The profile owning MEMBER (single for redis|zk|etcd); dies for an unknown member.
member_profile() {
    local m=$1 p
    case $m in redis | zk | etcd)
        echo single
        return 0
        ;;
    esac
    for p in ${PROFILES[@]+"${PROFILES[@]}"}; do
        declare -F "${p}_members" >/dev/null || continue
        if "${p}_members" | grep -qxF -- "$m"; then
            echo "$p"
            return 0
        fi
    done
    die "unknown member '$m' (run '$0 members' for the list)"
}

# ---------------------------------------------------------------------------------------------
# per-server facts

server_port() {
    case $1 in
        redis) echo "$REDIS_PORT" ;;
        etcd) echo "$ETCD_PORT" ;;
        zk) echo "$ZK_PORT" ;;
    esac
}

server_ports() { # every port a server binds
    case $1 in
        etcd) echo "$ETCD_PORT $ETCD_PEER_PORT" ;;
        *) server_port "$1" ;;
    esac
}

server_log() {
    case $1 in
        redis) echo "$DATA_DIR/redis/redis.log" ;;
        etcd) echo "$DATA_DIR/etcd/etcd.log" ;;
        zk) echo "$DATA_DIR/zk/zookeeper.log" ;;
    esac
}

valid_server() {
    case ${1:-} in
        redis | etcd | zk) return 0 ;;
        *) die "unknown server '${1:-}' (expected redis, zk or etcd)" ;;
    esac
}

recorded_pid() {
    local f="$STATE_DIR/$1.pid"
    [ -f "$f" ] && cat "$f"
}

# Process state letter from /proc/PID/stat (R, S, Z, ...), empty if the process is gone.
proc_state() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) } # the comm field may contain spaces; state follows the last ')'
    echo "${stat%% *}"
}

# Running (not a zombie) process.
pid_alive() {
    [[ ${1:-} =~ ^[0-9]+$ ]] || return 1
    local st
    st=$(proc_state "$1")
    [ -n "$st" ] && [ "$st" != Z ]
}

pid_cmd_has() { # PID TEXT: the command line of PID contains TEXT
    local cmd
    cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) || return 1
    [[ $cmd == *"$2"* ]]
}

pid_cwd() { readlink "/proc/$1/cwd" 2>/dev/null; }

# Is PID alive and still the server we started (guards against PID reuse)?
pid_is_ours() {
    local name=$1 pid=$2 cmd
    pid_alive "$pid" || return 1
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    case $name in
        # redis-server rewrites its title to "redis-server 127.0.0.1:PORT"; --dir makes it chdir.
        redis) [[ $cmd == *redis-server* && $cmd == *":$REDIS_PORT"* &&
            $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$DATA_DIR/redis" ]] ;;
        etcd) [[ $cmd == *etcd* && $cmd == *"$DATA_DIR/etcd/data"* ]] ;;
        zk) [[ $cmd == *QuorumPeerMain* && $cmd == *"$DATA_DIR/zk/zoo.cfg"* ]] ;;
    esac
}

port_open() { # something accepts connections on 127.0.0.1:PORT
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" 2>/dev/null
}

port_owner() { # best effort description of who listens on PORT
    command -v ss >/dev/null 2>&1 || return 0
    local who
    who=$(ss -ltnpH "sport = :$1" 2>/dev/null | awk '{print $4, $6}' | head -n 3 | paste -sd ' ')
    [ -n "$who" ] && printf ': %s' "$who"
    return 0
}

zk_srvr() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$1" 2>/dev/null
}

server_answers() {
    case $1 in
        redis) [ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] ;;
        etcd) timeout 5 etcdctl --endpoints="http://127.0.0.1:$ETCD_PORT" --dial-timeout=2s \
            --command-timeout=2s endpoint health >/dev/null 2>&1 ;;
        zk) zk_srvr "$ZK_PORT" | grep -q 'Mode:' ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# start / stop one server

write_zk_config() {
    local d="$DATA_DIR/zk"
    mkdir -p "$d/data"
    cat >"$d/zoo.cfg" <<EOF
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$d/data
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,isro,cons
maxClientCnxns=0
EOF
    cat >"$d/log4j.properties" <<EOF
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=$d/zookeeper.log
log4j.appender.FILE.Append=true
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
EOF
}

zk_classpath() {
    local cp=/usr/share/java/zookeeper.jar j
    # Debian ships no slf4j backend; these two give us a log file.
    for j in /usr/share/java/slf4j-log4j12.jar /usr/share/java/log4j-1.2.jar; do
        [ -f "$j" ] && cp="$cp:$j"
    done
    echo "$cp"
}

# Launch NAME in the background, in its own session (so a terminal ^C does not reach it), with
# all fds redirected (so `$(services.sh up)` does not hang on an inherited stdout). The inner
# bash writes its own PID and then execs the server, so the pid file holds the server's PID.
launch() {
    local name=$1 pidfile="$STATE_DIR/$1.pid" d=$DATA_DIR cmd out
    rm -f "$pidfile"
    case $name in
        redis)
            mkdir -p "$d/redis"
            cmd=(redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
                --dir "$d/redis")
            out="$d/redis/redis.log"
            ;;
        etcd)
            mkdir -p "$d/etcd"
            cmd=(etcd --name n1 --data-dir "$d/etcd/data"
                --listen-client-urls "http://127.0.0.1:$ETCD_PORT"
                --advertise-client-urls "http://127.0.0.1:$ETCD_PORT"
                --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
                --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
                --initial-cluster "n1=http://127.0.0.1:$ETCD_PEER_PORT"
                --initial-cluster-state new
                --heartbeat-interval=50 --election-timeout=500
                --logger=zap --log-outputs=stderr)
            out="$d/etcd/etcd.log"
            ;;
        zk)
            write_zk_config
            cmd=(java -Xmx256m -cp "$(zk_classpath)"
                "-Dlog4j.configuration=file:$d/zk/log4j.properties"
                org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zk/zoo.cfg")
            out="$d/zk/zk.out"
            ;;
    esac
    log "starting $name on port $(server_port "$name")"
    spawn "$pidfile" "$out" "${cmd[@]}" && return 0
    log "$name: no pid recorded after launching it"
    show_log_tail "$name"
    return 1
}

# spawn PIDFILE OUTFILE CMD...: run CMD in the background, in its own session (so a terminal ^C
# does not reach it), with all fds redirected (so `$(services.sh up)` does not hang on an inherited
# stdout) and without the flock fds 8/9. The inner bash writes its own PID and then execs CMD, so
# PIDFILE holds the server's PID. Returns 1 if no PID was recorded within 5 s.
spawn() {
    local pidfile=$1 out=$2 i
    shift 2
    rm -f "$pidfile"
    # shellcheck disable=SC2016 # $$, $1 and $@ are expanded by the inner bash
    setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pidfile" "$@" \
        </dev/null >>"$out" 2>&1 8>&- 9>&- &
    for ((i = 0; i < 50; i++)); do
        [ -s "$pidfile" ] && return 0
        sleep 0.1
    done
    return 1
}

show_file_tail() { # FILE: its last 40 lines on stderr, if it has any
    [ -s "$1" ] || return 0
    printf -- '----- last 40 lines of %s -----\n' "$1" >&2
    tail -n 40 "$1" >&2
    printf -- '-----\n' >&2
}

show_log_tail() {
    show_file_tail "$(server_log "$1")"
    [ "$1" != zk ] || show_file_tail "$DATA_DIR/zk/zk.out"
}

# Wait until NAME answers; on failure print its log tail and return 1.
wait_ready() {
    local name=$1 pid deadline
    pid=$(recorded_pid "$name")
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        if ! pid_alive "$pid"; then
            log "$name (pid $pid) exited before answering"
            show_log_tail "$name"
            return 1
        fi
        if server_answers "$name"; then
            if ! pid_is_ours "$name" "$pid"; then
                log "$name answers, but pid $pid does not look like our server"
                return 1
            fi
            log "$name is up (pid $pid, port $(server_port "$name"))"
            return 0
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "$name did not answer on port $(server_port "$name") within ${READY_TIMEOUT}s"
            show_log_tail "$name"
            return 1
        fi
        sleep 0.1
    done
}

# check_port_free LABEL PORT [HINT]: fail (naming port and service) if PORT is already taken.
check_port_free() {
    local hint=${3:-LOCKKIT_REDIS_PORT / LOCKKIT_ETCD_PORT / LOCKKIT_ETCD_PEER_PORT / LOCKKIT_ZK_PORT}
    if port_open "$2"; then
        printf 'services: error: port %s (needed by %s) is already in use by something that is not ours%s\n' \
            "$2" "$1" "$(port_owner "$2")" >&2
        printf '  free it, or pick other ports with %s\n' "$hint" >&2
        return 1
    fi
}

# Fail (naming port and service) if a port NAME needs is already taken.
check_ports_free() {
    local name=$1 p
    for p in $(server_ports "$name"); do
        check_port_free "$name" "$p" || return 1
    done
}

wait_gone() { # PID PORTS SECONDS: until the process is gone/zombie and its ports are closed
    local pid=$1 ports=$2 deadline p busy
    deadline=$((SECONDS + $3))
    while [ "$SECONDS" -lt "$deadline" ]; do
        if ! pid_alive "$pid"; then
            busy=
            for p in $ports; do port_open "$p" && busy=1; done
            [ -z "$busy" ] && return 0
        fi
        sleep 0.1
    done
    return 1
}

# kill_pid LABEL PID "PORTS": SIGTERM (plus SIGCONT, in case it is paused), wait until it is gone
# and its ports are closed, SIGKILL after STOP_TIMEOUT. The caller has checked PID is ours.
kill_pid() {
    local name=$1 pid=$2 ports=$3
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    kill -CONT "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$ports" "$STOP_TIMEOUT"; then
        if pid_alive "$pid"; then
            log "$name (pid $pid) still alive after ${STOP_TIMEOUT}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        wait_gone "$pid" "$ports" 5 || log "warning: $name port(s) $ports still open after stopping pid $pid"
    fi
}

stop_one() { # NAME [quiet]
    local name=$1 quiet=${2:-} pid ports
    pid=$(recorded_pid "$name") || true
    if [ -z "$pid" ]; then
        [ -n "$quiet" ] || log "$name: not running (no pid recorded)"
        return 0
    fi
    ports=$(server_ports "$name")
    if pid_is_ours "$name" "$pid"; then
        kill_pid "$name" "$pid" "$ports"
    elif pid_alive "$pid"; then
        log "$name: pid $pid is no longer our server; not touching it"
    else
        log "$name: pid $pid already gone"
    fi
    rm -f "$STATE_DIR/$name.pid"
}

# Is NAME (as recorded) running and answering?
server_ok() {
    local pid
    pid=$(recorded_pid "$1") || return 1
    pid_is_ours "$1" "$pid" && server_answers "$1"
}

# Start the named servers (which must not be running): check ports, launch all, then wait for all.
# On failure stop the ones launched here and return 1.
start_servers() {
    local name started=() failed=
    for name in "$@"; do check_ports_free "$name" || return 1; done
    for name in "$@"; do
        started+=("$name")
        launch "$name" || {
            failed=1
            break
        }
    done
    if [ -z "$failed" ]; then
        for name in "$@"; do
            wait_ready "$name" || {
                failed=1
                break
            }
        done
    fi
    if [ -n "$failed" ]; then
        for name in "${started[@]}"; do stop_one "$name"; done
        return 1
    fi
}

# ---------------------------------------------------------------------------------------------
# commands

cmd_up() {
    local profile
    profile=$(parse_profile up "$@")
    if [ "$profile" != single ]; then
        cmd_install
        "${profile}_up"
        return
    fi

    cmd_install
    take_lock

    local name need=()
    if state_exists; then
        load_state
        if [ ! -d "$DATA_DIR" ]; then
            log "recorded data dir $DATA_DIR is gone; discarding stale state"
            for name in "${SERVERS[@]}"; do stop_one "$name"; done
            clear_state
        fi
    fi

    if state_exists; then
        # Already up (maybe partly): keep what answers, (re)start the rest on the recorded ports.
        if [ "$DEFAULT_REDIS_PORT:$DEFAULT_ETCD_PORT:$DEFAULT_ETCD_PEER_PORT:$DEFAULT_ZK_PORT" != \
            "$REDIS_PORT:$ETCD_PORT:$ETCD_PEER_PORT:$ZK_PORT" ]; then
            log "note: services already set up in $STATE_DIR; keeping their recorded ports (run '$0 down' to change ports)"
        fi
        for name in "${SERVERS[@]}"; do
            if server_ok "$name"; then
                log "$name already up (pid $(recorded_pid "$name"), port $(server_port "$name"))"
            else
                stop_one "$name" quiet # clears a stale/unresponsive recorded pid
                need+=("$name")
            fi
        done
        if [ ${#need[@]} -gt 0 ]; then
            start_servers "${need[@]}" || die "could not start: ${need[*]}"
        fi
    else
        new_state
        log "data dir: $DATA_DIR"
        if ! start_servers "${SERVERS[@]}"; then
            rm -rf -- "$DATA_DIR"
            clear_state
            die "could not start the services"
        fi
    fi
    write_env
    cat "$STATE_DIR/env.sh"
}

single_down() {
    take_lock
    if ! state_exists; then
        log "nothing is up (no state in $STATE_DIR)"
        clear_state
        return 0
    fi
    load_state
    local name
    for name in zk etcd redis; do stop_one "$name"; done
    case $DATA_DIR in
        */lockkit-services.??????)
            if [ -d "$DATA_DIR" ]; then
                rm -rf -- "$DATA_DIR"
                log "removed $DATA_DIR"
            fi
            ;;
        *) log "warning: not removing unexpected data dir '$DATA_DIR'" ;;
    esac
    clear_state
}

single_status() {
    if ! state_exists; then
        echo "no services recorded in $STATE_DIR"
        return 1
    fi
    load_state
    local name pid state all=0 port
    echo "state dir: $STATE_DIR"
    echo "data dir:  $DATA_DIR"
    printf '%-6s %-8s %-12s %-10s %s\n' SERVER PID PORT STATE LOG
    for name in "${SERVERS[@]}"; do
        pid=$(recorded_pid "$name") || pid=-
        port=$(server_ports "$name")
        if [ "$pid" = - ]; then
            state=stopped
            all=1
        elif ! pid_is_ours "$name" "$pid"; then
            state=dead
            all=1
        elif [ "$(proc_state "$pid")" = T ]; then
            state=paused
            all=1
        elif server_answers "$name"; then
            state=up
        else
            state=no-answer
            all=1
        fi
        printf '%-6s %-8s %-12s %-10s %s\n' "$name" "$pid" "${port// //}" "$state" "$(server_log "$name")"
    done
    return "$all"
}

single_env() {
    [ -f "$STATE_DIR/env.sh" ] || die "services are not up (no $STATE_DIR/env.sh); run '$0 up'"
    cat "$STATE_DIR/env.sh"
}

single_start() {
    valid_server "${1:-}"
    take_lock
    state_exists || die "services are not set up; run '$0 up' first"
    load_state
    [ -d "$DATA_DIR" ] || die "data dir $DATA_DIR is gone; run '$0 down' then '$0 up'"
    if server_ok "$1"; then
        log "$1 already up (pid $(recorded_pid "$1"), port $(server_port "$1"))"
        return 0
    fi
    stop_one "$1" quiet # clears a stale/unresponsive recorded pid
    start_servers "$1" || die "could not start $1"
}

single_stop() {
    valid_server "${1:-}"
    take_lock
    state_exists || {
        log "services are not set up; nothing to stop"
        return 0
    }
    load_state
    stop_one "$1"
}

single_pid() {
    valid_server "${1:-}"
    state_exists || return 1
    load_state
    local pid
    pid=$(recorded_pid "$1") || return 1
    pid_is_ours "$1" "$pid" || return 1
    echo "$pid"
}

cmd_down() {
    local profile p
    profile=$(parse_profile down "$@")
    heal_all
    if [ $# -gt 0 ]; then
        "${profile}_down"
        return
    fi
    for p in ${PROFILES[@]+"${PROFILES[@]}"}; do "${p}_down"; done
    single_down
}

cmd_status() {
    local profile p rc=0
    profile=$(parse_profile status "$@")
    if [ $# -gt 0 ]; then
        "${profile}_status"
        return
    fi
    echo "== single"
    single_status || rc=1
    for p in ${PROFILES[@]+"${PROFILES[@]}"}; do
        echo "== $p"
        "${p}_status" || rc=1
    done
    return "$rc"
}

cmd_env() {
    local profile
    profile=$(parse_profile env "$@")
    "${profile}_env"
}

# cmd_member start|stop|pause|resume MEMBER
cmd_member() {
    local action=$1 m=${2:-} profile pid
    [ -n "$m" ] || die "$action: which member? (run '$0 members' for the list)"
    profile=$(member_profile "$m")
    case $action in
        start | stop) "${profile}_$action" "$m" ;;
        pause | resume)
            pid=$("${profile}_pid" "$m") || die "$action: $m is not running"
            if [ "$action" = pause ]; then
                kill -STOP "$pid" || die "pause: cannot signal $m (pid $pid)"
                log "paused $m (pid $pid)"
            else
                kill -CONT "$pid" || die "resume: cannot signal $m (pid $pid)"
                log "resumed $m (pid $pid)"
            fi
            ;;
    esac
}

# The cgroup v2 hierarchy, and the nftables table and cgroup of an isolated member.
cgroup2_root() { findmnt -t cgroup2 -n -o TARGET | head -1; }
iso_table() { echo "lockkit_iso_${1//-/_}"; }

# cmd_isolate MEMBER: drops every packet between the member and the rest of its group, while its
# clients still reach it (a member cut off from the quorum). Its open replication connections
# are matched by port; new ones it dials, by its cgroup (the sockets it creates from now on).
cmd_isolate() {
    local m=${1:-} profile pid ports own others cg root rel eph
    [ -n "$m" ] || die "isolate: which member?"
    profile=$(member_profile "$m")
    declare -F "${profile}_peer_ports" >/dev/null || die "isolate: $m has no peers"
    pid=$("${profile}_pid" "$m") || die "isolate: $m is not running"
    ports=$("${profile}_peer_ports" "$m") || die "isolate: $m has no peers"
    own=${ports%%|*}
    others=${ports#*|}
    [ -n "$own" ] && [ -n "$others" ] || die "isolate: no replication ports known for $m"
    command -v nft >/dev/null || cmd_install
    root=$(cgroup2_root)
    [ -n "$root" ] || die "isolate: no cgroup v2 hierarchy is mounted"
    # nft names a cgroup by its path below /sys/fs/cgroup, at its depth in the v2 hierarchy (1).
    case $root/ in
        /sys/fs/cgroup/*) ;;
        *) die "isolate: the cgroup v2 hierarchy is at $root, not under /sys/fs/cgroup" ;;
    esac
    cg=$root/lockkit-iso-$m
    as_root mkdir -p "$cg"
    echo "$pid" | as_root tee "$cg/cgroup.procs" >/dev/null
    rel=${cg#/sys/fs/cgroup/}
    # Isolating twice replaces the rules.
    as_root nft delete table inet "$(iso_table "$m")" 2>/dev/null || true
    eph=$(ss -tnpH state established | awk -v pid="pid=$pid," -v peers=" $others " '
        index($0, pid) { n = split($4, r, ":"); if (index(peers, " " r[n] " ")) { split($3, l, ":"); print l[length(l)] } }' |
        sort -u | paste -sd, -)
    local set_own set_others
    set_own="{ ${own// /, } }"
    set_others="{ ${others// /, } }"
    {
        echo "table inet $(iso_table "$m") {"
        echo "  chain out {"
        echo "    type filter hook output priority 0; policy accept;"
        echo "    tcp dport $set_own drop"
        echo "    tcp sport $set_own drop"
        echo "    socket cgroupv2 level 1 \"$rel\" tcp dport $set_others drop"
        if [ -n "$eph" ]; then
            echo "    tcp sport { $eph } tcp dport $set_others drop"
            echo "    tcp dport { $eph } tcp sport $set_others drop"
        fi
        echo "  }"
        echo "}"
    } | as_root nft -f - || die "isolate: nft refused the rules for $m"
    log "isolated $m (pid $pid) from ports $others"
}

# heal_all: undoes every `isolate` still in place (a test that died mid-way), before a `down`.
heal_all() {
    local t m
    command -v nft >/dev/null || return 0
    for t in $(as_root nft list tables 2>/dev/null | awk '$3 ~ /^lockkit_iso_/ { print $3 }'); do
        m=${t#lockkit_iso_}
        cmd_heal "${m//_/-}" 2>/dev/null || true
    done
}

# cmd_heal MEMBER: undoes `isolate`.
cmd_heal() {
    local m=${1:-} root cg pid
    [ -n "$m" ] || die "heal: which member?"
    as_root nft delete table inet "$(iso_table "$m")" 2>/dev/null || true
    root=$(cgroup2_root)
    cg=$root/lockkit-iso-$m
    if [ -d "$cg" ]; then
        while read -r pid; do
            echo "$pid" | as_root tee "$root/cgroup.procs" >/dev/null || true
        done <"$cg/cgroup.procs"
        as_root rmdir "$cg" || true
    fi
    log "healed $m"
}

cmd_leader() {
    local group=${1:-} p
    [ -n "$group" ] || die "leader: which group? (run '$0 members' for the list)"
    for p in ${PROFILES[@]+"${PROFILES[@]}"}; do
        declare -F "${p}_groups" >/dev/null || continue
        if "${p}_groups" | grep -qxF -- "$group"; then
            "${p}_leader" "$group"
            return
        fi
    done
    die "unknown group '$group' (run '$0 members' for the list)"
}

cmd_members() {
    local p
    echo "single: members: redis zk etcd"
    for p in ${PROFILES[@]+"${PROFILES[@]}"}; do
        declare -F "${p}_members" >/dev/null &&
            echo "$p: members: $("${p}_members" | paste -sd ' ')"
        declare -F "${p}_groups" >/dev/null &&
            echo "$p: groups: $("${p}_groups" | paste -sd ' ')"
    done
    return 0
}

main() {
    local sub=${1:-}
    [ $# -gt 0 ] && shift
    load_profiles
    case $sub in
        install) cmd_install ;;
        up) cmd_up "$@" ;;
        down) cmd_down "$@" ;;
        status) cmd_status "$@" ;;
        env) cmd_env "$@" ;;
        start | stop | pause | resume) cmd_member "$sub" "$@" ;;
        isolate) cmd_isolate "$@" ;;
        heal) cmd_heal "$@" ;;
        leader) cmd_leader "$@" ;;
        members) cmd_members ;;
        -h | --help | help) usage ;;
        *)
            usage
            exit 2
            ;;
    esac
}

main "$@"
