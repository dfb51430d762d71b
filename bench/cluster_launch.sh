#!/usr/bin/env bash
# The cluster path run for real on one machine: a two-node Ray cluster started by `ray up` from
# cluster/onprem.yaml (Ray's "local" provider, over SSH), its head on 127.0.0.2 and a worker node on 127.0.0.3 (Ray
# replaces 127.0.0.1 by the machine's network address, which the launcher would not know the head by),
# then a run by `ray exec`, a run as a Ray job, a run that loses the worker node, and `ray down`. Prints each
# step's seconds as a table (cluster/README.md). The cloud configs cannot start nodes here: what their nodes run beyond
# onprem.yaml's lines (their head setup commands, the shell settings before `ray start`) runs on the loopback head.
#
# The nodes run as an ordinary user ($RAYSIM_NODE_USER, default "raysim") with its own virtual environment, so this
# checkout's environment is left alone; the user, its environment and its copy of the repository stay for the next
# run (which then skips the installs). The worker node's SSH daemon runs in a PID namespace of its own: `ray stop` on
# one node then stops that node's Ray only, as on two machines. What differs from two machines: one file system
# (both nodes see the same home; each node and the launcher get a Ray temp folder of their own, as /tmp on three
# machines) and one loopback network.
#
# Needs root (installs openssh-server, rsync and python3-venv if absent, adds the user, starts two SSH daemons on
# 127.0.0.2:22 and 127.0.0.3:22, so no other SSH daemon may hold port 22 on all addresses). Run from anywhere:
#   bash bench/cluster_launch.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NODE_USER=${RAYSIM_NODE_USER:-raysim}
HEAD_IP=127.0.0.2
WORKER_IP=127.0.0.3
WORK=$(mktemp -d /tmp/raysim-cluster.XXXXXX)  # logs and the SSH daemons' pid files
TRACKING=http://127.0.0.1:5000                 # the head's MLflow server (cluster/README.md)
ROUNDS=20                                      # the job and the node-loss run: long enough to lose a node in
SSH="ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -i ~/.ssh/raysim_cluster"

declare -a TIMES=()
step() {  # step NAME COMMAND...: run it, record its seconds
  local name=$1
  shift
  echo
  echo "== $name"
  local start=$SECONDS
  "$@"
  TIMES+=("$name|$((SECONDS - start))")
}

as_node() {  # a login shell of the node user, in its copy of the repository (the machine running ray up)
  su - "$NODE_USER" -c ". ~/.raysim-node-env && cd ~/launch/raysim && $*"
}
on_head() {  # a command on the head node, as a cluster user runs one
  as_node "ray exec ~/loopback.yaml $(printf '%q' "$*")"
}
on_worker_node() {  # a command on the worker node over SSH (ray exec reaches the head only)
  as_node "$SSH $NODE_USER@$WORKER_IP $(printf '%q' ". ~/.raysim-node-env && $*")"
}
ray_job() {  # ray_job VERB ARGS...: a `ray job` command against the head's job server, with the cluster's token
  local verb=$1
  shift
  as_node "RAY_AUTH_MODE=token ray job $verb --address http://127.0.0.1:8265 $*"
}

