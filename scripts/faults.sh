#!/usr/bin/env bash
# The lockkit fault harness (lockkit-faults): K worker processes contend for one lock while
# holders and servers are killed, paused and restarted on a seeded schedule; a fenced register
# and a checker report overlaps, unsignalled overlaps, stale writes, lost-signal latency,
# recovery time and leftovers.
#
#   scripts/faults.sh run BACKEND TOPOLOGY [options]   one run against servers that are up
#       BACKEND: etcd | zk | redis     TOPOLOGY: single | cluster (etcd 3 nodes, ZK ensemble,
#       Redis primary + 2 replicas + 3 Sentinels) | primary (Redis: the Sentinel group's primary,
#       reached directly, so that network faults reach its clients)
#       --seed N (1)  --duration D (40s)  --workers K (3)  --every D (5s)
#       --lease D (2s: the workers' watchdog lease, and etcd lease_ttl / ZooKeeper session_timeout)
#       --pause D (how long pause-holder / pause-server stop their target; twice the lease)
#       --wait-replicas auto|N|0 (Redis: the wait_replicas option; unset: its default, auto)
#       --strict  --out DIR
#       --hold-ms MIN-MAX (50-250)  --label L (report label)
#       --faults KIND,... (the process faults: kill-holder, pause-holder, kill-leader, stop-leader,
#       pause-server, restart-server; the network faults, which put a proxy on every worker's
#       links: partition-holder, slow-holder, half-open-holder, reset-clients)
#       --wait-ms N (each acquire's wait budget, 3000)  --url-opts K=V[&K=V...] (added to the URL;
#       a key given twice is refused, so not lease_ttl/session_timeout: use --lease)
#       --require-pause (with --strict: fail unless a paused holder was mid-hold)
#       --require-timeouts (fail unless an acquire timed out while a fault was in effect)
#       --primitive mutex|election|rwlock|semaphore|multi (what the workers contend for; a
#       leadership's term is its token; rwlock: two reads in three, a write otherwise; semaphore:
#       one or two of 3 permits; multi: sets of two of the mutexes NAME-a, NAME-b, NAME-c)
#   scripts/faults.sh suite [--long | --seeds N --scale K]
#       the bounded CI suite (scripts/test.d/80-faults.sh): starts its own cluster servers (own
#       state dir and ports; single servers if the cluster profile cannot start), runs every
#       backend with fixed seeds, stops the servers, and fails if a target is missed. --seeds N
#       runs every row with seeds 1..N, --scale K makes every run K times longer; --long is
#       --seeds 3 --scale 2 (about two hours)
#   scripts/faults.sh ctl VERB GROUP [MEMBER]         server control used by the harness
#       VERB: members | leader | kill | stop | start | pause | resume | isolate | heal; GROUP: redis |
#       zk | etcd (single)
#       or etcd-cluster | zk-ensemble | redis-sentinel
#
# `run` reads the servers' URLs from `scripts/services.sh env [--cluster]` in
# $LOCKKIT_SERVICES_STATE, so point that at the servers you may fault (never shared ones).
# LOCKKIT_FAULTS_TRACE=debug (or trace, info, ...) makes every worker write lockkit's events at
# that level to its worker-N.log, stamped with the run's monotonic clock (that of log.jsonl).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

SERVICES=scripts/services.sh
BIN=${CARGO_TARGET_DIR:-target}/debug/lockkit-faults
# The linearizability checker (Porcupine, lockkit-faults/porcupine), built beside the harness.
PORCUPINE=${CARGO_TARGET_DIR:-target}/debug/lockkit-porcupine
JOBS=${LOCKKIT_CARGO_JOBS:-2}

die() {
    echo "faults: $*" >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# ctl: what the harness calls to find and fault servers

cmd_ctl() {
    local verb=${1:-} group=${2:-} member=${3:-}
    case $verb in
        members)
            case $group in
                redis | zk | etcd) echo "$group" ;;
                etcd-cluster) printf '%s\n' etcd-c1 etcd-c2 etcd-c3 ;;
                zk-ensemble) printf '%s\n' zk-e1 zk-e2 zk-e3 ;;
                redis-sentinel) printf '%s\n' redis-s1 redis-s2 redis-s3 ;;
                *) die "ctl: unknown group '$group'" ;;
            esac
            ;;
        leader)
            case $group in
                redis | zk | etcd) echo "$group" ;;
                *) leader_of "$group" ;;
            esac
            ;;
        stop | start | pause | resume | isolate | heal)
            [ -n "$member" ] || die "ctl $verb: which member?"
            "$SERVICES" "$verb" "$member" >&2
            ;;
        kill)
            [ -n "$member" ] || die "ctl kill: which member?"
            kill_member "$member"
            ;;
        *) die "ctl: unknown verb '$verb'" ;;
    esac
}

