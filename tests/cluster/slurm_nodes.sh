#!/usr/bin/env bash
# A real SLURM cluster of several hosts on this machine, each host a network namespace, to check
# profiles/slurm across nodes (tests/cluster/check_slurm_profile.py --nodes N).
#
#   tests/cluster/slurm_nodes.sh up [N]           # a head and N compute nodes (default 3); installs (apt) if missing
#   tests/cluster/slurm_nodes.sh down             # kill every process of its hosts, remove namespaces and files
#   tests/cluster/slurm_nodes.sh status           # the hosts, their processes, sinfo
#   tests/cluster/slurm_nodes.sh exec HOST CMD... # run CMD on HOST (its network, hostname and mounts)
#   tests/cluster/slurm_nodes.sh kill NODE        # the node dies: its link down, every process in it killed
#   tests/cluster/slurm_nodes.sh link NODE up|down
#   tests/cluster/slurm_nodes.sh signal NODE SIG  # SIG to every process on the node (a shutdown's SIGTERM)
#   tests/cluster/slurm_nodes.sh revive NODE      # the node boots again: link up, a fresh /tmp, slurmd
#
# Hosts: gpstudy-head (slurmctld, slurmdbd on a MariaDB, the one munged; the submit host) and
# gpstudy-n1..N (one slurmd each). Each is a network namespace (`ip netns add`) entered with
# `nsenter --net=/run/netns/HOST` (not `ip netns exec`, which remounts /sys without cgroups), plus the UTS
# namespace (its hostname) and mount namespace of a holder process that lives as long as the host:
# there /etc/slurm is this cluster's configuration folder and /etc/hosts its hosts file (bind mounts the
# machine never sees), and on a node /tmp is a tmpfs of its own (node-local scratch, lost when the node
# dies) into which the shared folders under /tmp (this folder, the repository, $GPSTUDY_SLURM_SHARED)
# are bound back: every host sees the same results folder, none another's /tmp. The hosts meet on a
# bridge inside the head's namespace (a veth pair per node, addresses $SUBNET.0/24): no interface, route
# or address is added to the machine's own network, and the daemons listen on the namespaces' own
# addresses and loopbacks only. Debian's slurm-wlm 22.05: proctrack/linuxproc and task/none (no cgroups
# needed); munge's socket named by AuthInfo=socket= and, for slurmdbd, AccountingStoragePass=socket=
# (its folder mode 755, so the nodes' slurmstepd can reach it).
#
# `down` (also run when `up` fails midway) kills every process in the hosts' namespaces, deletes the
# namespaces, unmounts /run/netns where `ip netns add` mounted it, and removes its folder but the logs
# ($GPSTUDY_SLURM_NODES_DIR, default $TMPDIR/gpstudy-slurm-nodes, then .../log). Needs root.
set -Eeuo pipefail

DIR=${GPSTUDY_SLURM_NODES_DIR:-${TMPDIR:-/tmp}/gpstudy-slurm-nodes}
REPO=$(cd "$(dirname "$0")/../.." && pwd -P)
SUBNET=${GPSTUDY_SLURM_SUBNET:-10.250.0}  # a /24 this machine does not use (checked by `up`)
HEAD=gpstudy-head NODE_PREFIX=gpstudy-n
MUNGE_SOCKET=$DIR/munge/munge.socket
# shellcheck source=slurm_common.sh
source "$(dirname "$0")/slurm_common.sh"  # CLUSTER, ACCOUNT, DB_PASS (the head's MariaDB, its loopback only), PACKAGES

nodes() { cat "$DIR/nodes" 2> /dev/null || true; }  # the compute nodes' names, one a line
address() {  # the host's address on the bridge: head .1, node i .(10 + i)
    if [[ $1 == "$HEAD" ]]; then echo "$SUBNET.1"; else echo "$SUBNET.$((10 + ${1#"$NODE_PREFIX"}))"; fi
}

holder() { cat "$DIR/run/$1.holder"; }  # the pid holding the host's UTS and mount namespaces

