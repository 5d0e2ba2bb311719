#!/bin/sh
# dbsurge's image entrypoint: `locust ARGS`, after two fix-ups of the environment.
#  1. DBSURGE_X_FILE=/run/secrets/... sets DBSURGE_X from that file: Docker Compose and Kubernetes
#     secrets arrive as files, so the join token and the target's password stay out of `docker inspect`.
#  2. An empty DBSURGE_* or LOCUST_* variable (docker-compose.yml's `${RATE:-}` when RATE is not set)
#     is removed: Locust would take "" as the option's value and reject it.
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
exec locust "$@"
