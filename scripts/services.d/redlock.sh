# shellcheck shell=bash
# The "redlock" profile of scripts/services.sh (sourced by it; see the PROFILE CONTRACT there):
# five independent Redis masters for Redlock, on 127.0.0.1: no replication, nothing kept on disk
# (`--save ''`, `--appendonly no`), so a restarted member comes back empty.
#
#   members redlock1 .. redlock5, ports 16420 .. 16424
#   export  LOCKKIT_TEST_REDLOCK_URL=redlock://127.0.0.1:16420,...,127.0.0.1:16424
#
# Environment: LOCKKIT_REDLOCK_PORTS, the five ports comma-separated in member order (default
# 16420,16421,16422,16423,16424); read when the profile is first set up, then recorded.
# State ($LOCKKIT_SERVICES_STATE/redlock/): datadir, ports, env.sh, MEMBER.pid, .lock.
# Data dir (mktemp -d lockkit-redlock.XXXXXX): one working directory per member (MEMBER/server.log).

RL_MEMBERS=(redlock1 redlock2 redlock3 redlock4 redlock5)

# Filled by rl_open / rl_new_state.
RL_STATE=
RL_DATA=
RL_PORTS=()

# rl_open [lock]: set RL_STATE (and take the profile lock if asked); load the recorded state,
# return 1 if there is none.
rl_open() {
    RL_STATE=$(profile_dir redlock)
    [ -z "${1:-}" ] || profile_lock redlock
    [ -f "$RL_STATE/datadir" ] && [ -f "$RL_STATE/ports" ] || return 1
    RL_DATA=$(cat "$RL_STATE/datadir")
    IFS=, read -r -a RL_PORTS <<<"$(sed -n 's/^PORTS=//p' "$RL_STATE/ports")"
    [ ${#RL_PORTS[@]} -eq 5 ] || die "corrupt state in $RL_STATE/ports; run '$0 down --redlock'"
}

rl_new_state() {
    local p
    IFS=, read -r -a RL_PORTS <<<"${LOCKKIT_REDLOCK_PORTS:-16420,16421,16422,16423,16424}"
    [ ${#RL_PORTS[@]} -eq 5 ] || die "redlock: LOCKKIT_REDLOCK_PORTS needs 5 comma-separated ports"
    for p in "${RL_PORTS[@]}"; do
        [[ $p =~ ^[1-9][0-9]{0,4}$ && $p -le 65535 ]] || die "redlock: invalid port '$p' in LOCKKIT_REDLOCK_PORTS"
    done
    RL_DATA=$(mktemp -d "${TMPDIR:-/tmp}/lockkit-redlock.XXXXXX")
    (IFS=, && echo "PORTS=${RL_PORTS[*]}") >"$RL_STATE/ports"
    echo "$RL_DATA" >"$RL_STATE/datadir"
    log "redlock data dir: $RL_DATA"
}

# rl_discard: stop every recorded member, remove the data dir and the state.
rl_discard() {
    rl_stop_members "${RL_MEMBERS[@]}"
    if [[ $RL_DATA == */lockkit-redlock.?????? && -d $RL_DATA ]]; then
        rm -rf -- "$RL_DATA"
        log "removed $RL_DATA"
    fi
    rm -f "$RL_STATE"/*.pid "$RL_STATE/datadir" "$RL_STATE/ports" "$RL_STATE/env.sh" "$RL_STATE/env.sh.tmp"
}

rl_port() { echo "${RL_PORTS[${1#redlock} - 1]}"; } # MEMBER (redlockN, checked by member_profile)

rl_recorded_pid() { [ -f "$RL_STATE/$1.pid" ] && cat "$RL_STATE/$1.pid"; }

# MEMBER PID: PID is alive and still MEMBER's server (redis-server rewrites its title to
# "redis-server 127.0.0.1:PORT"; --dir makes it chdir).
rl_pid_is_ours() {
    pid_alive "$2" && pid_cmd_has "$2" ":$(rl_port "$1")" && [ "$(pid_cwd "$2")" = "$RL_DATA/$1" ]
}

rl_answers() { [ "$(timeout 3 redis-cli -h 127.0.0.1 -p "$(rl_port "$1")" ping 2>/dev/null)" = PONG ]; }

rl_member_ok() { # MEMBER: recorded, ours and answering
    local pid
    pid=$(rl_recorded_pid "$1") && rl_pid_is_ours "$1" "$pid" && rl_answers "$1"
}

# rl_start_members MEMBER...: check every port is free, then start each and wait for it (Redis
# answers within ~20 ms). The members must not be running.
rl_start_members() {
    local m pid deadline
    for m in "$@"; do
        check_port_free "$m" "$(rl_port "$m")" "LOCKKIT_REDLOCK_PORTS (see scripts/services.d/redlock.sh)" || return 1
    done
    for m in "$@"; do
        mkdir -p "$RL_DATA/$m"
        log "starting $m on port $(rl_port "$m")"
        spawn "$RL_STATE/$m.pid" "$RL_DATA/$m/server.log" redis-server --port "$(rl_port "$m")" \
            --bind 127.0.0.1 --save '' --appendonly no --dir "$RL_DATA/$m" || true
        pid=$(rl_recorded_pid "$m") || pid=
        deadline=$((SECONDS + READY_TIMEOUT))
        until rl_answers "$m" && rl_pid_is_ours "$m" "$pid"; do
            if ! pid_alive "$pid" || [ "$SECONDS" -ge "$deadline" ]; then
                log "$m (pid ${pid:-none}) exited or did not answer on port $(rl_port "$m") within ${READY_TIMEOUT}s"
                show_file_tail "$RL_DATA/$m/server.log"
                return 1
            fi
            sleep 0.1
        done
        log "$m is up (pid $pid, port $(rl_port "$m"))"
    done
}

rl_stop_members() { # MEMBER...: by recorded PID only
    local m pid
    for m in "$@"; do
        pid=$(rl_recorded_pid "$m") || continue
        if rl_pid_is_ours "$m" "$pid"; then
            kill_pid "$m" "$pid" "$(rl_port "$m")"
        elif pid_alive "$pid"; then
            log "$m: pid $pid is no longer our server; not touching it"
        fi
        rm -f "$RL_STATE/$m.pid"
    done
}

# ---------------------------------------------------------------------------------------------
# the profile contract

redlock_members() { printf '%s\n' "${RL_MEMBERS[@]}"; }

redlock_up() { # keeps the members that answer, restarts the rest on the recorded ports
    local m p hosts='' need=() fresh=''
    if rl_open lock; then
        for m in "${RL_MEMBERS[@]}"; do
            if rl_member_ok "$m"; then
                log "$m already up (pid $(rl_recorded_pid "$m"))"
            else
                need+=("$m")
            fi
        done
        # Nothing of it runs (e.g. after a reboot): start afresh rather than revive stale state.
        if [ ${#need[@]} -eq ${#RL_MEMBERS[@]} ]; then
            log "redlock: no member of the recorded profile answers; starting afresh"
            rl_discard
        fi
    fi
    if [ ! -f "$RL_STATE/datadir" ]; then
        rl_new_state
        fresh=1
        need=("${RL_MEMBERS[@]}")
    fi
    if [ ${#need[@]} -gt 0 ]; then
        rl_stop_members "${need[@]}" # clears stale/unresponsive recorded pids
        if ! rl_start_members "${need[@]}"; then
            [ -z "$fresh" ] || rl_discard
            die "redlock: could not start: ${need[*]}"
        fi
    fi
    for p in "${RL_PORTS[@]}"; do hosts="$hosts${hosts:+,}127.0.0.1:$p"; done
    echo "export LOCKKIT_TEST_REDLOCK_URL=redlock://$hosts" >"$RL_STATE/env.sh.tmp"
    mv "$RL_STATE/env.sh.tmp" "$RL_STATE/env.sh"
    cat "$RL_STATE/env.sh"
}

redlock_down() {
    rl_open lock || log "redlock: nothing is up (no state in $RL_STATE)"
    rl_discard
}

redlock_status() {
    rl_open || {
        echo "redlock: not up (no state in $RL_STATE)"
        return 1
    }
    local m pid st rc=0
    echo "state dir: $RL_STATE"
    echo "data dir:  $RL_DATA"
    printf '%-10s %-8s %-6s %-10s %s\n' MEMBER PID PORT STATE LOG
    for m in "${RL_MEMBERS[@]}"; do
        pid=$(rl_recorded_pid "$m") || pid=-
        if [ "$pid" = - ]; then
            st=stopped
        elif ! rl_pid_is_ours "$m" "$pid"; then
            st=dead
        elif [ "$(proc_state "$pid")" = T ]; then
            st=paused
        elif rl_answers "$m"; then
            st=up
        else
            st=no-answer
        fi
        [ "$st" = up ] || rc=1
        printf '%-10s %-8s %-6s %-10s %s\n' "$m" "$pid" "$(rl_port "$m")" "$st" "$RL_DATA/$m/server.log"
    done
    return "$rc"
}

redlock_env() {
    RL_STATE=$(profile_dir redlock)
    [ -f "$RL_STATE/env.sh" ] || die "the redlock profile is not up (no $RL_STATE/env.sh); run '$0 up --redlock'"
    cat "$RL_STATE/env.sh"
}

redlock_start() {
    rl_open lock || die "the redlock profile is not set up; run '$0 up --redlock' first"
    [ -d "$RL_DATA" ] || die "data dir $RL_DATA is gone; run '$0 down --redlock' then '$0 up --redlock'"
    if rl_member_ok "$1"; then
        log "$1 already up (pid $(rl_recorded_pid "$1"))"
        return 0
    fi
    rl_stop_members "$1"
    rl_start_members "$1" || die "could not start $1"
}

redlock_stop() {
    if ! rl_open lock || [ ! -f "$RL_STATE/$1.pid" ]; then
        log "$1: not running (no pid recorded)"
        return 0
    fi
    rl_stop_members "$1"
}

redlock_pid() {
    local pid
    rl_open && pid=$(rl_recorded_pid "$1") && rl_pid_is_ours "$1" "$pid" && echo "$pid"
}
