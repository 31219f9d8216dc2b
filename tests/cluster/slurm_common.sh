# What tests/cluster/slurm_cluster.sh (one node) and slurm_nodes.sh (a head and N nodes) share, sourced by
# both: the test cluster's names, the Debian packages it runs on, and their helpers. Each script sets DIR
# (its state folder) before it sources this file. `slurm_common.sh packages` prints the packages' names
# (.ci/run and tests/cluster/test_multinode.py ask it).

CLUSTER=gpstudy ACCOUNT=gpstudy  # the SLURM cluster and the account of root's jobs
DB_PASS=gpstudy-local            # the MariaDB user slurm's password; its server listens on a loopback only
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)

log() { echo "$(basename "$0" .sh): $*" >&2; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...: poll until COMMAND succeeds
    local seconds=$1 what=$2; shift 2
    for _ in $(seq "$seconds"); do
        if "$@" > /dev/null 2>&1; then return 0; fi
        sleep 1
    done
    log "gave up waiting for $what (logs in $DIR/log)"; return 1
}

missing_packages() {  # the PACKAGES dpkg does not have installed, one a line
    for p in "${PACKAGES[@]}"; do dpkg -s "$p" > /dev/null 2>&1 || echo "$p"; done
}

install_packages() {  # apt-get install the missing PACKAGES (its output in $DIR/log/apt.log)
    local missing
    mapfile -t missing < <(missing_packages)
    if ((${#missing[@]})); then
        log "installing ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" > "$DIR/log/apt.log"
    fi
}

if [[ ${BASH_SOURCE[0]} == "$0" && ${1:-} == packages ]]; then printf '%s\n' "${PACKAGES[@]}"; fi
