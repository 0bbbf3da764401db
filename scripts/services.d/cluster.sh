# shellcheck shell=bash
# The "cluster" profile of scripts/services.sh (sourced by it; see the PROFILE CONTRACT there):
# every backend's replicated topology, all on 127.0.0.1.
#
#   group           members                         ports (client; others)
#   etcd-cluster    etcd-c1 etcd-c2 etcd-c3         12479 12481 12483; peers 12480 12482 12484
#   zk-ensemble     zk-e1 zk-e2 zk-e3               12281 12282 12283; quorum/election 12291-12296
#   redis-sentinel  redis-s1 redis-s2 redis-s3      16400 16401 16402 (redis-s1 starts as primary)
#                   sentinel1 sentinel2 sentinel3   26400 26401 26402, master name "lockkit"
#   redis-cluster   redis-c1 .. redis-c6            16410-16415 (3 primaries + 3 replicas)
#
# Sentinels declare the primary down after 1 s and fail over within a few seconds; Redis Cluster
# nodes time out after 2 s. Redis keeps no data on disk (like the single profile): a restarted
# Redis node comes back empty.
#
# Environment (comma-separated port lists, in member order):
#   LOCKKIT_CLUSTER_ETCD_PORTS        (12479,12481,12483)   LOCKKIT_CLUSTER_ETCD_PEER_PORTS (12480,12482,12484)
#   LOCKKIT_CLUSTER_ZK_PORTS          (12281,12282,12283)   LOCKKIT_CLUSTER_ZK_QUORUM_PORTS (12291,12293,12295)
#   LOCKKIT_CLUSTER_ZK_ELECTION_PORTS (12292,12294,12296)
#   LOCKKIT_CLUSTER_REDIS_SENTINEL_DATA_PORTS (16400,16401,16402)
#   LOCKKIT_CLUSTER_SENTINEL_PORTS    (26400,26401,26402)
#   LOCKKIT_CLUSTER_REDIS_CLUSTER_PORTS (16410,16411,16412,16413,16414,16415)
# They are read when the profile is first set up and recorded in $LOCKKIT_SERVICES_STATE/cluster/ports.
# Keep them (and a Redis Cluster port + 10000, its bus port) below the ephemeral port range
# (/proc/sys/net/ipv4/ip_local_port_range, usually from 32768): the servers' own outgoing
# connections may otherwise take a port before its server binds it.
#
# State ($LOCKKIT_SERVICES_STATE/cluster/): datadir, ports, env.sh, MEMBER.pid, .lock.
# Data dir (mktemp -d lockkit-cluster.XXXXXX): one directory per member holding its config, data
# and log (MEMBER/server.log).

CL_MASTER_NAME=lockkit
CL_PORT_KEYS=(ETCD_PORTS ETCD_PEER_PORTS ZK_PORTS ZK_QUORUM_PORTS ZK_ELECTION_PORTS
    REDIS_SENTINEL_DATA_PORTS SENTINEL_PORTS REDIS_CLUSTER_PORTS)
CL_PORT_HINT="the LOCKKIT_CLUSTER_*_PORTS variables (see scripts/services.d/cluster.sh)"

# Filled by cl_load.
CL_STATE=
CL_DATA=
declare -gA CL_PORTS=()

cl_default_ports() {
    case $1 in
        ETCD_PORTS) echo "${LOCKKIT_CLUSTER_ETCD_PORTS:-12479,12481,12483}" ;;
        ETCD_PEER_PORTS) echo "${LOCKKIT_CLUSTER_ETCD_PEER_PORTS:-12480,12482,12484}" ;;
        ZK_PORTS) echo "${LOCKKIT_CLUSTER_ZK_PORTS:-12281,12282,12283}" ;;
        ZK_QUORUM_PORTS) echo "${LOCKKIT_CLUSTER_ZK_QUORUM_PORTS:-12291,12293,12295}" ;;
        ZK_ELECTION_PORTS) echo "${LOCKKIT_CLUSTER_ZK_ELECTION_PORTS:-12292,12294,12296}" ;;
        REDIS_SENTINEL_DATA_PORTS) echo "${LOCKKIT_CLUSTER_REDIS_SENTINEL_DATA_PORTS:-16400,16401,16402}" ;;
        SENTINEL_PORTS) echo "${LOCKKIT_CLUSTER_SENTINEL_PORTS:-26400,26401,26402}" ;;
        REDIS_CLUSTER_PORTS) echo "${LOCKKIT_CLUSTER_REDIS_CLUSTER_PORTS:-16410,16411,16412,16413,16414,16415}" ;;
    esac
}