on_host() {  # on_host HOST: ENTER=the command prefix that runs a command in HOST's network, UTS and mount namespaces
    local pid
    pid=$(holder "$1")
    ENTER=(nsenter --net="/run/netns/$1" --uts="/proc/$pid/ns/uts" --mount="/proc/$pid/ns/mnt" --wd="$PWD" --)
}

enter() {  # enter HOST CMD...: run CMD on HOST
    on_host "$1"; shift
    "${ENTER[@]}" "$@"
}

ns_pids() {  # the pids whose network namespace is HOST's
    local ns
    ns=$(stat -L -c %i "/run/netns/$1" 2> /dev/null) || return 0
    for p in /proc/[0-9]*; do
        [[ $(readlink "$p/ns/net" 2> /dev/null) == "net:[$ns]" ]] && echo "${p#/proc/}"
    done
    return 0
}

kill_all() {  # kill_all HOST: SIGKILL every process in HOST's network namespace until none is left
    local pids
    for _ in $(seq 50); do
        pids=$(ns_pids "$1")
        [[ -z $pids ]] && return 0
        # shellcheck disable=SC2086
        kill -9 $pids 2> /dev/null || true
        sleep 0.2
    done
    log "processes of $1 still alive: $(ns_pids "$1" | tr '\n' ' ')"; return 1
}

