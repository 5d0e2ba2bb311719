#!/bin/sh
# dbsurge's image entrypoint: `locust ARGS`, after three fix-ups of the environment.
#  1. DBSURGE_X_FILE=/run/secrets/... sets DBSURGE_X from that file: Docker Compose and Kubernetes
#     secrets arrive as files, so the join token and the target's password stay out of `docker inspect`.
#  2. An empty DBSURGE_* or LOCUST_* variable (docker-compose.yml's `${RATE:-}` when RATE is not set)
#     is removed: Locust would take "" as the option's value and reject it.
#  3. A worker gets a temporary folder of its own: Locust writes the locustfile a worker downloads
#     from its master (`-f -`) to $TMPDIR/<the file's name> and imports it from there, so workers that
#     share a temporary folder (several on one host or in one container) could import each other's
#     half-written copy and stop at "No User class found!". The worker removes it when it exits.
set -eu
for name in $(env | sed -n 's/^\(DBSURGE_[A-Z0-9_]*\)_FILE=.*/\1/p'); do
  eval "file=\${${name}_FILE}"
  unset "${name}_FILE"
  [ -n "$file" ] || continue
  [ -r "$file" ] || { echo "dbsurge: cannot read ${name}_FILE=$file" >&2; exit 2; }
  value=$(cat "$file")
  export "$name=$value"
done
for name in $(env | sed -n 's/^\(\(DBSURGE\|LOCUST\)_[A-Z0-9_]*\)=$/\1/p'); do
  unset "$name"
done
case " $* " in
  *" --worker "*)
    # dbsurge-worker- is dbsurge.commands.worker.TMPDIR_PREFIX (test_deploy holds them together)
    TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/dbsurge-worker-XXXXXX")
    # the worker (this process, once exec'd: $$) removes it when it exits (dbsurge.commands.worker.remove_own_tmpdir)
    DBSURGE_WORKER_TMPDIR=$TMPDIR
    DBSURGE_WORKER_TMPDIR_PID=$$
    export TMPDIR DBSURGE_WORKER_TMPDIR DBSURGE_WORKER_TMPDIR_PID
    ;;
esac
exec locust "$@"