# SIGKILL a member (a crash, not services.sh's graceful stop, during which an etcd leader hands
# over its leadership), then let services.sh clear its record so that `start` works.
kill_member() {
    local m=$1 state=${LOCKKIT_SERVICES_STATE:-/tmp/lockkit-services} f pid cmd i
    case $m in
        redis | zk | etcd) f=$state/$m.pid ;;
        *) f=$state/cluster/$m.pid ;;
    esac
    [ -s "$f" ] || die "ctl kill: no pid recorded for $m in $f"
    pid=$(cat "$f")
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || die "ctl kill: $m (pid $pid) is not running"
    case $cmd in
        *redis-server* | *redis-sentinel* | *etcd* | *QuorumPeerMain*) ;;
        *) die "ctl kill: pid $pid of $m is not a server we started: $cmd" ;;
    esac
    kill -KILL "$pid"
    for ((i = 0; i < 50; i++)); do
        [ -d "/proc/$pid" ] || break
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = Z ] && break
        sleep 0.1
    done
    echo "faults: killed $m (pid $pid)" >&2
    "$SERVICES" stop "$m" >&2
}

# The group's leader; during an election there may be none for a moment, so retry for 15 s.
leader_of() {
    local i
    for ((i = 0; i < 75; i++)); do
        if "$SERVICES" leader "$1" 2>/dev/null; then return 0; fi
        sleep 0.2
    done
    die "no leader in $1 after 15 s"
}

# ---------------------------------------------------------------------------------------------
# run

build() {
    cargo build -p lockkit-faults -j "$JOBS" >&2
    command -v go >/dev/null 2>&1 || die "the go toolchain is required to build the linearizability checker"
    local out
    out=$(realpath -m "$PORCUPINE")
    (cd lockkit-faults/porcupine && go build -o "$out" .) >&2
}

# with_query URL K=V[&K=V...] -> URL with the options added to its query
with_query() {
    case $1 in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac
}

# sentinel_primary redis+sentinel://H:P,.../NAME -> redis://ADDR of NAME's primary, as its first
# Sentinel reports it
sentinel_primary() {
    local rest=${1#*://} first name addr
    rest=${rest%%\?*}
    case $rest in *@*) die "sentinel_primary: credentials in the Sentinel URL are not supported" ;; esac
    first=${rest%%[,/]*}
    name=${rest##*/}
    addr=$(redis-cli -h "${first%:*}" -p "${first##*:}" --raw SENTINEL get-master-addr-by-name "$name" | paste -sd:) ||
        die "no primary for $name from the Sentinel at $first"
    [ -n "$addr" ] || die "no primary for $name from the Sentinel at $first"
    echo "redis://$addr"
}

# url_for BACKEND TOPOLOGY LEASE WAIT_REPLICAS URL_OPTS -> URL and GROUP on stdout (two lines)
url_for() {
    local backend=$1 topology=$2 lease=$3 wait=$4 opts=$5 env_lines url group
    if [ "$topology" = single ]; then
        env_lines=$("$SERVICES" env) || die "single servers are not up in ${LOCKKIT_SERVICES_STATE:-/tmp/lockkit-services}"
    else
        env_lines=$("$SERVICES" env --cluster) || die "cluster servers are not up in ${LOCKKIT_SERVICES_STATE:-/tmp/lockkit-services}"
    fi
    eval "$env_lines"
    case $backend:$topology in
        etcd:single) url="$LOCKKIT_TEST_ETCD_URL?lease_ttl=$lease" group=etcd ;;
        zk:single) url="$LOCKKIT_TEST_ZK_URL?session_timeout=$lease" group=zk ;;
        redis:single) url="$LOCKKIT_TEST_REDIS_URL" group=redis ;;
        etcd:cluster) url="$LOCKKIT_TEST_ETCD_CLUSTER_URL?lease_ttl=$lease" group=etcd-cluster ;;
        zk:cluster) url="$LOCKKIT_TEST_ZK_ENSEMBLE_URL?session_timeout=$lease" group=zk-ensemble ;;
        redis:cluster) url="$LOCKKIT_TEST_REDIS_SENTINEL_URL" group=redis-sentinel ;;
        redis:primary)
            # The Sentinel group's primary, reached directly: Sentinel hands clients the
            # primary's address, which would route them around the network faults' proxies.
            # (`|| die`: a command substitution does not inherit `set -e`.)
            url=$(sentinel_primary "$LOCKKIT_TEST_REDIS_SENTINEL_URL") || die "no Sentinel primary"
            group=redis-sentinel
            ;;
        *) die "unknown backend/topology '$backend $topology'" ;;
    esac
    if [ -n "$wait" ]; then
        [ "$backend" = redis ] || die "--wait-replicas is a Redis option"
        url=$(with_query "$url" "wait_replicas=$wait")
    fi
    [ -z "$opts" ] || url=$(with_query "$url" "$opts")
    echo "$url"
    echo "$group"
}