prerequisites() {
  local missing=() port
  # the head's GCS, job server and dashboard agent, the worker node's agent, and the head's MLflow server: no other Ray
  # or MLflow may hold them (a foreign server on 5000 would answer the health check and take the runs)
  for port in 6379 8265 52365 52375 5000; do
    if ss -ltn "sport = :$port" | grep -q LISTEN; then
      echo "port $port is taken (another Ray or MLflow server on this machine?); stop it first" >&2
      return 1
    fi
  done
  command -v sshd >/dev/null || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
  command -v rsync >/dev/null || missing+=(rsync)
  python3 -c "import ensurepip" 2>/dev/null || missing+=(python3-venv)
  if [ ${#missing[@]} -gt 0 ]; then
    apt-get install -y -q "${missing[@]}" >"$WORK/apt.log" 2>&1 \
      || { apt-get update -q >>"$WORK/apt.log" 2>&1 && apt-get install -y -q "${missing[@]}" >>"$WORK/apt.log" 2>&1; }
  fi
}

node_user() {  # the account both nodes run as: Python >= 3.10 as `python` (a venv), an SSH key, pip's settings
  id "$NODE_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$NODE_USER"
  local home
  home=$(getent passwd "$NODE_USER" | cut -d: -f6)
  [ -x "$home/venv/bin/python" ] || su - "$NODE_USER" -c "python3 -m venv ~/venv"
  {
    echo ". ~/venv/bin/activate"
    # a Ray temp folder per node (the address it was reached at) and for the launcher, apart from /tmp/ray
    echo 'export RAY_TMPDIR=/tmp/raysim-node-$(echo ${SSH_CONNECTION:-- - launcher} | cut -d" " -f3)'
    env | grep '^PIP_' | sed 's/^/export /' || true  # this machine's pip settings (its wheel folder)
  } >"$home/.raysim-node-env"
  grep -q raysim-node-env "$home/.bashrc" 2>/dev/null \
    || sed -i '1i . ~/.raysim-node-env  # raysim cluster node (bench/cluster_launch.sh)' "$home/.bashrc"
  mkdir -p "$home/.ssh"
  [ -f "$home/.ssh/raysim_cluster" ] || ssh-keygen -q -t ed25519 -N '' -C raysim-cluster -f "$home/.ssh/raysim_cluster"
  cp "$home/.ssh/raysim_cluster.pub" "$home/.ssh/authorized_keys"
  chown -R "$NODE_USER:" "$home/.ssh" "$home/.raysim-node-env"
  chmod 700 "$home/.ssh"
  chmod 600 "$home/.ssh/authorized_keys" "$home/.ssh/raysim_cluster"
}

ssh_daemons() {  # the head's in this PID namespace, the worker node's in a new one
  mkdir -p /run/sshd
  /usr/sbin/sshd -o ListenAddress=$HEAD_IP -o PidFile="$WORK/sshd-head.pid"
  setsid unshare --pid --fork --mount-proc /usr/sbin/sshd -D -o ListenAddress=$WORKER_IP -o PidFile=/run/sshd-worker.pid \
    >"$WORK/sshd-worker.log" 2>&1 </dev/null &
  echo $! >"$WORK/sshd-worker.pid"
  for ip in $HEAD_IP $WORKER_IP; do
    for _ in $(seq 50); do
      su - "$NODE_USER" -c "$SSH -o BatchMode=yes $NODE_USER@$ip true" 2>/dev/null && continue 2
      sleep 0.2
    done
    echo "no SSH login to $NODE_USER@$ip (is another SSH daemon holding port 22?)" >&2
    exit 1
  done
}

launching_copy() {  # the repository as a user has it (tracked and untracked files but what .gitignore names)
  local home
  home=$(getent passwd "$NODE_USER" | cut -d: -f6)
  mkdir -p "$home/launch/raysim"
  rsync -a --delete --exclude .git --filter=':- .gitignore' "$ROOT/" "$home/launch/raysim/"
  chown -R "$NODE_USER:" "$home/launch"
}

loopback_yaml() {  # cluster/onprem.yaml with this machine's addresses, the node user and its key
  local home
  home=$(getent passwd "$NODE_USER" | cut -d: -f6)
  python3 - "$ROOT/cluster/onprem.yaml" "$home/loopback.yaml" "$NODE_USER" $HEAD_IP $WORKER_IP <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
for pattern, value in [
    (r"head_ip: .*", f"head_ip: {sys.argv[4]}"),
    (r"worker_ips:\n(    - .*\n)+", f"worker_ips:\n    - {sys.argv[5]}\n"),
    (r"max_workers: .*", "max_workers: 1"),
    (r"ssh_user: .*", f"ssh_user: {sys.argv[3]}"),
    (r"ssh_private_key: .*", "ssh_private_key: ~/.ssh/raysim_cluster"),
]:
    text, count = re.subn(pattern, value, text, count=1)
    assert count == 1, f"cluster/onprem.yaml has no {pattern!r}"
# Two nodes on one machine: the worker node takes a Ray temp folder of its own (else it shares the head's, whose
# runtime-env agent and its own then delete each other's job files) and a dashboard-agent port the head's does not hold.
text, count = re.subn(
    r"(ray start --address=\S+\s+--node-ip-address=\$NODE_IP)",
    r"\1 --temp-dir=/tmp/raysim-node-$NODE_IP --dashboard-agent-listen-port=52375",
    text,
)
assert count == 1, "cluster/onprem.yaml's worker_start_ray_commands changed"
open(sys.argv[2], "w").write(text)
EOF
  chown "$NODE_USER:" "$home/loopback.yaml"
}

install_launcher() {
  as_node "python -m pip install -q -c constraints.txt -e ."
  as_node "ray get-auth-token --generate >/dev/null"  # the cluster's token (cluster/onprem.yaml's file_mounts)
}
ray_up() {
  CLUSTER_UP=1
  as_node "ray up -y ~/loopback.yaml"
}
worker_joins() { on_head "python ~/raysim/bench/cluster_probe.py nodes 2 900"; }
mlflow_server() {
  on_head 'mkdir -p ~/raysim-runs && nohup mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri sqlite:///$HOME/raysim-runs/mlflow.db --artifacts-destination $HOME/raysim-runs/mlartifacts > ~/raysim-runs/mlflow.log 2>&1 < /dev/null &'
  on_head "python ~/raysim/bench/cluster_probe.py http $TRACKING/health 120"
}
exec_run() {
  on_head "cd ~/raysim && raysim run sgpt --address auto --clients 100 --rounds 3 --workers 2 \
    --tracking-uri $TRACKING --experiment cluster-exec"
  on_head "python ~/raysim/bench/cluster_probe.py pool $TRACKING cluster-exec" | tee "$WORK/pool.txt"
}
address_runs() {  # the head's address given: Ray sends the cluster's token only under RAY_AUTH_MODE=token
  if on_head "cd ~/raysim && env -u RAY_AUTH_MODE raysim run fedvpt --address $HEAD_IP:6379 --preset quick \
    --rounds 1 --workers 1 --tracking-uri $TRACKING --experiment cluster-address" >"$WORK/no-mode.log" 2>&1; then
    echo "a run that sends no token joined a cluster that asks for one" >&2
    return 1
  fi
  grep "raysim: error: the Ray cluster at '$HEAD_IP:6379' asks for a token" "$WORK/no-mode.log"
  on_head "cd ~/raysim && RAY_AUTH_MODE=token raysim run fedvpt --address $HEAD_IP:6379 --preset quick --rounds 1 \
    --workers 1 --tracking-uri $TRACKING --experiment cluster-address" | grep "^MLflow run "
}
job_run() {
  ray_job submit --submission-id raysim-job-$$ --working-dir . \
    -- raysim run fedvpt --address auto --preset quick --rounds $ROUNDS --workers 2 \
    --tracking-uri $TRACKING --set checkpoint.dir=~/raysim-runs/checkpoints --experiment cluster-job
  ray_job status raysim-job-$$ | tee "$WORK/job-status.txt"
  grep -qi succeeded "$WORK/job-status.txt"
  ray_job logs raysim-job-$$ | tail -3
  # token authentication is on: a client with another token is refused
  if as_node "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=not-the-cluster-token ray job list --address http://127.0.0.1:8265" \
    >"$WORK/wrong-token.log" 2>&1; then
    echo "the job server answered a client without the cluster's token" >&2
    return 1
  fi
  grep -o "Authentication failed: [^.]*" "$WORK/wrong-token.log" | head -1
  # raysim's exit code is the job's status: a bad method name fails the job with raysim's one-line error
  if ray_job submit --submission-id raysim-bad-$$ --working-dir . -- raysim run no-such-method \
    >"$WORK/bad-job.log" 2>&1; then
    echo "a job with a bad method name did not fail" >&2
    return 1
  fi
  ray_job status raysim-bad-$$ | grep -i failed
  ray_job logs raysim-bad-$$ | grep "unknown method"
}
node_loss_run() {
  on_head "cd ~/raysim && raysim run fedvpt --address auto --preset quick --rounds $ROUNDS --workers 2 \
    --tracking-uri $TRACKING --set checkpoint.dir=~/raysim-runs/checkpoints --experiment cluster-node-loss" \
    >"$WORK/node-loss.log" 2>&1 &
  local run=$!
  on_head "python ~/raysim/bench/cluster_probe.py round $TRACKING cluster-node-loss 3 600"
  on_worker_node "ray stop"
  echo "worker node stopped"
  wait $run || { tail -20 "$WORK/node-loss.log"; return 1; }
  tail -5 "$WORK/node-loss.log"
  on_head "python ~/raysim/bench/cluster_probe.py same $TRACKING cluster-job cluster-node-loss"
}
cloud_commands() {  # what aws.yaml and gcp.yaml run on their nodes beyond onprem.yaml's lines, on the loopback head
  local name line
  for name in aws gcp; do
    while IFS= read -r line; do
      echo "$name.yaml: $line"
      on_head "$line" </dev/null >"$WORK/cloud-command.log" 2>&1 || { tail -5 "$WORK/cloud-command.log"; return 1; }
    done < <(python3 "$ROOT/bench/cluster_probe.py" commands "$ROOT/cluster/$name.yaml")
  done
  on_head "python -m pip check"  # the packages the head setup commands added fit raysim's
}
cluster_down() {  # the MLflow server ray exec started (ray down stops Ray only), then the cluster
  on_head "pkill -f '[m]lflow server' || true"
  as_node "ray down -y ~/loopback.yaml"
  CLUSTER_UP=
}
ray_down() {
  cluster_down
  # Ray processes `ray stop` did not stop within its grace period, then ssh's shared connections (ControlPersist=10s)
  for _ in $(seq 60); do
    pgrep -u "$NODE_USER" >/dev/null || return 0
    sleep 1
  done
  pgrep -u "$NODE_USER" -a
  echo "processes of $NODE_USER are left a minute after ray down" >&2
  return 1
}

cleanup() {  # on any exit: the cluster down if a failed step left it up, then the SSH daemons
  if [ -n "${CLUSTER_UP:-}" ]; then
    cluster_down >/dev/null 2>&1 || true
  fi
  [ -f "$WORK/sshd-head.pid" ] && kill "$(cat "$WORK/sshd-head.pid")" 2>/dev/null || true
  pkill -f "sshd -D -o ListenAddress=$WORKER_IP" 2>/dev/null || true
}
trap cleanup EXIT

step "prerequisites (openssh-server, rsync, python3-venv)" prerequisites
step "node user, its venv and SSH key" node_user
step "SSH daemons on $HEAD_IP and $WORKER_IP" ssh_daemons
step "launching copy of the repository" launching_copy
step "loopback copy of cluster/onprem.yaml" loopback_yaml
step "install raysim where ray up runs (pip -e .), make the token" install_launcher
step "ray up -y (head: file_mounts, setup_commands, ray start)" ray_up
step "worker node joins (its setup and ray start, by the autoscaler)" worker_joins
step "MLflow server on the head (cluster/README.md)" mlflow_server
step "ray exec: raysim run sgpt --clients 100 --rounds 3 --workers 2" exec_run
step "raysim run --address HEAD:6379, without and with RAY_AUTH_MODE=token" address_runs
step "ray job submit: raysim run fedvpt --preset quick --rounds $ROUNDS" job_run
step "node lost mid-run: same run, worker node's ray stop after round 3" node_loss_run
step "aws.yaml's and gcp.yaml's own setup and start-up lines, on the head" cloud_commands
step "ray down -y, no process left" ray_down

echo
echo "| step | seconds |"
echo "|---|---:|"
for row in "${TIMES[@]}"; do
  echo "| ${row%%|*} | ${row##*|} |"
done
echo
grep "worker " "$WORK/pool.txt"
echo "logs: $WORK"
