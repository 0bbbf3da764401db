# shellcheck shell=bash
# The `secure` profile of scripts/services.sh: Redis, ZooKeeper and etcd with TLS and
# authentication, on 127.0.0.1, side by side with the other profiles.
#
#   scripts/services.sh up --secure | down --secure | status --secure | env --secure
#
# What it starts (everything made fresh in a mktemp -d data directory):
#   certs/   an openssl CA, a server certificate (SAN IP:127.0.0.1, DNS:localhost), a client
#            certificate, plus material for negative tests: untrusted-ca.pem (a CA that signed
#            nothing here) and expired-client.{pem,key}, expired-server.{pem,key} (signed by the
#            CA, valid only in 2020; tests start private servers with the latter)
#   Redis    TLS only (no plain port), client certificates required, `default` user off; ACL user
#            `lockkit` limited to keys `lockkit:*` and channels `lockkit:*`, and to the command
#            categories lockkit uses (read, write, scripting, pubsub, connection, transaction, TIME;
#            nothing dangerous); `admin` may do everything
#   ZooKeeper  digest auth: `super` via superDigest; /lockkit is created up front with an ACL that
#            lets only the digest identity `lockkit` write under it (anyone may read); a TLS client
#            port (NettyServerCnxnFactory, client certificates required) next to the plain one
#   etcd     https only, client certificates required, auth enabled: `root`, and `lockkit` with
#            role `lockkit-rw` (readwrite on the prefix `lockkit`), and `norole` with no role
#
# Exports (stdout of up/env; single-quoted, the URLs hold `&`):
#   LOCKKIT_TEST_REDIS_SECURE_URL, LOCKKIT_TEST_ZK_SECURE_URL, LOCKKIT_TEST_ETCD_SECURE_URL
#     the lockkit identities, with credentials and tls_ca/tls_cert/tls_key options
#     (ZooKeeper: its TLS port; lockkit-zk needs its `tls` feature for it)
#   LOCKKIT_TEST_ZK_SECURE_PLAIN_PORT the ZooKeeper plain client port (digest auth and ACLs only)
#   LOCKKIT_TEST_REDIS_SECURE_ADMIN_URL, LOCKKIT_TEST_ETCD_SECURE_NOROLE_URL
#     identities for the ACL tests
#   LOCKKIT_TEST_SECURE_CERTS         the certificate directory
# The passwords are random per `up`; they are test credentials and live only in the state dir.
#
# Environment:
#   LOCKKIT_SECURE_REDIS_PORT (16390), LOCKKIT_SECURE_ETCD_PORT (12579),
#   LOCKKIT_SECURE_ETCD_PEER_PORT (12580), LOCKKIT_SECURE_ZK_PORT (12381),
#   LOCKKIT_SECURE_ZK_TLS_PORT (12382)
#
# State ($LOCKKIT_SERVICES_STATE/secure/): datadir, ports, secrets (mode 600), env.sh,
# redis.pid, zk.pid, etcd.pid. Data dir: certs/, redis/, zk/, etcd/.

SECURE_MEMBERS=(redis etcd zk)
SECURE_PREFIX=lockkit

# Filled by secure_load.
SECURE_DIR=
SECURE_DATA=
SECURE_REDIS_PORT=
SECURE_ETCD_PORT=
SECURE_ETCD_PEER_PORT=
SECURE_ZK_PORT=
SECURE_ZK_TLS_PORT=
SECURE_PW_LOCKKIT=
SECURE_PW_ADMIN=
SECURE_PW_NOROLE=

secure_exists() { [ -f "$SECURE_DIR/datadir" ] && [ -f "$SECURE_DIR/ports" ] && [ -f "$SECURE_DIR/secrets" ]; }

secure_load() {
    SECURE_DATA=$(cat "$SECURE_DIR/datadir")
    local k v
    while IFS='=' read -r k v; do
        case $k in
            REDIS) SECURE_REDIS_PORT=$v ;;
            ETCD) SECURE_ETCD_PORT=$v ;;
            ETCD_PEER) SECURE_ETCD_PEER_PORT=$v ;;
            ZK) SECURE_ZK_PORT=$v ;;
            ZK_TLS) SECURE_ZK_TLS_PORT=$v ;;
        esac
    done <"$SECURE_DIR/ports"
    while IFS='=' read -r k v; do
        case $k in
            LOCKKIT) SECURE_PW_LOCKKIT=$v ;;
            ADMIN) SECURE_PW_ADMIN=$v ;;
            NOROLE) SECURE_PW_NOROLE=$v ;;
        esac
    done <"$SECURE_DIR/secrets"
}