cl_port() { # KEY INDEX(1-based)
    local list
    IFS=, read -r -a list <<<"${CL_PORTS[$1]}"
    echo "${list[$(($2 - 1))]}"
}

CL_MEMBERS=(etcd-c1 etcd-c2 etcd-c3 zk-e1 zk-e2 zk-e3 redis-s1 redis-s2 redis-s3
    sentinel1 sentinel2 sentinel3 redis-c1 redis-c2 redis-c3 redis-c4 redis-c5 redis-c6)

cl_members() { echo "${CL_MEMBERS[*]}"; }

cluster_members() { cl_members | tr ' ' '\n'; }
cluster_groups() { printf '%s\n' etcd-cluster zk-ensemble redis-sentinel; }

# cl_member MEMBER: sets M_KIND (etcd|zk|redis|sentinel|rcluster), M_IDX, M_PORT (client port),
# M_PORTS (every port it binds) and M_DIR.
cl_member() {
    M_IDX=${1##*[!0-9]}
    case $1 in
        etcd-c[1-3])
            M_KIND=etcd
            M_PORT=$(cl_port ETCD_PORTS "$M_IDX")
            M_PORTS="$M_PORT $(cl_port ETCD_PEER_PORTS "$M_IDX")"
            ;;
        zk-e[1-3])
            M_KIND=zk
            M_PORT=$(cl_port ZK_PORTS "$M_IDX")
            M_PORTS="$M_PORT $(cl_port ZK_QUORUM_PORTS "$M_IDX") $(cl_port ZK_ELECTION_PORTS "$M_IDX")"
            ;;
        redis-s[1-3])
            M_KIND=redis
            M_PORT=$(cl_port REDIS_SENTINEL_DATA_PORTS "$M_IDX")
            M_PORTS=$M_PORT
            ;;
        sentinel[1-3])
            M_KIND=sentinel
            M_PORT=$(cl_port SENTINEL_PORTS "$M_IDX")
            M_PORTS=$M_PORT
            ;;
        redis-c[1-6])
            M_KIND=rcluster
            M_PORT=$(cl_port REDIS_CLUSTER_PORTS "$M_IDX")
            M_PORTS="$M_PORT $((M_PORT + 10000))" # + the cluster bus port
            ;;
        *) die "cluster: unknown member '$1'" ;;
    esac
    M_DIR=$CL_DATA/$1
}

# ---------------------------------------------------------------------------------------------
# state

cl_state_exists() { [ -f "$CL_STATE/datadir" ] && [ -f "$CL_STATE/ports" ]; }

cl_init() { CL_STATE=$(profile_dir cluster); }

cl_load() {
    CL_DATA=$(cat "$CL_STATE/datadir")
    local k v
    while IFS='=' read -r k v; do CL_PORTS[$k]=$v; done <"$CL_STATE/ports"
    for k in "${CL_PORT_KEYS[@]}"; do
        [ -n "${CL_PORTS[$k]:-}" ] || die "corrupt state in $CL_STATE/ports; run '$0 down --cluster'"
    done
}