cmd_run() {
    local backend=${1:-} topology=${2:-}
    if [ -z "$backend" ] || [ -z "$topology" ]; then die "run: BACKEND TOPOLOGY needed (see --help)"; fi
    shift 2
    local seed=1 duration=40s workers=3 lease=2s every=5s wait='' opts='' strict=() out='' extra=() label=
    while [ $# -gt 0 ]; do
        case $1 in
            --seed) seed=$2 && shift ;;
            --duration) duration=$2 && shift ;;
            --workers) workers=$2 && shift ;;
            --lease) lease=$2 && shift ;;
            --every) every=$2 && shift ;;
            --pause) extra+=(--pause "$2") && shift ;;
            --wait-replicas) wait=$2 && shift ;;
            --url-opts) opts=$2 && shift ;;
            --hold-ms) extra+=(--hold-ms "$2") && shift ;;
            --faults) extra+=(--faults "$2") && shift ;;
            --wait-ms) extra+=(--wait-ms "$2") && shift ;;
            --primitive) extra+=(--primitive "$2") && shift ;;
            --label) label=$2 && shift ;;
            --strict) strict+=(--strict) ;;
            --require-pause) strict+=(--require-pause) ;;
            --require-timeouts) strict+=(--require-timeouts) ;;
            --out) out=$2 && shift ;;
            *) die "run: unknown option '$1'" ;;
        esac
        shift
    done
    local target url group
    if [ -z "$label" ]; then
        label=$topology
        [ "$backend:$topology" = redis:cluster ] && label=sentinel
        case $wait in
            '') ;;
            0) label="$label+nowait" ;;
            *) label="$label+wait$wait" ;;
        esac
    fi
    target=$(url_for "$backend" "$topology" "$lease" "$wait" "$opts")
    url=$(sed -n 1p <<<"$target")
    group=$(sed -n 2p <<<"$target")
    [ -n "$url" ] && [ -n "$group" ] || die "run: no URL for $backend $topology"

    out=${out:-target/faults/$backend-$label-seed$seed}
    [ "${LOCKKIT_FAULTS_BUILT:-0}" = 1 ] || build
    echo "==> faults: $backend $label seed $seed ($url)" >&2
    # A member a run cut off from its group and could not heal (it was stopped mid-fault) is
    # healed before and after every run that cuts members off.
    local isolates=0 rc=0
    case " ${extra[*]-} " in *isolate-*) isolates=1 ;; esac
    [ "$isolates" = 0 ] || heal_group "$group"
    "$BIN" run --url "$url" --topology "$label" --group "$group" --ctl "$0 ctl" \
        --seed "$seed" --duration "$duration" --workers "$workers" --lease "$lease" \
        --every "$every" --out "$out" --porcupine "$PORCUPINE" \
        ${strict[@]+"${strict[@]}"} ${extra[@]+"${extra[@]}"} || rc=$?
    [ "$isolates" = 0 ] || heal_group "$group"
    return "$rc"
}

# heal_group GROUP: undoes `isolate` on every member of GROUP (nothing for one not isolated).
heal_group() {
    local m
    for m in $(cmd_ctl members "$1"); do
        "$SERVICES" heal "$m" >/dev/null 2>&1 || true
    done
}

# ---------------------------------------------------------------------------------------------
# suite

# Own servers, away from the shared ones and from other users of the default cluster ports, and
# below the kernel's ephemeral port range (32768+), where an outgoing connection can hold a port
# a server then fails to bind. Redis Cluster nodes also bind port + 10000.
suite_env() {
    export LOCKKIT_SERVICES_STATE=${LOCKKIT_FAULTS_STATE:-/tmp/lockkit-faults-suite}
    export LOCKKIT_REDIS_PORT=25379 LOCKKIT_ETCD_PORT=25479 LOCKKIT_ETCD_PEER_PORT=25480 LOCKKIT_ZK_PORT=25181
    export LOCKKIT_CLUSTER_ETCD_PORTS=25579,25581,25583 LOCKKIT_CLUSTER_ETCD_PEER_PORTS=25580,25582,25584
    export LOCKKIT_CLUSTER_ZK_PORTS=25381,25382,25383 LOCKKIT_CLUSTER_ZK_QUORUM_PORTS=25391,25393,25395
    export LOCKKIT_CLUSTER_ZK_ELECTION_PORTS=25392,25394,25396
    export LOCKKIT_CLUSTER_REDIS_SENTINEL_DATA_PORTS=25600,25601,25602
    export LOCKKIT_CLUSTER_SENTINEL_PORTS=25700,25701,25702
    export LOCKKIT_CLUSTER_REDIS_CLUSTER_PORTS=21610,21611,21612,21613,21614,21615
}