secure_new_state() {
    SECURE_REDIS_PORT=${LOCKKIT_SECURE_REDIS_PORT:-16390}
    SECURE_ETCD_PORT=${LOCKKIT_SECURE_ETCD_PORT:-12579}
    SECURE_ETCD_PEER_PORT=${LOCKKIT_SECURE_ETCD_PEER_PORT:-12580}
    SECURE_ZK_PORT=${LOCKKIT_SECURE_ZK_PORT:-12381}
    SECURE_ZK_TLS_PORT=${LOCKKIT_SECURE_ZK_TLS_PORT:-12382}
    local p
    for p in "$SECURE_REDIS_PORT" "$SECURE_ETCD_PORT" "$SECURE_ETCD_PEER_PORT" "$SECURE_ZK_PORT" "$SECURE_ZK_TLS_PORT"; do
        if ! [[ $p =~ ^[0-9]+$ ]] || [ "$p" -lt 1 ] || [ "$p" -gt 65535 ]; then
            die "secure: invalid port '$p'"
        fi
    done
    SECURE_PW_LOCKKIT=$(openssl rand -hex 12)
    SECURE_PW_ADMIN=$(openssl rand -hex 12)
    SECURE_PW_NOROLE=$(openssl rand -hex 12)
    SECURE_DATA=$(mktemp -d "${TMPDIR:-/tmp}/lockkit-secure.XXXXXX")
    mkdir -p "$SECURE_DATA/certs" "$SECURE_DATA/redis" "$SECURE_DATA/zk/data" "$SECURE_DATA/etcd"
    printf 'REDIS=%s\nETCD=%s\nETCD_PEER=%s\nZK=%s\nZK_TLS=%s\n' "$SECURE_REDIS_PORT" \
        "$SECURE_ETCD_PORT" "$SECURE_ETCD_PEER_PORT" "$SECURE_ZK_PORT" "$SECURE_ZK_TLS_PORT" \
        >"$SECURE_DIR/ports"
    (
        umask 077
        printf 'LOCKKIT=%s\nADMIN=%s\nNOROLE=%s\n' "$SECURE_PW_LOCKKIT" "$SECURE_PW_ADMIN" \
            "$SECURE_PW_NOROLE" >"$SECURE_DIR/secrets"
    )
    echo "$SECURE_DATA" >"$SECURE_DIR/datadir"
}

secure_clear_state() {
    local m
    rm -f "$SECURE_DIR/datadir" "$SECURE_DIR/ports" "$SECURE_DIR/secrets" "$SECURE_DIR/env.sh"
    for m in "${SECURE_MEMBERS[@]}"; do rm -f "$SECURE_DIR/$m.pid"; done
}

# ---------------------------------------------------------------------------------------------
# certificates

secure_openssl() { # ARGS...: openssl in the cert dir, quiet unless it fails
    local out
    out=$(cd "$SECURE_DATA/certs" && openssl "$@" 2>&1) || {
        printf '%s\n' "$out" >&2
        die "secure: openssl $1 failed"
    }
}