cl_new_state() {
    local k p n list
    for k in "${CL_PORT_KEYS[@]}"; do
        CL_PORTS[$k]=$(cl_default_ports "$k")
        IFS=, read -r -a list <<<"${CL_PORTS[$k]}"
        n=3
        [ "$k" = REDIS_CLUSTER_PORTS ] && n=6
        [ ${#list[@]} -eq "$n" ] || die "cluster: $k needs $n comma-separated ports, got '${CL_PORTS[$k]}'"
        for p in "${list[@]}"; do
            if ! [[ $p =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
                die "cluster: invalid port '$p' in $k"
            fi
        done
    done
    local low=
    read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=
    for p in $(cl_port_list REDIS_CLUSTER_PORTS); do
        [ "$p" -le 55535 ] || die "cluster: Redis Cluster port $p leaves no room for its bus port (+10000)"
        if [ -n "$low" ] && [ $((p + 10000)) -ge "$low" ]; then
            log "warning: Redis Cluster bus port $((p + 10000)) is in the ephemeral port range (from $low); startup may race with outgoing connections"
        fi
    done
    for k in "${CL_PORT_KEYS[@]}"; do
        for p in $(cl_port_list "$k"); do
            if [ -n "$low" ] && [ "$p" -ge "$low" ]; then
                log "warning: port $p ($k) is in the ephemeral port range (from $low); startup may race with outgoing connections"
            fi
        done
    done
    CL_DATA=$(mktemp -d "${TMPDIR:-/tmp}/lockkit-cluster.XXXXXX")
    for k in "${CL_PORT_KEYS[@]}"; do echo "$k=${CL_PORTS[$k]}"; done >"$CL_STATE/ports"
    echo "$CL_DATA" >"$CL_STATE/datadir"
}

cl_port_list() { echo "${CL_PORTS[$1]//,/ }"; }

cl_hosts() { # KEY: 127.0.0.1:P1,127.0.0.1:P2,...
    local p out=
    for p in $(cl_port_list "$1"); do out="$out${out:+,}127.0.0.1:$p"; done
    echo "$out"
}

cl_write_env() {
    {
        echo "export LOCKKIT_TEST_ETCD_CLUSTER_URL=etcd://$(cl_hosts ETCD_PORTS)"
        echo "export LOCKKIT_TEST_ZK_ENSEMBLE_URL=zk://$(cl_hosts ZK_PORTS)"
        echo "export LOCKKIT_TEST_REDIS_SENTINEL_URL=redis+sentinel://$(cl_hosts SENTINEL_PORTS)/$CL_MASTER_NAME"
        echo "export LOCKKIT_TEST_REDIS_CLUSTER_URL=redis+cluster://$(cl_hosts REDIS_CLUSTER_PORTS)"
        echo "export LOCKKIT_SERVICES_STATE=$STATE_DIR"
    } >"$CL_STATE/env.sh.tmp"
    mv "$CL_STATE/env.sh.tmp" "$CL_STATE/env.sh"
}

cl_clear_state() {
    local m
    for m in $(cl_members); do rm -f "$CL_STATE/$m.pid"; done
    rm -f "$CL_STATE/datadir" "$CL_STATE/ports" "$CL_STATE/env.sh" "$CL_STATE/env.sh.tmp"
}

cl_recorded_pid() { [ -f "$CL_STATE/$1.pid" ] && cat "$CL_STATE/$1.pid"; }

# Is PID alive and still MEMBER's server (guards against PID reuse)?
cl_pid_is_ours() {
    local m=$1 pid=$2
    pid_alive "$pid" || return 1
    cl_member "$m"
    case $M_KIND in
        etcd) pid_cmd_has "$pid" etcd && pid_cmd_has "$pid" "$M_DIR/data" ;;
        zk) pid_cmd_has "$pid" QuorumPeerMain && pid_cmd_has "$pid" "$M_DIR/zoo.cfg" ;;
        # redis-server rewrites its title to "redis-server 127.0.0.1:PORT"; `dir` makes it chdir.
        *) pid_cmd_has "$pid" ":$M_PORT" && [ "$(pid_cwd "$pid")" = "$M_DIR" ] ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# talking to the servers

cl_redis() { # PORT ARGS...: redis-cli against 127.0.0.1:PORT, 3 s at most
    local port=$1
    shift
    timeout 3 redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

cl_redis_field() { # PORT SECTION FIELD: one field of INFO SECTION
    cl_redis "$1" info "$2" | tr -d '\r' | awk -F: -v k="$3" '$1 == k { print $2 }'
}

cl_etcdctl() { # PORT ARGS...
    local port=$1
    shift
    timeout 5 etcdctl --endpoints="http://127.0.0.1:$port" --dial-timeout=2s --command-timeout=2s "$@"
}

cl_answers() { # MEMBER: does it serve requests?
    cl_member "$1"
    case $M_KIND in
        etcd) cl_etcdctl "$M_PORT" endpoint health >/dev/null 2>&1 ;;
        zk) zk_srvr "$M_PORT" | grep -q 'Mode:' ;;
        *) [ "$(cl_redis "$M_PORT" ping)" = PONG ] ;;
    esac
}