# Start the cluster profile; one retry after a failed start (a port briefly taken, a slow JVM).
cluster_up() {
    "$SERVICES" up --cluster >/dev/null && return 0
    echo "faults: the cluster profile did not start; retrying once" >&2
    "$SERVICES" down --cluster >&2 || true
    sleep 3
    "$SERVICES" up --cluster >/dev/null
}

SUITE_FAILED=()
# A bound on one run, so a hung server start cannot stall CI: its work (at most 48 s, times the
# scale) plus what does not scale (a fault running past the end, the workers' exit, the probe,
# two leftover scans, up to 90 s for the linearizability check).
SUITE_TIMEOUT=240

suite_one() { # BACKEND TOPOLOGY [run options]
    local rc=0
    timeout --kill-after=10 "$SUITE_TIMEOUT" "$0" run "$@" || rc=$?
    [ "$rc" -eq 0 ] || SUITE_FAILED+=("$*")
}

# The rows, with their seed and their durations times SCALE (the CI suite: seed 1, scale 1).
#
# Every run: 3 workers, 2 s watchdog lease, a fault every 5 s (each kind once: SIGKILL and
# SIGSTOP of the holder, SIGKILL and graceful stop of the leader, SIGSTOP of the leader, restart
# of a member),
# then a run of long holds (5-6 s) so that a paused holder is still holding when it resumes,
# then a run in which acquires time out: the leader is paused for 4 s (twice the lease), four
# times the 1 s command timeout and over three times the 1.2 s wait budget. Its faults come
# every 12 s so that 5 s between a fault's window (its end plus lease plus command timeout) and
# the next fault is more than the 4.2 s bound on a hand-off; all three backends must show 0
# blocked hand-offs and 0 leftovers, and at least one acquire must time out during a pause;
# then the same with a 6 s lease, so that the 4 s pause outlasts the command timeout but not
# the lease (etcd issue 9715: an acquire that timed out must not leave its key on a session
# that stays alive); one pause in 20 s, whose window (4 + 6 + 1 s) ends 6 s before the run;
# then an election row per backend: the workers campaign and resign instead of acquiring and
# releasing (a leadership is a hold, its term the token the register fences with), while the
# leader (holder) is killed and paused and the server leader killed, paused and restarted;
# then RW lock, semaphore and multi-lock rows per backend (the first faults of the same
# schedule: readers two times in three, one or two of a semaphore's 3 permits, sets of two of
# three mutexes);
# then a network row per backend (every worker reaches the servers through its own proxies): the
# holder partitioned for 4 s and healed in place, its links slowed by 0.2-2 s, its connections
# half-open for 4 s (answers held, requests delivered) and then reset, every worker's
# connections reset at once, and in a cluster the etcd or ZooKeeper leader, then a follower, cut
# off from the rest of its group for 4 s. Every run's history goes through the fast checker and
# the linearizability checker (Porcupine); the strict rows fail on any violation either finds.
suite_rows() { # TOPOLOGY SEED SCALE
    local t=$1 seed=$2 k=$3 redis_t p
    d() { echo "$(($1 * k))s"; }
    local run=(--seed "$seed" --duration "$(d 40)" --every 5s)
    local long=(--seed "$seed" --duration "$(d 20)" --every 7s --faults pause-holder --hold-ms 5000-6000
        --require-pause)
    local timeouts=(--seed "$seed" --duration "$(d 22)" --every 12s --faults pause-server --wait-ms 1200
        --url-opts command_timeout=1s --strict --require-timeouts)
    local in_lease=(--seed "$seed" --duration "$(d 20)" --every 12s --faults pause-server --wait-ms 1200
        --url-opts command_timeout=1s --lease 6s --pause 4s --strict --require-timeouts)
    local election=(--seed "$seed" --duration "$(d 30)" --every 5s --primitive election)
    local shared=(--seed "$seed" --duration "$(d 25)" --every 5s)
    local links=partition-holder,slow-holder,half-open-holder,reset-clients
    local network=(--seed "$seed" --duration "$(d 36)" --every 6s --strict --faults $links)
    local members=(--seed "$seed" --duration "$(d 48)" --every 6s --strict
        --faults $links,isolate-leader,isolate-follower)
    if [ "$t" = cluster ]; then
        suite_one etcd cluster "${run[@]}" --strict
        suite_one zk cluster "${run[@]}" --strict
        suite_one etcd cluster "${long[@]}" --strict --label cluster-longhold
        suite_one zk cluster "${long[@]}" --strict --label cluster-longhold
        suite_one redis cluster "${run[@]}"
        suite_one redis cluster "${run[@]}" --wait-replicas 0
    else
        suite_one etcd single "${run[@]}" --strict
        suite_one zk single "${run[@]}" --strict
        suite_one etcd single "${long[@]}" --strict --label single-longhold
        suite_one zk single "${long[@]}" --strict --label single-longhold
        suite_one redis single "${run[@]}"
    fi
    suite_one etcd "$t" "${timeouts[@]}" --label "$t-timeouts"
    suite_one zk "$t" "${timeouts[@]}" --label "$t-timeouts"
    suite_one redis "$t" "${timeouts[@]}" --label "$t-timeouts"
    suite_one etcd "$t" "${in_lease[@]}" --label "$t-timeouts-lease6s"
    suite_one zk "$t" "${in_lease[@]}" --label "$t-timeouts-lease6s"
    suite_one redis "$t" "${in_lease[@]}" --label "$t-timeouts-lease6s"
    suite_one etcd "$t" "${election[@]}" --strict --label "$t-election"
    suite_one zk "$t" "${election[@]}" --strict --label "$t-election"
    suite_one redis "$t" "${election[@]}" --label "$t-election"
    for p in rwlock semaphore multi; do
        suite_one etcd "$t" "${shared[@]}" --primitive $p --strict --label "$t-$p"
        suite_one zk "$t" "${shared[@]}" --primitive $p --strict --label "$t-$p"
        suite_one redis "$t" "${shared[@]}" --primitive $p --label "$t-$p"
    done
    # Network faults reach Redis only without Sentinel in the path: its primary, directly. A
    # single server has no group to cut a member off from.
    redis_t=$t
    [ "$t" = cluster ] && redis_t=primary
    if [ "$t" = cluster ]; then
        suite_one etcd cluster "${members[@]}" --label cluster-network
        suite_one zk cluster "${members[@]}" --label cluster-network
    else
        suite_one etcd single "${network[@]}" --label single-network
        suite_one zk single "${network[@]}" --label single-network
    fi
    suite_one redis "$redis_t" "${network[@]}" --label "$redis_t-network"
}