secure_make_certs() {
    local c=$SECURE_DATA/certs
    [ -f "$c/done" ] && return 0
    log "secure: making certificates in $c"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' >"$c/server.ext"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >"$c/client.ext"
    secure_openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 30 \
        -subj "/CN=lockkit secure-profile CA"
    secure_openssl req -x509 -newkey rsa:2048 -nodes -keyout untrusted-ca.key -out untrusted-ca.pem \
        -days 30 -subj "/CN=lockkit untrusted CA"
    rm -f "$c/untrusted-ca.key"
    local n
    for n in server client expired-client expired-server; do
        secure_openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" \
            -subj "/CN=lockkit-$n"
    done
    secure_openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out server.pem -days 30 -extfile server.ext
    secure_openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out client.pem -days 30 -extfile client.ext
    # `openssl x509` cannot back-date; `openssl ca` can (-startdate/-enddate).
    mkdir -p "$c/ca-db"
    : >"$c/ca-db/index.txt"
    echo 1000 >"$c/ca-db/serial"
    cat >"$c/ca.cnf" <<EOF
[ ca ]
default_ca = lk
[ lk ]
database = $c/ca-db/index.txt
new_certs_dir = $c/ca-db
serial = $c/ca-db/serial
default_md = sha256
policy = anything
unique_subject = no
[ anything ]
commonName = supplied
EOF
    secure_openssl ca -batch -notext -config ca.cnf -cert ca.pem -keyfile ca.key \
        -in expired-client.csr -out expired-client.pem -extfile client.ext \
        -startdate 20200101000000Z -enddate 20200102000000Z
    secure_openssl ca -batch -notext -config ca.cnf -cert ca.pem -keyfile ca.key \
        -in expired-server.csr -out expired-server.pem -extfile server.ext \
        -startdate 20200101000000Z -enddate 20200102000000Z
    # ZooKeeper's PEM key store wants the key and the certificate in one file.
    cat "$c/server.key" "$c/server.pem" >"$c/zk-server.pem"
    rm -f "$c"/*.csr
    chmod 600 "$c"/*.key "$c/zk-server.pem"
    touch "$c/done"
}

# ---------------------------------------------------------------------------------------------
# per-member facts

secure_ports() {
    case $1 in
        redis) echo "$SECURE_REDIS_PORT" ;;
        etcd) echo "$SECURE_ETCD_PORT $SECURE_ETCD_PEER_PORT" ;;
        zk) echo "$SECURE_ZK_PORT $SECURE_ZK_TLS_PORT" ;;
    esac
}

secure_log() {
    case $1 in
        redis) echo "$SECURE_DATA/redis/redis.log" ;;
        etcd) echo "$SECURE_DATA/etcd/etcd.log" ;;
        zk) echo "$SECURE_DATA/zk/zk.out" ;;
    esac
}

secure_pid() { [ -f "$SECURE_DIR/$1.pid" ] && cat "$SECURE_DIR/$1.pid"; }

secure_pid_is_ours() { # MEMBER PID
    pid_alive "$2" || return 1
    case $1 in
        redis) pid_cmd_has "$2" redis-server && [ "$(pid_cwd "$2")" = "$SECURE_DATA/redis" ] ;;
        etcd) pid_cmd_has "$2" "$SECURE_DATA/etcd/data" ;;
        zk) pid_cmd_has "$2" "$SECURE_DATA/zk/zoo.cfg" ;;
    esac
}

secure_redis_cli() {
    local c=$SECURE_DATA/certs
    timeout 5 redis-cli --tls --cacert "$c/ca.pem" --cert "$c/client.pem" --key "$c/client.key" \
        -h 127.0.0.1 -p "$SECURE_REDIS_PORT" --user admin --pass "$SECURE_PW_ADMIN" --no-auth-warning "$@"
}

secure_etcdctl() { # ARGS...: etcdctl as root (once auth is on)
    local c=$SECURE_DATA/certs
    timeout 10 env ETCDCTL_API=3 etcdctl --endpoints="https://127.0.0.1:$SECURE_ETCD_PORT" \
        --cacert "$c/ca.pem" --cert "$c/client.pem" --key "$c/client.key" \
        --dial-timeout=2s --command-timeout=5s "$@"
}

secure_zk_srvr() {
    # shellcheck disable=SC2016 # $1 is expanded by the inner bash
    timeout 3 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" && printf srvr >&3 && cat <&3' _ "$SECURE_ZK_PORT" 2>/dev/null
}

secure_answers() {
    case $1 in
        redis) [ "$(secure_redis_cli ping 2>/dev/null)" = PONG ] ;;
        etcd) secure_etcdctl endpoint health >/dev/null 2>&1 ;;
        zk) secure_zk_srvr | grep -q 'Mode:' && port_open "$SECURE_ZK_TLS_PORT" ;;
    esac
}

secure_ok() {
    local pid
    pid=$(secure_pid "$1") || return 1
    secure_pid_is_ours "$1" "$pid" && secure_answers "$1"
}

# ---------------------------------------------------------------------------------------------
# launching

secure_write_redis_config() {
    local d=$SECURE_DATA/redis c=$SECURE_DATA/certs
    cat >"$d/users.acl" <<EOF
user default off
user admin on >$SECURE_PW_ADMIN ~* &* +@all
user $SECURE_PREFIX on >$SECURE_PW_LOCKKIT resetchannels ~$SECURE_PREFIX:* &$SECURE_PREFIX:* -@all +@read +@write +@scripting +@pubsub +@connection +@transaction +time -@dangerous
EOF
    cat >"$d/redis.conf" <<EOF
bind 127.0.0.1
port 0
tls-port $SECURE_REDIS_PORT
tls-cert-file $c/server.pem
tls-key-file $c/server.key
tls-ca-cert-file $c/ca.pem
tls-auth-clients yes
aclfile $d/users.acl
save ""
appendonly no
dir $d
EOF
    chmod 600 "$d/users.acl" "$d/redis.conf"
}

secure_zk_digest() { # USER PASSWORD: ZooKeeper's digest form, base64(sha1(user:password))
    printf '%s:%s' "$1" "$2" | openssl dgst -sha1 -binary | base64
}

secure_write_zk_config() {
    local d=$SECURE_DATA/zk c=$SECURE_DATA/certs
    cat >"$d/zoo.cfg" <<EOF
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$d/data
clientPort=$SECURE_ZK_PORT
clientPortAddress=127.0.0.1
secureClientPort=$SECURE_ZK_TLS_PORT
secureClientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,conf,isro,cons
maxClientCnxns=0
authProvider.1=org.apache.zookeeper.server.auth.DigestAuthenticationProvider
ssl.keyStore.location=$c/zk-server.pem
ssl.keyStore.type=PEM
ssl.trustStore.location=$c/ca.pem
ssl.trustStore.type=PEM
ssl.clientAuth=need
EOF
    cat >"$d/log4j.properties" <<EOF
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File=$d/zookeeper.log
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
EOF
}

secure_zk_classpath() {
    local cp=/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar j
    # The TLS port needs Netty; Debian's libnetty-java ships the jars zookeeper depends on.
    for j in netty-handler netty-transport netty-common netty-buffer netty-codec netty-resolver \
        netty-transport-native-unix-common netty-transport-native-epoll slf4j-api slf4j-log4j12 \
        log4j-1.2 commons-cli commons-io metrics-core jackson-databind jackson-core \
        jackson-annotations; do
        [ -f "/usr/share/java/$j.jar" ] && cp="$cp:/usr/share/java/$j.jar"
    done
    echo "$cp"
}

secure_launch() {
    local m=$1 d=$SECURE_DATA cmd=()
    case $m in
        redis)
            secure_write_redis_config
            cmd=(redis-server "$d/redis/redis.conf")
            ;;
        etcd)
            cmd=(etcd --name s1 --data-dir "$d/etcd/data"
                --listen-client-urls "https://127.0.0.1:$SECURE_ETCD_PORT"
                --advertise-client-urls "https://127.0.0.1:$SECURE_ETCD_PORT"
                --listen-peer-urls "http://127.0.0.1:$SECURE_ETCD_PEER_PORT"
                --initial-advertise-peer-urls "http://127.0.0.1:$SECURE_ETCD_PEER_PORT"
                --initial-cluster "s1=http://127.0.0.1:$SECURE_ETCD_PEER_PORT"
                --initial-cluster-state new
                --cert-file "$d/certs/server.pem" --key-file "$d/certs/server.key"
                --trusted-ca-file "$d/certs/ca.pem" --client-cert-auth
                --heartbeat-interval=50 --election-timeout=500
                --logger=zap --log-outputs=stderr)
            ;;
        zk)
            secure_write_zk_config
            cmd=(java -Xmx256m -cp "$(secure_zk_classpath)"
                "-Dlog4j.configuration=file:$d/zk/log4j.properties"
                -Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
                "-Dzookeeper.DigestAuthenticationProvider.superDigest=super:$(secure_zk_digest super "$SECURE_PW_ADMIN")"
                org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zk/zoo.cfg")
            ;;
    esac
    log "secure: starting $m on port(s) $(secure_ports "$m")"
    spawn "$SECURE_DIR/$m.pid" "$(secure_log "$m")" "${cmd[@]}" || {
        log "secure: $m: no pid recorded after launching it"
        return 1
    }
}

secure_wait_ready() {
    local m=$1 pid deadline
    pid=$(secure_pid "$m")
    deadline=$((SECONDS + READY_TIMEOUT))
    while :; do
        if ! pid_alive "$pid"; then
            log "secure: $m (pid $pid) exited before answering"
            show_file_tail "$(secure_log "$m")"
            return 1
        fi
        if secure_answers "$m"; then
            log "secure: $m is up (pid $pid, port(s) $(secure_ports "$m"))"
            return 0
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "secure: $m did not answer within ${READY_TIMEOUT}s"
            show_file_tail "$(secure_log "$m")"
            [ "$m" = zk ] && show_file_tail "$SECURE_DATA/zk/zookeeper.log"
            return 1
        fi
        sleep 0.2
    done
}

# One-time setup of users and ACLs, on the first start of a data dir.
secure_provision() {
    local m=$1 marker=$SECURE_DATA/$1/provisioned
    [ -f "$marker" ] && return 0
    case $m in
        etcd)
            log "secure: etcd: users root, $SECURE_PREFIX (role $SECURE_PREFIX-rw), norole; auth on"
            {
                secure_etcdctl user add root --new-user-password="$SECURE_PW_ADMIN" &&
                    secure_etcdctl user grant-role root root &&
                    secure_etcdctl role add "$SECURE_PREFIX-rw" &&
                    secure_etcdctl role grant-permission "$SECURE_PREFIX-rw" --prefix=true readwrite "$SECURE_PREFIX" &&
                    secure_etcdctl user add "$SECURE_PREFIX" --new-user-password="$SECURE_PW_LOCKKIT" &&
                    secure_etcdctl user grant-role "$SECURE_PREFIX" "$SECURE_PREFIX-rw" &&
                    secure_etcdctl user add norole --new-user-password="$SECURE_PW_NOROLE" &&
                    secure_etcdctl auth enable
            } >/dev/null || {
                log "secure: etcd: setting up users failed"
                return 1
            }
            ;;
        zk)
            # Create /<prefix> owned by the lockkit identity (super may do anything regardless):
            # without it, anyone could create the prefix first with an open ACL.
            local digest
            digest=$(secure_zk_digest "$SECURE_PREFIX" "$SECURE_PW_LOCKKIT")
            log "secure: zk: /$SECURE_PREFIX writable only by digest:$SECURE_PREFIX"
            timeout 60 java -Xmx128m -cp "$(secure_zk_classpath)" \
                "-Dlog4j.configuration=file:$SECURE_DATA/zk/log4j.properties" \
                org.apache.zookeeper.ZooKeeperMain -server "127.0.0.1:$SECURE_ZK_PORT" \
                >"$SECURE_DATA/zk/provision.out" 2>&1 <<EOF || true
addauth digest super:$SECURE_PW_ADMIN
create /$SECURE_PREFIX ""
setAcl /$SECURE_PREFIX digest:$SECURE_PREFIX:$digest:cdrwa,world:anyone:r
getAcl /$SECURE_PREFIX
quit
EOF
            if ! grep -q "digest,'$SECURE_PREFIX:$digest" "$SECURE_DATA/zk/provision.out"; then
                log "secure: zk: could not set the ACL of /$SECURE_PREFIX"
                show_file_tail "$SECURE_DATA/zk/provision.out"
                return 1
            fi
            ;;
    esac
    touch "$marker"
}

secure_stop_member() {
    local m=$1 pid
    pid=$(secure_pid "$m") || return 0
    if secure_pid_is_ours "$m" "$pid"; then
        kill_pid "secure $m" "$pid" "$(secure_ports "$m")"
    elif pid_alive "$pid"; then
        log "secure: $m: pid $pid is no longer our server; not touching it"
    fi
    rm -f "$SECURE_DIR/$m.pid"
}

secure_start_members() { # MEMBERS...: launch all, wait for all, provision; stop them on failure
    local m p started=() failed=
    for m in "$@"; do
        for p in $(secure_ports "$m"); do
            check_port_free "secure $m" "$p" "LOCKKIT_SECURE_*_PORT" || return 1
        done
    done
    for m in "$@"; do
        started+=("$m")
        secure_launch "$m" || {
            failed=1
            break
        }
    done
    if [ -z "$failed" ]; then
        for m in "$@"; do
            if ! secure_wait_ready "$m" || ! secure_provision "$m"; then
                failed=1
                break
            fi
        done
    fi
    if [ -n "$failed" ]; then
        for m in "${started[@]}"; do secure_stop_member "$m"; done
        return 1
    fi
}

secure_write_env() {
    local c=$SECURE_DATA/certs h=127.0.0.1 tls
    tls="tls_ca=$c/ca.pem&tls_cert=$c/client.pem&tls_key=$c/client.key"
    {
        echo "export LOCKKIT_TEST_REDIS_SECURE_URL='rediss://$SECURE_PREFIX:$SECURE_PW_LOCKKIT@$h:$SECURE_REDIS_PORT?$tls'"
        echo "export LOCKKIT_TEST_ZK_SECURE_URL='zk://$SECURE_PREFIX:$SECURE_PW_LOCKKIT@$h:$SECURE_ZK_TLS_PORT?$tls'"
        echo "export LOCKKIT_TEST_ETCD_SECURE_URL='etcds://$SECURE_PREFIX:$SECURE_PW_LOCKKIT@$h:$SECURE_ETCD_PORT?$tls'"
        echo "export LOCKKIT_TEST_ZK_SECURE_PLAIN_PORT='$SECURE_ZK_PORT'"
        echo "export LOCKKIT_TEST_REDIS_SECURE_ADMIN_URL='rediss://admin:$SECURE_PW_ADMIN@$h:$SECURE_REDIS_PORT?$tls'"
        echo "export LOCKKIT_TEST_ETCD_SECURE_NOROLE_URL='etcds://norole:$SECURE_PW_NOROLE@$h:$SECURE_ETCD_PORT?$tls'"
        echo "export LOCKKIT_TEST_SECURE_CERTS='$c'"
    } >"$SECURE_DIR/env.sh.tmp"
    chmod 600 "$SECURE_DIR/env.sh.tmp"
    mv "$SECURE_DIR/env.sh.tmp" "$SECURE_DIR/env.sh"
}

# ---------------------------------------------------------------------------------------------
# the profile contract

secure_up() {
    SECURE_DIR=$(profile_dir secure)
    profile_lock secure
    command -v openssl >/dev/null 2>&1 || die "secure: openssl is needed to make certificates"
    local m need=()
    if secure_exists; then
        secure_load
        if [ ! -d "$SECURE_DATA" ]; then
            log "secure: recorded data dir $SECURE_DATA is gone; discarding stale state"
            for m in "${SECURE_MEMBERS[@]}"; do secure_stop_member "$m"; done
            secure_clear_state
        fi
    fi
    if secure_exists; then
        for m in "${SECURE_MEMBERS[@]}"; do
            if secure_ok "$m"; then
                log "secure: $m already up (pid $(secure_pid "$m"))"
            else
                secure_stop_member "$m"
                need+=("$m")
            fi
        done
        if [ ${#need[@]} -gt 0 ]; then
            secure_start_members "${need[@]}" || die "secure: could not start: ${need[*]}"
        fi
    else
        secure_new_state
        log "secure: data dir $SECURE_DATA"
        secure_make_certs
        if ! secure_start_members "${SECURE_MEMBERS[@]}"; then
            rm -rf -- "$SECURE_DATA"
            secure_clear_state
            die "secure: could not start the secure profile"
        fi
    fi
    secure_write_env
    cat "$SECURE_DIR/env.sh"
}

secure_down() {
    SECURE_DIR=$(profile_dir secure)
    profile_lock secure
    if ! secure_exists; then
        secure_clear_state
        return 0
    fi
    secure_load
    local m
    for m in zk etcd redis; do secure_stop_member "$m"; done
    case $SECURE_DATA in
        */lockkit-secure.??????)
            [ -d "$SECURE_DATA" ] && rm -rf -- "$SECURE_DATA" && log "secure: removed $SECURE_DATA"
            ;;
        *) log "secure: warning: not removing unexpected data dir '$SECURE_DATA'" ;;
    esac
    secure_clear_state
}

secure_status() {
    SECURE_DIR=$(profile_dir secure)
    if ! secure_exists; then
        echo "secure: not up"
        return 1
    fi
    secure_load
    local m pid state all=0 ports
    echo "secure profile, data dir $SECURE_DATA"
    printf '%-14s %-8s %-12s %-10s %s\n' MEMBER PID PORTS STATE LOG
    for m in "${SECURE_MEMBERS[@]}"; do
        pid=$(secure_pid "$m") || pid=-
        ports=$(secure_ports "$m")
        if [ "$pid" = - ]; then
            state=stopped
            all=1
        elif ! secure_pid_is_ours "$m" "$pid"; then
            state=dead
            all=1
        elif secure_answers "$m"; then
            state=up
        else
            state=no-answer
            all=1
        fi
        printf '%-14s %-8s %-12s %-10s %s\n' "secure-$m" "$pid" "${ports// //}" "$state" "$(secure_log "$m")"
    done
    return "$all"
}

secure_env() {
    SECURE_DIR=$(profile_dir secure)
    [ -f "$SECURE_DIR/env.sh" ] || die "the secure profile is not up; run 'scripts/services.sh up --secure'"
    cat "$SECURE_DIR/env.sh"
}