cl_member_ok() { # MEMBER: recorded, ours and answering
    local pid
    pid=$(cl_recorded_pid "$1") || return 1
    cl_pid_is_ours "$1" "$pid" && cl_answers "$1"
}

# The port of the Sentinel group's primary now: as the sentinels report it, else as a running data
# node claims (empty if neither answers).
cl_sentinel_primary_port() {
    local p out
    for p in $(cl_port_list SENTINEL_PORTS); do
        out=$(cl_redis "$p" sentinel get-master-addr-by-name "$CL_MASTER_NAME" | tr -d '\r' | sed -n 2p)
        if [ -n "$out" ]; then
            echo "$out"
            return 0
        fi
    done
    # No sentinel answers: a running data node that says it is the primary.
    for p in $(cl_port_list REDIS_SENTINEL_DATA_PORTS); do
        if [ "$(cl_redis_field "$p" replication role)" = master ]; then
            echo "$p"
            return 0
        fi
    done
}

# ---------------------------------------------------------------------------------------------
# configs and launching

cl_etcd_initial_cluster() {
    local i out=
    for i in 1 2 3; do out="$out${out:+,}c$i=http://127.0.0.1:$(cl_port ETCD_PEER_PORTS "$i")"; done
    echo "$out"
}

cl_write_zk_config() {
    local d=$M_DIR i
    mkdir -p "$d/data"
    echo "$M_IDX" >"$d/data/myid"
    {
        cat <<EOF
tickTime=500
initLimit=20
syncLimit=10
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$d/data
clientPort=$M_PORT
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,isro,cons
maxClientCnxns=0
EOF
        for i in 1 2 3; do
            echo "server.$i=127.0.0.1:$(cl_port ZK_QUORUM_PORTS "$i"):$(cl_port ZK_ELECTION_PORTS "$i")"
        done
    } >"$d/zoo.cfg"
    cat >"$d/log4j.properties" <<EOF
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=$d/server.log
log4j.appender.FILE.Append=true
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
EOF
}

cl_write_redis_config() { # for a sentinel-group data node: replica of the current primary
    local primary=$1
    {
        printf 'port %s\nbind 127.0.0.1\nsave ""\nappendonly no\ndir %s\n' "$M_PORT" "$M_DIR"
        printf 'repl-diskless-sync-delay 0\n'
        [ "$primary" = "$M_PORT" ] || printf 'replicaof 127.0.0.1 %s\n' "$primary"
    } >"$M_DIR/redis.conf"
}

cl_write_sentinel_config() {
    # Kept across restarts of the sentinel: it rewrites the file with what it learnt.
    [ -f "$M_DIR/sentinel.conf" ] && return 0
    cat >"$M_DIR/sentinel.conf" <<EOF
port $M_PORT
bind 127.0.0.1
dir $M_DIR
sentinel monitor $CL_MASTER_NAME 127.0.0.1 $(cl_port REDIS_SENTINEL_DATA_PORTS 1) 2
sentinel down-after-milliseconds $CL_MASTER_NAME 1000
sentinel failover-timeout $CL_MASTER_NAME 3000
sentinel parallel-syncs $CL_MASTER_NAME 2
EOF
}