shared_paths() {  # the folders every host sees: this one, the repository, $GPSTUDY_SLURM_SHARED (colon-separated)
    local p extra=${GPSTUDY_SLURM_SHARED:-}
    for p in "$DIR" "$REPO" ${extra//:/ }; do
        [[ -n $p ]] && realpath -m "$p"
    done | sort -u
}

start_holder() {  # start_holder HOST: its hostname, /etc/slurm and /etc/hosts, on a node a private /tmp
    local host=$1 private_tmp=0 script
    [[ $host == "$HEAD" ]] || private_tmp=1
    # Runs inside the new mount namespace (private propagation: nothing reaches the machine's mounts).
    # A node's /tmp: a tmpfs, the shared folders under /tmp bound back from the old /tmp (the cwd).
    script='set -e; hostname "$1"; mount --bind "$2/etc" /etc/slurm; mount --bind "$2/hosts" /etc/hosts
        if [[ $3 == 1 ]]; then
            cd /tmp; mount -t tmpfs -o size=2g,mode=1777 "$1-tmp" /tmp
            for p in $4; do if [[ $p == /tmp/* ]]; then mkdir -p "$p"; mount --no-canonicalize --bind "./${p#/tmp/}" "$p"; fi; done
            cd /
        fi
        exec sleep infinity'
    for p in $(shared_paths); do mkdir -p "$p"; done
    setsid nsenter --net="/run/netns/$host" unshare --uts --mount --propagation private -- \
        bash -c "$script" holder "$host" "$DIR" "$private_tmp" "$(shared_paths | tr '\n' ' ')" \
        < /dev/null > "$DIR/log/$host.holder.log" 2>&1 &
    echo $! > "$DIR/run/$host.holder"
    wait_for 10 "$host's namespaces" bash -c "[[ \$(readlink /proc/$!/ns/uts) != \$(readlink /proc/self/ns/uts) ]] \
        && [[ \$(readlink /proc/$!/exe) == */sleep ]]"
}

add_namespace() {  # add_namespace HOST: its network namespace, loopback up
    if ! grep -q " /run/netns " /proc/mounts && [[ ! -e $DIR/run/netns-mounted ]]; then
        [[ -d /run/netns ]] || touch "$DIR/run/netns-dir-made"
        touch "$DIR/run/netns-mounted"  # `ip netns add` mounts /run/netns: `down` unmounts it
    fi
    ip netns add "$1"
    ip -n "$1" link set lo up
}

wire_node() {  # wire_node NODE: a veth pair, its head end on the head's bridge
    local node=$1 port=v-${1#"$NODE_PREFIX"}
    ip -n "$HEAD" link add "$port" type veth peer name eth0 netns "$node"
    ip -n "$HEAD" link set "$port" master br0 up
    ip -n "$node" addr add "$(address "$node")/24" dev eth0
    ip -n "$node" link set eth0 up
}

link() {  # link NODE up|down: both ends of its veth pair
    local node=$1 state=$2
    ip -n "$node" link set eth0 "$state" 2> /dev/null || true
    ip -n "$HEAD" link set "v-${node#"$NODE_PREFIX"}" "$state"
}

write_configs() {
    local n=$1 hardware
    hardware=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')  # CPUs=... RealMemory=...: each node this machine's
    mknod "$DIR/dev/gpu0" c 1 3  # the fake GPU: a device like /dev/null (SLURM accounts for it; no GPU behind it)
    {
        echo "127.0.0.1 localhost"
        echo "$(address "$HEAD") $HEAD"
        for i in $(seq "$n"); do echo "$(address "$NODE_PREFIX$i") $NODE_PREFIX$i"; done
    } > "$DIR/hosts"
    cat > "$DIR/etc/slurm.conf" << EOF
# Generated by tests/cluster/slurm_nodes.sh: a head and $n nodes, each a network namespace.
ClusterName=$CLUSTER
SlurmctldHost=$HEAD($(address "$HEAD"))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
StateSaveLocation=$DIR/spool/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# A node that stops answering is DOWN after SlurmdTimeout (its jobs NODE_FAIL, requeued unless --no-requeue);
# one that registers again returns to service by itself.
SlurmdTimeout=30
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
KillWait=5
OverTimeLimit=0
MinJobAge=300
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$HEAD
AccountingStoragePass=socket=$MUNGE_SOCKET
AccountingStorageEnforce=associations
AccountingStorageTRES=gres/gpu
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
JobCompType=jobcomp/none
EOF
    for i in $(seq "$n"); do
        echo "NodeName=$NODE_PREFIX$i NodeAddr=$(address "$NODE_PREFIX$i") $hardware Gres=gpu:1 State=UNKNOWN"
    done >> "$DIR/etc/slurm.conf"
    cat >> "$DIR/etc/slurm.conf" << EOF
PartitionName=cpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=ALL MaxTime=INFINITE State=UP
EOF
    echo "Name=gpu File=$DIR/dev/gpu0" > "$DIR/etc/gres.conf"
    cat > "$DIR/etc/slurmdbd.conf" << EOF
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=$HEAD
SlurmUser=root
PidFile=$DIR/run/slurmdbd.pid
LogFile=$DIR/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
    chmod 600 "$DIR/etc/slurmdbd.conf"
}

start_head() {
    local db=$DIR/mysql
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$DIR/munge/munge.key"
    enter "$HEAD" munged --socket="$MUNGE_SOCKET" --key-file="$DIR/munge/munge.key" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
    wait_for 10 munged enter "$HEAD" munge -n --socket="$MUNGE_SOCKET"
    mkdir -p "$db/data" && chown -R mysql:mysql "$db"
    mariadb-install-db --no-defaults --user=mysql --datadir="$db/data" --skip-test-db > "$DIR/log/mariadb-install.log" 2>&1
    on_host "$HEAD"  # a simple command in the background: no shell of this script waits beside it
    "${ENTER[@]}" setsid mariadbd --no-defaults --user=mysql --datadir="$db/data" --socket="$db/mysql.sock" \
        --bind-address=127.0.0.1 --pid-file="$db/mariadbd.pid" --log-error="$DIR/log/mariadbd.log" \
        --innodb-buffer-pool-size=64M < /dev/null > /dev/null 2>&1 &
    wait_for 60 mariadbd mariadb --no-defaults --socket="$db/mysql.sock" -e "SELECT 1"
    mariadb --no-defaults --socket="$db/mysql.sock" -e "
        CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
    enter "$HEAD" slurmdbd
    wait_for 60 slurmdbd enter "$HEAD" sacctmgr -n list cluster
    enter "$HEAD" sacctmgr -i add cluster "$CLUSTER" > /dev/null
    enter "$HEAD" sacctmgr -i add account "$ACCOUNT" cluster="$CLUSTER" description="gpstudy profile check" > /dev/null
    enter "$HEAD" sacctmgr -i add user root account="$ACCOUNT" defaultaccount="$ACCOUNT" > /dev/null
    enter "$HEAD" slurmctld
    wait_for 60 slurmctld enter "$HEAD" scontrol ping
}

idle() {  # idle NODE: the controller has it up (idle, or mixed/allocated already)
    enter "$HEAD" sinfo -h -n "$1" -N -o %t | grep -Eqx 'idle|mix|alloc'
}

start_node() {
    start_holder "$1"
    enter "$1" slurmd
    wait_for 60 "$1 to come up" idle "$1"
}

check_subnet() {
    if ip -o addr | grep -q " $SUBNET\." || ip route | grep -q "^$SUBNET\."; then
        log "$SUBNET.0/24 is in use on this machine: set GPSTUDY_SLURM_SUBNET to a free /24 (first three octets)"
        exit 1
    fi
}

up() {
    local n=${1:-3}
    [[ $(id -u) == 0 ]] || { log "needs root (namespaces, mounts, slurmd running jobs as their users, apt)"; exit 1; }
    if ip netns list | grep -q '^gpstudy-'; then log "gpstudy namespaces exist already: run '$0 down' first"; exit 1; fi
    check_subnet
    rm -rf "$DIR"
    mkdir -p "$DIR"/{etc,log,run,spool/ctld,munge,dev}
    chmod 755 "$DIR" "$DIR/munge"  # munge's socket folder: every host's slurmstepd and client reaches it
    trap 'log "up failed: tearing down"; down' ERR
    install_packages
    for i in $(seq "$n"); do echo "$NODE_PREFIX$i"; done > "$DIR/nodes"
    write_configs "$n"
    add_namespace "$HEAD"
    ip -n "$HEAD" link add br0 type bridge
    ip -n "$HEAD" addr add "$(address "$HEAD")/24" dev br0
    ip -n "$HEAD" link set br0 up
    for node in $(nodes); do add_namespace "$node" && wire_node "$node"; done
    start_holder "$HEAD"
    start_head
    for node in $(nodes); do start_node "$node"; done
    trap - ERR
    log "up: $HEAD and $(nodes | tr '\n' ' ')(partitions cpu and gpu, account $ACCOUNT); logs in $DIR/log"
}

down() {
    local failed=0
    for host in $(ip netns list | awk '/^gpstudy-/ {print $1}'); do kill_all "$host" || failed=1; done
    for host in $(ip netns list | awk '/^gpstudy-/ {print $1}'); do ip netns del "$host" || failed=1; done
    if [[ -e $DIR/run/netns-mounted ]] && ! ip netns list | grep -q .; then
        umount /run/netns 2> /dev/null || true
        [[ -e $DIR/run/netns-dir-made ]] && rmdir /run/netns 2> /dev/null
    fi
    if [[ -d $DIR ]]; then find "$DIR" -mindepth 1 -maxdepth 1 ! -name log -exec rm -rf {} +; fi
    log "down (logs left in $DIR/log)"
    return $failed
}

kill_node() {  # the node dies: unreachable first (no word of its jobs reaches the controller), then every process gone
    link "$1" down
    kill_all "$1"
}

revive() {  # the node boots again: link up, a new /tmp, slurmd
    link "$1" up
    start_node "$1"
}

status() {
    for host in $(ip netns list | awk '/^gpstudy-/ {print $1}'); do
        echo "$host: $(ns_pids "$host" | xargs -r ps -o comm= -p | sort | uniq -c | awk '{print $2 "x" $1}' | tr '\n' ' ')"
    done
    [[ -s $DIR/run/$HEAD.holder ]] && enter "$HEAD" sinfo -N
    return 0
}

case ${1:-} in
    up) up "${2:-3}" ;;
    down) down ;;
    status) status ;;
    exec) host=$2; shift 2; [[ ${1:-} == -- ]] && shift; on_host "$host"; exec "${ENTER[@]}" "$@" ;;
    kill) kill_node "$2" ;;
    link) link "$2" "$3" ;;
    signal) pids=$(ns_pids "$2"); [[ -z $pids ]] || kill -s "$3" $pids ;;
    revive) revive "$2" ;;
    *) echo "usage: $0 up [N]|down|status|exec HOST CMD...|kill NODE|link NODE up|down|signal NODE SIG|revive NODE" >&2; exit 2 ;;
esac