# Cluster topologies when the cluster profile starts; single servers otherwise.
cmd_suite() {
    local seeds=1 scale=1 seed t
    while [ $# -gt 0 ]; do
        case $1 in
            --seeds) seeds=$2 && shift ;;
            --scale) scale=$2 && shift ;;
            --long) seeds=3 scale=2 ;;
            *) die "suite: unknown option '$1'" ;;
        esac
        shift
    done
    case $seeds$scale in *[!0-9]*) die "suite: --seeds and --scale take positive integers" ;; esac
    [ "$seeds" -ge 1 ] && [ "$scale" -ge 1 ] || die "suite: --seeds and --scale take positive integers"
    SUITE_TIMEOUT=$((150 + 90 * scale))
    suite_env
    build
    export LOCKKIT_FAULTS_BUILT=1
    # The linearizability checker's own tests: it must find each injected bug.
    (cd lockkit-faults/porcupine && go test ./...) >&2 || die "the linearizability checker's tests failed"
    trap '"$SERVICES" down >&2 || true' EXIT
    if cluster_up; then
        t=cluster
    else
        echo "faults: the cluster profile did not start; single servers only" >&2
        "$SERVICES" down --cluster >&2 || true
        "$SERVICES" up >/dev/null || die "could not start the single servers"
        t=single
    fi
    for ((seed = 1; seed <= seeds; seed++)); do
        suite_rows "$t" "$seed" "$scale"
    done
    if [ ${#SUITE_FAILED[@]} -gt 0 ]; then
        printf 'faults: FAILED: %s\n' "${SUITE_FAILED[@]}" >&2
        return 1
    fi
    echo "faults: suite passed" >&2
}

case ${1:-} in
    ctl) shift && cmd_ctl "$@" ;;
    run) shift && cmd_run "$@" ;;
    suite) shift && cmd_suite "$@" ;;
    -h | --help | help | '') sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' ;;
    *) die "unknown command '$1' (see --help)" ;;
esac