cl_write_rcluster_config() {
    cat >"$M_DIR/redis.conf" <<EOF
port $M_PORT
bind 127.0.0.1
save ""
appendonly no
dir $M_DIR
repl-diskless-sync-delay 0
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
cluster-replica-validity-factor 0
EOF
}

# cl_launch MEMBER [PRIMARY_PORT]: start MEMBER (which must not be running), don't wait for it.
cl_launch() {
    local m=$1 cmd
    cl_member "$m"
    mkdir -p "$M_DIR"
    case $M_KIND in
        etcd)
            cmd=(etcd --name "c$M_IDX" --data-dir "$M_DIR/data"
                --listen-client-urls "http://127.0.0.1:$M_PORT"
                --advertise-client-urls "http://127.0.0.1:$M_PORT"
                --listen-peer-urls "http://127.0.0.1:$(cl_port ETCD_PEER_PORTS "$M_IDX")"
                --initial-advertise-peer-urls "http://127.0.0.1:$(cl_port ETCD_PEER_PORTS "$M_IDX")"
                --initial-cluster "$(cl_etcd_initial_cluster)"
                --initial-cluster-token lockkit-cluster --initial-cluster-state new
                --heartbeat-interval=50 --election-timeout=500
                --logger=zap --log-outputs=stderr)
            ;;
        zk)
            cl_write_zk_config
            cmd=(java -Xmx256m -XX:+UseSerialGC -cp "$(zk_classpath)"
                "-Dlog4j.configuration=file:$M_DIR/log4j.properties"
                org.apache.zookeeper.server.quorum.QuorumPeerMain "$M_DIR/zoo.cfg")
            ;;
        redis)
            cl_write_redis_config "${2:-$M_PORT}"
            cmd=(redis-server "$M_DIR/redis.conf")
            ;;
        sentinel)
            cl_write_sentinel_config
            cmd=(redis-server "$M_DIR/sentinel.conf" --sentinel)
            ;;
        rcluster)
            cl_write_rcluster_config
            cmd=(redis-server "$M_DIR/redis.conf")
            ;;
    esac
    log "starting $m on port $M_PORT"
    if ! spawn "$CL_STATE/$m.pid" "$M_DIR/server.log" "${cmd[@]}"; then
        log "$m: no pid recorded after launching it"
        show_file_tail "$M_DIR/server.log"
        return 1
    fi
}

cl_wait_ready() { # MEMBER
    local m=$1 pid deadline
    pid=$(cl_recorded_pid "$m") || pid=
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        if ! pid_alive "$pid"; then
            log "$m (pid $pid) exited before answering"
            cl_member "$m"
            show_file_tail "$M_DIR/server.log"
            return 1
        fi
        if cl_answers "$m"; then
            cl_pid_is_ours "$m" "$pid" || {
                log "$m answers, but pid $pid does not look like our server"
                return 1
            }
            log "$m is up (pid $pid, port $M_PORT)"
            return 0
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "$m did not answer on port $M_PORT within ${READY_TIMEOUT}s"
            show_file_tail "$M_DIR/server.log"
            return 1
        fi
        sleep 0.2
    done
}

cl_check_ports() { # MEMBER...: every port the members bind is free
    local m p
    for m in "$@"; do
        cl_member "$m"
        for p in $M_PORTS; do check_port_free "$m" "$p" "$CL_PORT_HINT" || return 1; done
    done
}

# cl_start_members MEMBER...: check ports, launch all, wait for all (members must not be running).
cl_start_members() {
    local m primary=
    cl_check_ports "$@" || return 1
    for m in "$@"; do
        case $m in
            redis-s*)
                [ -n "$primary" ] || primary=$(cl_sentinel_primary_port)
                # Nobody knows a primary yet (fresh start): redis-s1 is the primary.
                [ -n "$primary" ] || primary=$(cl_port REDIS_SENTINEL_DATA_PORTS 1)
                cl_launch "$m" "$primary" || return 1
                ;;
            *) cl_launch "$m" || return 1 ;;
        esac
    done
    for m in "$@"; do cl_wait_ready "$m" || return 1; done
}

# cl_stop_members MEMBER...: signal every recorded server first, then wait for each.
cl_stop_members() {
    local m pid
    for m in "$@"; do
        pid=$(cl_recorded_pid "$m") || continue
        if cl_pid_is_ours "$m" "$pid"; then
            kill -TERM "$pid" 2>/dev/null || true
            kill -CONT "$pid" 2>/dev/null || true
        fi
    done
    for m in "$@"; do
        pid=$(cl_recorded_pid "$m") || continue
        cl_member "$m"
        if cl_pid_is_ours "$m" "$pid"; then
            kill_pid "$m" "$pid" "$M_PORTS"
        elif pid_alive "$pid"; then
            log "$m: pid $pid is no longer our server; not touching it"
        fi
        rm -f "$CL_STATE/$m.pid"
    done
}

# ---------------------------------------------------------------------------------------------
# group readiness

cl_wait_for() { # DESCRIPTION CMD...: poll CMD until it succeeds, READY_TIMEOUT seconds at most
    local what=$1 deadline=$((SECONDS + READY_TIMEOUT))
    shift
    until "$@"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "timed out after ${READY_TIMEOUT}s waiting for $what"
            return 1
        fi
        sleep 0.3
    done
}

cl_sentinel_group_ready() {
    local primary p n
    primary=$(cl_sentinel_primary_port)
    [ -n "$primary" ] || return 1
    [ "$(cl_redis_field "$primary" replication role)" = master ] || return 1
    [ "$(cl_redis_field "$primary" replication connected_slaves)" = 2 ] || return 1
    for p in $(cl_port_list REDIS_SENTINEL_DATA_PORTS); do
        [ "$p" = "$primary" ] && continue
        [ "$(cl_redis_field "$p" replication master_link_status)" = up ] || return 1
    done
    for p in $(cl_port_list SENTINEL_PORTS); do
        n=$(cl_redis "$p" sentinel master "$CL_MASTER_NAME" | tr -d '\r' |
            awk 'k == "num-slaves" { s = $0 } k == "num-other-sentinels" { o = $0 } { k = $0 }
                 END { print s "/" o }')
        [ "$n" = 2/2 ] || return 1
    done
}

# Every node says ok and knows all 6; 3 of them are replicas in sync with their primary.
cl_rcluster_ok() {
    local p info synced=0
    for p in $(cl_port_list REDIS_CLUSTER_PORTS); do
        info=$(cl_redis "$p" cluster info | tr -d '\r')
        grep -qx 'cluster_state:ok' <<<"$info" || return 1
        grep -qx 'cluster_known_nodes:6' <<<"$info" || return 1
        if [ "$(cl_redis_field "$p" replication master_link_status)" = up ]; then
            synced=$((synced + 1))
        fi
    done
    [ "$synced" = 3 ]
}

# Create the Redis Cluster when no node knows another yet; otherwise wait for it to be ok.
cl_rcluster_form() {
    local p known fresh=0 total=0 nodes=()
    for p in $(cl_port_list REDIS_CLUSTER_PORTS); do
        known=$(cl_redis "$p" cluster info | tr -d '\r' | awk -F: '$1 == "cluster_known_nodes" { print $2 }')
        total=$((total + 1))
        [ "$known" = 1 ] && fresh=$((fresh + 1))
        nodes+=("127.0.0.1:$p")
    done
    if [ "$fresh" = "$total" ]; then
        log "creating the Redis Cluster (3 primaries + 3 replicas)"
        timeout 60 redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes \
            >"$CL_DATA/redis-cluster-create.log" 2>&1 || {
            show_file_tail "$CL_DATA/redis-cluster-create.log"
            return 1
        }
    elif [ "$fresh" != 0 ]; then
        log "the Redis Cluster is half formed ($fresh of $total nodes know no other node); run '$0 down --cluster' and up again"
        return 1
    fi
    cl_wait_for "the Redis Cluster (cluster_state:ok on every node, 3 replicas in sync)" cl_rcluster_ok
}

cl_etcd_group_ready() {
    local p
    for p in $(cl_port_list ETCD_PORTS); do cl_etcdctl "$p" endpoint health >/dev/null 2>&1 || return 1; done
}

# ---------------------------------------------------------------------------------------------
# the profile functions

cluster_up() {
    cl_init
    profile_lock cluster
    local m need=() any=
    if cl_state_exists; then
        cl_load
        for m in $(cl_members); do cl_member_ok "$m" && any=1; done
        if [ ! -d "$CL_DATA" ] || [ -z "$any" ]; then
            # Nothing of it runs (e.g. after a reboot): start afresh rather than revive stale state.
            log "cluster: no member of the recorded cluster answers; starting afresh"
            cl_stop_members "${CL_MEMBERS[@]}"
            cl_remove_data
            cl_clear_state
        fi
    fi
    if cl_state_exists; then
        for m in $(cl_members); do
            if cl_member_ok "$m"; then
                log "$m already up (pid $(cl_recorded_pid "$m"))"
            else
                cl_stop_members "$m" # clears a stale/unresponsive recorded pid
                need+=("$m")
            fi
        done
        if [ ${#need[@]} -gt 0 ]; then
            cl_start_members "${need[@]}" || die "cluster: could not start: ${need[*]}"
        fi
    else
        cl_new_state
        log "cluster data dir: $CL_DATA"
        if ! cl_start_members "${CL_MEMBERS[@]}"; then
            cl_stop_members "${CL_MEMBERS[@]}"
            cl_remove_data
            cl_clear_state
            die "could not start the cluster profile"
        fi
    fi
    cl_wait_for "every etcd member to be healthy" cl_etcd_group_ready || die "cluster: etcd is not healthy"
    cl_rcluster_form || die "cluster: the Redis Cluster did not form"
    cl_wait_for "the Sentinel group (primary + 2 replicas in sync, 3 sentinels that see each other)" \
        cl_sentinel_group_ready || die "cluster: the Sentinel group is not ready"
    cl_write_env
    cat "$CL_STATE/env.sh"
}

cl_remove_data() {
    case $CL_DATA in
        */lockkit-cluster.??????)
            if [ -d "$CL_DATA" ]; then
                rm -rf -- "$CL_DATA"
                log "removed $CL_DATA"
            fi
            ;;
        *) log "warning: not removing unexpected data dir '$CL_DATA'" ;;
    esac
}

cluster_down() {
    cl_init
    profile_lock cluster
    if ! cl_state_exists; then
        log "cluster: nothing is up (no state in $CL_STATE)"
        cl_clear_state
        return 0
    fi
    cl_load
    # Sentinels first, so they don't fail over while the data nodes stop.
    cl_stop_members sentinel1 sentinel2 sentinel3
    cl_stop_members "${CL_MEMBERS[@]}"
    cl_remove_data
    cl_clear_state
}

cluster_status() {
    cl_init
    if ! cl_state_exists; then
        echo "cluster: not up (no state in $CL_STATE)"
        return 1
    fi
    cl_load
    local m pid st rc=0
    echo "state dir: $CL_STATE"
    echo "data dir:  $CL_DATA"
    printf '%-10s %-8s %-18s %-10s %s\n' MEMBER PID PORTS STATE LOG
    for m in $(cl_members); do
        cl_member "$m"
        pid=$(cl_recorded_pid "$m") || pid=-
        if [ "$pid" = - ]; then
            st=stopped
        elif ! cl_pid_is_ours "$m" "$pid"; then
            st=dead
        elif [ "$(proc_state "$pid")" = T ]; then
            st=paused
        elif cl_answers "$m"; then
            st=up
        else
            st=no-answer
        fi
        [ "$st" = up ] || rc=1
        printf '%-10s %-8s %-18s %-10s %s\n' "$m" "$pid" "${M_PORTS// //}" "$st" "$M_DIR/server.log"
    done
    return "$rc"
}

cluster_env() {
    cl_init
    [ -f "$CL_STATE/env.sh" ] || die "the cluster profile is not up (no $CL_STATE/env.sh); run '$0 up --cluster'"
    cat "$CL_STATE/env.sh"
}

cluster_start() {
    cl_init
    profile_lock cluster
    cl_state_exists || die "the cluster profile is not set up; run '$0 up --cluster' first"
    cl_load
    [ -d "$CL_DATA" ] || die "data dir $CL_DATA is gone; run '$0 down --cluster' then '$0 up --cluster'"
    if cl_member_ok "$1"; then
        log "$1 already up (pid $(cl_recorded_pid "$1"))"
        return 0
    fi
    cl_stop_members "$1"
    cl_start_members "$1" || die "could not start $1"
}

cluster_stop() {
    cl_init
    profile_lock cluster
    cl_state_exists || {
        log "the cluster profile is not set up; nothing to stop"
        return 0
    }
    cl_load
    if [ ! -f "$CL_STATE/$1.pid" ]; then
        log "$1: not running (no pid recorded)"
        return 0
    fi
    cl_stop_members "$1"
}

cluster_pid() {
    cl_init
    cl_state_exists || return 1
    cl_load
    local pid
    pid=$(cl_recorded_pid "$1") || return 1
    cl_pid_is_ours "$1" "$pid" || return 1
    echo "$pid"
}

# cluster_peer_ports MEMBER: "OWN|OTHERS", the member's own replication ports and those of the
# rest of its group (for `isolate`); fails for members that have none.
cluster_peer_ports() {
    cl_init
    cl_state_exists || return 1
    cl_load
    local key i own="" others=""
    case $1 in
        etcd-c[1-3]) key=ETCD_PEER_PORTS ;;
        zk-e[1-3]) key="ZK_QUORUM_PORTS ZK_ELECTION_PORTS" ;;
        *) return 1 ;;
    esac
    local idx=${1##*[!0-9]} k
    for k in $key; do
        for i in 1 2 3; do
            if [ "$i" = "$idx" ]; then
                own="$own $(cl_port "$k" "$i")"
            else
                others="$others $(cl_port "$k" "$i")"
            fi
        done
    done
    echo "${own# }|${others# }"
}

cluster_leader() {
    cl_init
    cl_state_exists || die "the cluster profile is not up; run '$0 up --cluster'"
    cl_load
    local i p port
    case $1 in
        etcd-cluster)
            for i in 1 2 3; do
                p=$(cl_port ETCD_PORTS "$i")
                # simple format: endpoint, id, version, db size, is leader, ...
                if cl_etcdctl "$p" endpoint status -w simple 2>/dev/null | awk -F', ' '$5 == "true" { f = 1 } END { exit !f }'; then
                    echo "etcd-c$i"
                    return 0
                fi
            done
            ;;
        zk-ensemble)
            for i in 1 2 3; do
                if zk_srvr "$(cl_port ZK_PORTS "$i")" | grep -qx 'Mode: leader'; then
                    echo "zk-e$i"
                    return 0
                fi
            done
            ;;
        redis-sentinel)
            port=$(cl_sentinel_primary_port)
            for i in 1 2 3; do
                if [ "$(cl_port REDIS_SENTINEL_DATA_PORTS "$i")" = "$port" ]; then
                    echo "redis-s$i"
                    return 0
                fi
            done
            ;;
        *) die "cluster: unknown group '$1'" ;;
    esac
    die "$1: no leader right now"
}
